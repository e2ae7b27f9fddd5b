"""Softmax, log-softmax and layer norm lowered natively (lazyrt/torch/normalization.py),
forward and backward, against eager torch on random shapes and dims; the forms
they decline (0-d, float16, empty) still match eager through torch's decompositions."""
import copy
import math
import re

import pytest
import torch
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch import dispatch
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)

aten = torch.ops.aten
SHAPES = [(5,), (3, 7), (2, 3, 4), (2, 1, 3, 5)]


def _pair(shape, dtype, seed, requires_grad=True, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    lazy = x.to("lazy").requires_grad_(requires_grad)
    return x.clone().requires_grad_(requires_grad), lazy


def _no_decomposition(monkeypatch, *ops):
    """Make torch's decompositions of ``ops`` fail: the native lowering must run."""
    for op in ops:
        def refuse(*a, _op=op, **k):
            raise AssertionError(f"{_op} went to its decomposition")
        monkeypatch.setitem(dispatch.DECOMPOSITIONS, op, refuse)
    monkeypatch.setattr(dispatch, "_PLANS", {})  # plans hold the decomposition they found


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_forward_and_backward_match_eager(torch_backend, monkeypatch, dtype, fn):
    _no_decomposition(monkeypatch, aten._softmax.default, aten._log_softmax.default,
                      aten._softmax_backward_data.default,
                      aten._log_softmax_backward_data.default)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype is torch.float32 else dict(rtol=1e-12,
                                                                          atol=1e-13)
    f = getattr(torch, fn)
    for i, shape in enumerate(SHAPES):
        for dim in range(-len(shape), len(shape)):
            x, lx = _pair(shape, dtype, seed=10 * i + dim)
            g = torch.randn(shape, dtype=torch.float64).to(dtype)
            want, got = f(x, dim), f(lx, dim)
            assert_same(got, want, **tol)
            (want * g).sum().backward()
            (got * g.to("lazy")).sum().backward()
            assert_same(lx.grad, x.grad, **tol)


def test_safe_softmax_zeroes_fully_masked_rows(torch_backend, monkeypatch):
    """The SDPA math path's _safe_softmax: a row that is all -inf gives 0, not NaN."""
    _no_decomposition(monkeypatch, aten._safe_softmax.default)
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    x[0, 1] = -math.inf
    x[1, 2, :2] = -math.inf
    for dim in (-1, 1):
        want = aten._safe_softmax(x, dim)
        got = aten._safe_softmax(x.to("lazy"), dim)
        assert_same(got, want, rtol=1e-12, atol=1e-13)
    assert_same(aten._safe_softmax(x.to("lazy"), -1, torch.float32),
                aten._safe_softmax(x, -1, torch.float32), rtol=1e-6, atol=1e-7)
    # through attention: a query that may see no key
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(3, 3, dtype=torch.bool).tril()
    mask[0] = False
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = F.scaled_dot_product_attention(q.to("lazy"), k.to("lazy"), v.to("lazy"),
                                         attn_mask=mask.to("lazy"))
    assert_same(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_forward_and_backward_match_eager(torch_backend, monkeypatch, dtype, affine):
    _no_decomposition(monkeypatch, aten.native_layer_norm.default,
                      aten.native_layer_norm_backward.default)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype is torch.float32 else dict(rtol=1e-11,
                                                                          atol=1e-12)
    for i, shape in enumerate(SHAPES):
        for k in range(1, len(shape) + 1):
            norm = shape[len(shape) - k:]
            x, lx = _pair(shape, dtype, seed=i * 7 + k, scale=2.0)
            w, lw = _pair(norm, dtype, seed=100 + i * 7 + k)
            b, lb = _pair(norm, dtype, seed=200 + i * 7 + k)
            eager_wb = {"both": (w, b), "weight": (w, None), "none": (None, None)}[affine]
            lazy_wb = {"both": (lw, lb), "weight": (lw, None), "none": (None, None)}[affine]
            want = F.layer_norm(x, norm, *eager_wb, eps=1e-5)
            got = F.layer_norm(lx, norm, *lazy_wb, eps=1e-5)
            assert_same(got, want, **tol)
            g = torch.randn(shape, dtype=torch.float64).to(dtype)
            (want * g).sum().backward()
            (got * g.to("lazy")).sum().backward()
            assert_same(lx.grad, x.grad, **tol)
            for eager_p, lazy_p in zip(eager_wb, lazy_wb):
                if eager_p is not None:
                    assert_same(lazy_p.grad, eager_p.grad, **tol)


def test_native_layer_norm_returns_mean_and_rstd_as_eager(torch_backend):
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    want = aten.native_layer_norm(x, [3, 5], None, None, 1e-5)
    got = aten.native_layer_norm(x.to("lazy"), [3, 5], None, None, 1e-5)
    for g, w in zip(got, want):
        assert_same(g, w, rtol=1e-12, atol=1e-12)


def test_declined_forms_still_match_eager(torch_backend):
    """0-d, float16 and empty inputs go to torch's decompositions, as before."""
    for x in (torch.tensor(2.0), torch.randn(3, 4).half(), torch.empty(0, 3)):
        assert_same(torch.softmax(x.to("lazy"), -1), torch.softmax(x, -1),
                    rtol=1e-3, atol=1e-3)
        assert_same(torch.log_softmax(x.to("lazy"), 0), torch.log_softmax(x, 0),
                    rtol=1e-3, atol=1e-3)
    h = torch.randn(2, 6).half()
    assert_same(F.layer_norm(h.to("lazy"), (6,)), F.layer_norm(h, (6,)), rtol=1e-2, atol=1e-2)
    with pytest.raises(RuntimeError):
        F.layer_norm(torch.randn(2, 6).to("lazy"), (5,))
    lr.sync()


def test_these_overloads_keep_their_decomposition_behind_the_lowering():
    from lazyrt.torch.registry import KEEP_DECOMPOSITION
    for op in KEEP_DECOMPOSITION:
        assert op in dispatch.LOWERINGS and op in dispatch.DECOMPOSITIONS
    assert aten.native_layer_norm_backward.default in KEEP_DECOMPOSITION


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("make", ["group_norm", "group_norm_affine", "elu", "selu", "celu"])
def test_group_norm_and_elus_train_with_no_fallback(torch_backend, dtype, make):
    """``nn.GroupNorm`` and the ELU family, forward and backward, through torch's
    decompositions of ``native_group_norm`` and ``elu`` (chosen in dispatch.py),
    parameters' gradients included."""
    torch.manual_seed(7)
    module = {"group_norm": lambda: torch.nn.GroupNorm(2, 4, affine=False),
              "group_norm_affine": lambda: torch.nn.GroupNorm(2, 4),
              "elu": lambda: torch.nn.ELU(0.7), "selu": torch.nn.SELU,
              "celu": lambda: torch.nn.CELU(1.3)}[make]().to(dtype)
    if make == "group_norm_affine":
        with torch.no_grad():
            module.weight.uniform_(0.5, 1.5)
            module.bias.uniform_(-0.5, 0.5)
    lazy = lt.lazy(copy.deepcopy(module))
    x, lx = _pair((3, 4, 5), dtype, seed=3)
    weights = torch.arange(60, dtype=dtype).reshape(3, 4, 5) / 7
    lr.metrics.reset()
    out, lout = module(x), lazy(lx)
    (out * weights).sum().backward()
    (lout * weights.to("lazy")).sum().backward()
    tol = 2e-5 if dtype == torch.float32 else 1e-12
    assert_same(lout, out, rtol=tol, atol=tol)
    assert_same(lx.grad, x.grad, rtol=tol, atol=tol)
    for p, q in zip(module.parameters(), lazy.parameters()):
        assert_same(q.grad, p.grad, rtol=tol, atol=tol)
    assert lr.metrics.snapshot()["fallbacks"] == {}


def test_embedding_layer_norm_steps_match_eager_with_rows_gathered_once():
    """Token + position embeddings under a LayerNorm (a GPT's first block, at its
    size), trained two steps (the second accumulates into .grad): the weight
    gradient's column sum gathers each embedding row from a base computed once
    per row. Gradients equal eager's on the C backend."""
    if "c" not in lr.available_backends():
        pytest.skip("no C compiler")
    torch.manual_seed(0)
    V, D, B, T = 512, 128, 8, 64
    mods = [torch.nn.Embedding(V, D), torch.nn.Embedding(T, D), torch.nn.LayerNorm(D)]
    with torch.no_grad():
        mods[2].weight.uniform_(0.5, 1.5)
    lazy = [copy.deepcopy(m).to("lazy") for m in mods]
    idx = torch.randint(0, V, (B, T))

    ids = {"cpu": idx, "lazy": idx.to("lazy")}

    def step(ms, device):
        tok, pos, ln = ms
        ln(tok(ids[device]) + pos(torch.arange(T).to(device))).sum().backward()

    sources = []
    with lr.backend("c"):
        for _ in range(2):
            step(mods, "cpu")
            step(lazy, "lazy")
            lt.mark_step()
            sources += [k.source for k in lr.debug.last_record().kernels]
    for m, lm in zip(mods, lazy):
        for p, lp in zip(m.parameters(), lm.parameters()):
            assert_same(lp.grad, p.grad, rtol=1e-5, atol=1e-4)
    assert any(re.search(r"\+ g\d+\]", s) for s in sources)
