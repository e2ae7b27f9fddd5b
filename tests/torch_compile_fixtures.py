"""What the ``torch.compile(backend="lazyrt")`` test files share (imported by name:
``from torch_compile_fixtures import ...``): the backends they run on, a fresh
Dynamo per test, a backend that counts the graphs Dynamo hands it, and the
comparison against eager at a tolerance relative to each tensor's scale."""
from __future__ import annotations

import os

import pytest
import torch

import lazyrt as lr
import lazyrt.torch as lt


def backends_under_test() -> list[str]:
    """``LAZYRT_TEST_BACKENDS`` when set (``make test``'s jax pass names ``jax``),
    else every available backend but ``jax`` (opt-in, as in ``conftest.py``)."""
    chosen = os.environ.get("LAZYRT_TEST_BACKENDS")
    if chosen:
        return [b.strip() for b in chosen.split(",") if b.strip()]
    return [b for b in lr.available_backends() if b != "jax"]


#: every backend under test: triton (its CPU interpreter) and jax are slow, so only
#: a few tests take this list
EVERY_BACKEND = backends_under_test()
#: the numpy oracle and the C backend: what most tests run on
CORE_BACKENDS = [b for b in ("numpy", "c") if b in EVERY_BACKEND]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test starts from an empty Dynamo cache, with nothing pending, and may
    compile many graphs; hitting Dynamo's recompile limit is an error (Dynamo
    would otherwise run the function eagerly without a word)."""
    lr.sync()
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=64, fail_on_recompile_limit_hit=True):
        yield
    torch._dynamo.reset()
    lr.sync()


class CountingBackend:
    """``lt.backend(device)``, counting the graphs Dynamo hands it (a recompile is
    one more)."""

    def __init__(self, device: str):
        self.inner = lt.backend(device)
        self.graphs = 0

    def __call__(self, gm, example_inputs, **kwargs):
        self.graphs += 1
        return self.inner(gm, example_inputs, **kwargs)


def assert_close_rel(got, want, rel, what="", scale=0.0):
    """Same dtype and shape; values within ``rel`` of the largest value of ``want``
    or ``scale`` (a gradient entry near zero is held to the tensor's scale, not its
    own)."""
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(scale, want.detach().abs().max().item() if want.numel() else 0.0)
    torch.testing.assert_close(got.detach(), want.detach(), rtol=rel, atol=rel * scale,
                               equal_nan=True, msg=lambda m: f"{what}: {m}")


#: the relative tolerance against eager, per dtype (the issue's numbers)
REL = {torch.float64: 1e-10, torch.float32: 1e-4}


def lazyrt_counts() -> dict:
    """The counters a replay must leave alone or grow, from ``lr.metrics``."""
    s = lr.metrics.snapshot()
    return {k: s[k] for k in ("ops_recorded", "cache_misses", "compiles", "graphs_executed")}


#: the numpy backend's pow of a Python float by a float32 tensor (Adam's bias
#: corrections in torch's compiled step, ``_foreach_pow(beta2, step)``) rounds the
#: float to float32 first: one float32 ulp from eager and from the c backend (the
#: lazy front-end too), ~1e-8 relative in an Adam step
NUMPY_POW = pytest.mark.xfail(strict=True, reason="numpy backend: pow(float, float32 "
                              "tensor) is one float32 ulp off eager")
