"""The installed package: versions, files, the stable ABI, libuv."""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

import uvcuda
from uvcuda import _uvcuda
from conftest import ROOT, run_script


def test_versions_agree() -> None:
    here = pathlib.Path(__file__).resolve().parent.parent
    for path in (ROOT / 'include' / 'uvcuda.h',
                 here / 'vendor' / 'uvcuda' / 'include' / 'uvcuda.h'):
        if path.exists():
            break
    else:
        pytest.skip('uvcuda.h not found (neither a checkout nor an sdist)')
    header = path.read_text()
    parts = []
    for p in ('MAJOR', 'MINOR', 'PATCH'):
        m = re.search(rf'#define UVCUDA_VERSION_{p} (\d+)', header)
        assert m is not None
        parts.append(m.group(1))
    assert uvcuda.version == '.'.join(parts)
    pyproject = (here / 'pyproject.toml').read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == \
        uvcuda.__version__  # type: ignore[union-attr]
    assert uvcuda.__version__ == uvcuda.version


def test_files_of_the_package() -> None:
    pkg = pathlib.Path(uvcuda.__file__).parent
    assert (pkg / 'py.typed').exists()
    assert (pkg / '_uvcuda.pyi').exists()
    ext = pathlib.Path(_uvcuda.__file__)
    if _uvcuda.limited_api:
        assert _uvcuda.limited_api == 0x030B0000
        assert ext.name == '_uvcuda.abi3.so'


@pytest.mark.skipif(shutil.which('nm') is None, reason='no nm')
def test_only_the_module_init_is_exported() -> None:
    out = subprocess.run(['nm', '-D', '--defined-only', _uvcuda.__file__],
                         capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert names == ['PyInit__uvcuda']


def test_uvloop_shares_our_libuv() -> None:
    uvloop_loop = pytest.importorskip('uvloop.loop')
    v = uvloop_loop.libuv_get_version()
    assert uvcuda.uv_version() == f'{v >> 16}.{(v >> 8) & 0xff}.{v & 0xff}'
    _uvcuda._check_libuv(uvloop_loop.__file__, v)  # does not raise


def test_import_needs_no_driver() -> None:
    r = run_script('''
import uvcuda
print(uvcuda.version, uvcuda.err_name(-30001))
''', env={'UVCUDA_LIBCUDA': '/nonexistent.so'})
    assert r.returncode == 0, r.stderr
    assert 'UVCUDA_ENODRIVER' in r.stdout


def test_public_names() -> None:
    for name in uvcuda.__all__:
        assert hasattr(uvcuda, name), name
    assert issubclass(uvcuda.CudaError, RuntimeError)
