"""float16 on lazy tensors rounds as eager torch does: each aten op computes in
float32 and rounds once (eager's "opmath"), with eager's own float32 formulas
where its kernels have them, so results are bit-equal to eager CPU torch.

The native API keeps NumPy's rule (a scalar rounded to float16 first, a
rounding after every primitive): ``test_native_api_keeps_numpy_rounding``.
Every test runs on every backend (``backend``: jax when named in
``LAZYRT_TEST_BACKENDS``): the rule is casts in the graph, which no backend may
fold away.
"""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch.testing import assert_same


def _random_half(n=10_000, scale=10.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g) * scale).half()


def _differing(got, want) -> int:
    got = lt.to_cpu(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    same = (got == want) | (got.isnan() & want.isnan())
    return int((~same).sum())


def test_scalar_is_read_in_float32_as_eager_does(backend):
    a = torch.tensor([1000.3], dtype=torch.float16)
    assert (a * 0.1).item() == 100.0625  # NumPy's rule gives 100.0
    assert_same(a.to("lazy") * 0.1, a * 0.1)


_ELEMENTWISE = [
    ("x*2.3", lambda t: t * 2.3),
    ("x/3.7", lambda t: t / 3.7),
    ("2.3/x", lambda t: 2.3 / t),
    ("x+0.1", lambda t: t + 0.1),
    ("x**2.5", lambda t: t.abs() ** 2.5),
    ("add alpha", lambda t: torch.add(t, t.flip(0), alpha=0.3)),
    ("sub alpha, broadcast", lambda t: torch.sub(t.view(100, 100), t[:100], alpha=-3.125)),
    ("addcmul", lambda t: torch.addcmul(t, t, t.flip(0), value=0.3)),
    ("addcdiv", lambda t: torch.addcdiv(t, t, t.flip(0) + 0.5, value=0.3)),
    ("lerp", lambda t: torch.lerp(t, t.flip(0), 0.3)),
    ("lerp 0.7", lambda t: torch.lerp(t, t.flip(0), 0.7)),
    ("leaky_relu", lambda t: F.leaky_relu(t, 0.1)),
    ("erf", torch.erf),
    ("sigmoid", torch.sigmoid),
    ("tanh", torch.tanh),
    ("rsqrt", lambda t: torch.rsqrt(t.abs())),
    ("exp", lambda t: torch.exp(t / 4)),
    ("trunc div", lambda t: torch.div(t, 0.37, rounding_mode="trunc")),
    ("atan2", lambda t: torch.atan2(t, t.flip(0))),
    ("log_softmax", lambda t: t.view(100, 100).log_softmax(-1)),
    ("cross_entropy", lambda t: F.cross_entropy(t.view(100, 100),
                                                torch.arange(100).to(t.device),
                                                reduction="none")),
    ("mean", lambda t: t.view(100, 100).mean(-1)),
    ("cumsum", lambda t: t.view(100, 100).cumsum(-1)),
    ("prod of 5", lambda t: (t.view(2000, 5) / 4).prod(-1)),
    ("prod of 10, dim 0", lambda t: (t.view(10, 1000) / 4).prod(0)),
]


@pytest.mark.parametrize("name,fn", _ELEMENTWISE)
def test_ops_are_bit_equal_to_eager_on_random_values(backend, name, fn):
    x = _random_half(scale=3.0)
    assert _differing(fn(x.to("lazy")), fn(x)) == 0


@pytest.mark.parametrize("name,fn", _ELEMENTWISE + [
    ("gelu", F.gelu), ("silu", F.silu), ("softmax", lambda t: t.view(100, 100).softmax(-1)),
    ("layer_norm", lambda t: F.layer_norm(t.view(100, 100), (100,)))])
def test_bfloat16_ops_are_bit_equal_to_eager_on_random_values(backend, name, fn):
    """bfloat16 is the other reduced-precision float: the same rule, computed in
    float32 and rounded once per aten op (against eager's own kernels: oneDNN's
    bfloat16 gelu, taken where the CPU has AVX-512 BF16, has its own erf)."""
    x = _random_half(scale=3.0).float().bfloat16()
    with torch.backends.mkldnn.flags(enabled=False):
        want = fn(x)
    assert _differing(fn(x.to("lazy")), want) == 0


@pytest.mark.parametrize("name,fn", [
    ("softmax", lambda t: t.view(100, 100).softmax(-1)),
    ("sum", lambda t: t.view(100, 100).sum(-1)),
    ("mm", lambda t: t.view(100, 100) @ t.view(100, 100).T / 100),
    ("addmm", lambda t: torch.addmm(t[:100], t.view(100, 100), t.view(100, 100).T / 100,
                                    beta=0.5, alpha=0.25)),
])
def test_reductions_are_within_one_ulp_of_eager(backend, name, fn):
    """Eager sums float16 (and matmul products) in float32 in its own loop's
    order; lazyrt in float64 or its BLAS's order (a float32 difference a float16
    rounding seldom exposes)."""
    x = _random_half(scale=3.0)
    _within_one_ulp(fn(x.to("lazy")), fn(x))


def _within_one_ulp(got, want):
    """At most one float16 ulp apart, in at most 0.1% of the values."""
    got = lt.to_cpu(got).detach()
    ulp = torch.finfo(torch.float16).eps * want.abs().float().clamp(min=2.0 ** -14)
    assert ((got.float() - want.float()).abs() <= ulp).all()
    assert _differing(got, want) <= max(1, want.numel() // 1000)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_bit_equal_to_eagers_kernel(backend, approximate):
    """Against eager's own gelu kernel: torch's oneDNN gelu (which it takes for a
    contiguous float16 tensor where the CPU has AVX-512 FP16) has its own erf."""
    x = _random_half(scale=1.0)
    with torch.backends.mkldnn.flags(enabled=False):
        want = F.gelu(x, approximate=approximate)
    assert _differing(F.gelu(x.to("lazy"), approximate=approximate), want) == 0


@pytest.mark.parametrize("n", [25, 70, 2100, 40_000])
def test_add_with_alpha_follows_eagers_vector_loop_and_remainder(backend, n):
    """Eager fuses ``x + alpha * y`` in its vectorized loop and rounds ``alpha * y``
    first in the scalar remainder: where an element falls decides its bits."""
    x, y = _random_half(n, seed=1), _random_half(n, seed=2)
    want = torch.add(x, y, alpha=-3.125)
    assert _differing(torch.add(x.to("lazy"), y.to("lazy"), alpha=-3.125), want) == 0


def test_every_finite_float16_matches_eager_in_exp_log_erf(backend):
    bits = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.float16)
    x = x[x.isfinite()]
    for fn in (torch.exp, torch.log, torch.log1p, torch.erf, torch.sigmoid, torch.rsqrt):
        assert _differing(fn(x.to("lazy")), fn(x)) == 0, fn


@pytest.mark.parametrize("act", [F.silu, torch.sigmoid, torch.tanh, F.leaky_relu, F.elu])
def test_activation_gradients_are_bit_equal_to_eager(backend, act):
    """Eager's backward kernels: silu's in float32 (torch would decompose it in
    float16 above the lazy device), sigmoid's in float16 arithmetic."""
    x, grad = _random_half(6400, scale=2.0, seed=4), _random_half(6400, scale=1.0, seed=5)
    xe, xl = x.clone().requires_grad_(), x.to("lazy").requires_grad_()
    act(xe).backward(grad)
    act(xl).backward(grad.to("lazy"))
    assert _differing(xl.grad, xe.grad) == 0


def test_layer_norm_returns_float16_mean_and_rstd_as_eager(backend):
    torch.manual_seed(0)
    x, w, b = (torch.randn(50, 3) * 3).half(), torch.randn(3).half(), torch.randn(3).half()
    want = torch.native_layer_norm(x, (3,), w, b, 1e-5)
    got = torch.native_layer_norm(x.to("lazy"), (3,), w.to("lazy"), b.to("lazy"), 1e-5)
    for g, t in zip(got, want):
        assert _differing(g, t) == 0


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 96), nn.GELU(approximate="tanh"), nn.Linear(96, 32),
                         nn.ReLU(), nn.Linear(32, 10)).half()


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-4),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, eps=1e-4, weight_decay=0.1),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_float16_mlp_trained_five_steps_equals_eager(backend, optimizer):
    eager = _mlp()
    lazy = lt.lazy(copy.deepcopy(eager))
    opts = [OPTIMIZERS[optimizer](m.parameters()) for m in (eager, lazy)]
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        x = torch.randn(16, 64, generator=g).half()
        y = torch.randint(0, 10, (16,), generator=g)
        for model, opt, dev in ((eager, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            opt.zero_grad()
            F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
            opt.step()
        lt.mark_step()
    for p, q in zip(eager.parameters(), lazy.parameters()):
        if backend == "jax":  # XLA's float32 dot sums in its own order: a rare last bit
            _within_one_ulp(q, p.detach())
        else:
            assert _differing(q, p.detach()) == 0


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_fused_adam_on_float16_follows_eagers_fused_kernel(backend, cls):
    """``fused=True``: eager's fused CPU kernel computes the whole step in float32
    and rounds each stored tensor once (one weight in ~10,000 still differs by an
    ulp after 5 steps: within one ulp, in at most 0.1%)."""
    eager = _mlp()
    lazy = lt.lazy(copy.deepcopy(eager))
    opts = [cls(m.parameters(), lr=1e-3, eps=1e-4, weight_decay=0.1, fused=True)
            for m in (eager, lazy)]
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        x = torch.randn(16, 64, generator=g).half()
        y = torch.randint(0, 10, (16,), generator=g)
        for model, opt, dev in ((eager, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            opt.zero_grad()
            F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
            opt.step()
        lt.mark_step()
    for p, q in zip(eager.parameters(), lazy.parameters()):
        _within_one_ulp(q, p.detach())


def test_native_api_keeps_numpy_rounding(backend):
    x = np.array([1000.3], np.float16)
    got = (lr.asarray(x) * 0.1).numpy()
    assert got.dtype == np.float16 and got[0] == (x * np.float16(0.1))[0] == 100.0


def test_rounding_to_float16_between_float32_ops_is_kept(backend):
    """The opmath rule is casts in the graph: no pass or emitter may fold a
    float32 -> float16 -> float32 pair (log_softmax's float16 sum relies on it)."""
    x = torch.randn(1000, generator=torch.Generator().manual_seed(3)) * 100
    fn = lambda t: t.half().float() * 3 - t  # noqa: E731
    assert_same(fn(x.to("lazy")), fn(x))
    assert lt.to_cpu(fn(x.to("lazy"))).abs().max() > 0  # the rounding is visible
