"""GPU checks with PyTorch (gpu_checks.py): skipped without a real GPU."""
from __future__ import annotations

import pytest

import gpu_checks

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize('kind', ['asyncio', 'uvloop'])
@pytest.mark.parametrize('name', sorted(gpu_checks.CHECKS))
def test_gpu(name: str, kind: str) -> None:
    try:
        gpu_checks.CHECKS[name](kind)
    except gpu_checks.Skip as e:
        pytest.skip(str(e))
