"""Checking lazy torch code against eager torch (used by lazyrt's tests, and
handy in yours): ``assert_same(lazy_result, eager_result)``."""
from __future__ import annotations

import torch

from .. import runtime
from . import to_cpu


def assert_same(lazy_result, eager_result, rtol=0.0, atol=0.0):
    """Same dtype, shape and values as eager (exact unless a tolerance is given;
    NaN equals NaN)."""
    got = to_cpu(lazy_result).detach()
    want = eager_result.detach()
    assert got.device.type == "cpu"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != eager {want.dtype}"
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != eager {tuple(want.shape)}"
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def backends() -> list[str]:
    """The backends the torch front-end's tests run on: the ``numpy`` oracle and the
    compiled CPU backend (Triton runs under its interpreter in CI, where one training
    step takes minutes; the native suite covers its kernels)."""
    return [b for b in ("numpy", "c") if b in runtime.available_backends()]
