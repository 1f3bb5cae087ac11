"""Meson dist script: copies uvcuda's C sources into the sdist.

An sdist of bindings/python alone lacks ../../lib; this puts lib/, include/
and support/ (and the LICENSE) under vendor/uvcuda/ of the dist tree, where
meson.build looks when the repository is not around it, and the test
kernels (kernels.ptx) where the tests and the benchmark look.
"""
import os
import pathlib
import shutil

root = pathlib.Path(os.environ['MESON_SOURCE_ROOT']).resolve().parent.parent
dist = pathlib.Path(os.environ['MESON_DIST_ROOT']) / 'vendor' / 'uvcuda'
for sub in ('lib', 'include', 'support'):
    shutil.copytree(root / sub, dist / sub,
                    ignore=shutil.ignore_patterns('meson.build', '*.md'))
shutil.copy2(root / 'LICENSE', dist / 'LICENSE')
for rel in ('support/kernels.ptx', 'test/common/kernels.ptx'):
    if (root / rel).exists():
        shutil.copy2(root / rel, dist / 'kernels.ptx')
        break
