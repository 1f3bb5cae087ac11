"""Prints uvcuda's library sources (lib/*.c but the profiling timer), one a line.

The extension compiles the library in, as the Node addon does; the list is
read from the tree so that a file added to lib/ needs no change here.
"""
import pathlib
import sys

lib = pathlib.Path(sys.argv[1])
for path in sorted(lib.glob('*.c')):
    if path.name != 'prof.c':
        print(path.name)
