"""Attention and contractions on the lazy device with no fallback, forward and
backward matching eager in float64: nn.MultiheadAttention,
F.scaled_dot_product_attention (math path), torch.einsum, baddbmm, diagonal."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)

F64 = torch.float64


def _leaves(*shapes, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype) for s in shapes]


def _same_on_both(fn, inputs, rtol=1e-10, atol=1e-12):
    """``fn`` on eager leaves and on lazy copies: outputs and input gradients agree
    and the lazy run has no fallback."""
    eager = [t.clone().requires_grad_() for t in inputs]
    lazy = [t.to("lazy").requires_grad_() for t in inputs]
    want = fn(*eager)
    lr.metrics.reset()
    got = fn(*lazy)
    (got * torch.linspace(-1, 1, got.numel(), dtype=got.dtype).to("lazy")
     .reshape(got.shape)).sum().backward()
    (want * torch.linspace(-1, 1, want.numel(), dtype=want.dtype)
     .reshape(want.shape)).sum().backward()
    lt.mark_step()
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert_same(got, want, rtol=rtol, atol=atol)
    for e, z in zip(eager, lazy):
        assert_same(z.grad, e.grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", ["none", "causal", "padding", "bool_mask"])
def test_multihead_attention_matches_eager(torch_backend, batch_first, masks):
    torch.manual_seed(3)
    eager = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=6, vdim=5).double()
    lazy = lt.lazy(copy.deepcopy(eager))
    shape = (lambda s, d: (2, s, d)) if batch_first else (lambda s, d: (s, 2, d))
    q, k, v = _leaves(shape(4, 8), shape(5, 6), shape(5, 5), seed=1)
    kw = {}
    if masks == "causal":
        kw["attn_mask"] = torch.triu(torch.full((4, 5), float("-inf"), dtype=F64), 2)
    elif masks == "padding":
        kw["key_padding_mask"] = torch.tensor([[False] * 4 + [True], [False] * 5])
    elif masks == "bool_mask":
        kw["attn_mask"] = torch.triu(torch.ones(4, 5, dtype=torch.bool), 2)
    outs = []
    lr.metrics.reset()
    for model, dev in ((eager, "cpu"), (lazy, "lazy")):
        args = [t.detach().clone().to(dev).requires_grad_() for t in (q, k, v)]
        out, weights = model(*args, need_weights=True,
                             **{n: m.to(dev) for n, m in kw.items()})
        (out.square().sum() + (weights * weights).sum()).backward()
        outs.append((out, weights, args))
    lt.mark_step()
    assert lr.metrics.snapshot()["fallbacks"] == {}
    (o1, w1, a1), (o2, w2, a2) = outs
    assert_same(o2, o1, rtol=1e-10, atol=1e-12)
    assert_same(w2, w1, rtol=1e-10, atol=1e-12)
    for e, z in zip(a1, a2):
        assert_same(z.grad, e.grad, rtol=1e-9, atol=1e-11)
    for p, r in zip(eager.parameters(), lazy.parameters()):
        assert_same(r.grad, p.grad, rtol=1e-9, atol=1e-11)


def test_multihead_attention_with_dropout_has_no_fallback(torch_backend):
    model = lt.lazy(nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True))
    x = torch.randn(2, 5, 8).to("lazy")
    lr.metrics.reset()
    out, _ = model(x, x, x)
    out.sum().backward()
    lt.mark_step()
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert out.shape == (2, 5, 8)


@pytest.mark.parametrize("form", ["plain", "causal", "float_mask", "bool_mask", "scale",
                                  "broadcast_mask"])
def test_scaled_dot_product_attention_matches_eager(torch_backend, form):
    q, k, v = _leaves((2, 3, 4, 6), (2, 3, 5, 6), (2, 3, 5, 7), seed=2)
    kw = {"plain": {}, "causal": {"is_causal": True}, "scale": {"scale": 0.3},
          "float_mask": {"attn_mask": _leaves((4, 5), seed=3)[0]},
          "bool_mask": {"attn_mask": torch.rand(2, 3, 4, 5,
                                               generator=torch.Generator().manual_seed(4)) > 0.3},
          "broadcast_mask": {"attn_mask": torch.tril(torch.ones(4, 5, dtype=torch.bool))}}[form]
    if form == "bool_mask":
        kw["attn_mask"][..., 0] = True  # no fully masked row: eager gives NaN there

    def fn(q, k, v):
        mask = kw.get("attn_mask")
        extra = {n: x for n, x in kw.items() if n != "attn_mask"}
        if mask is not None:
            extra["attn_mask"] = mask.to(q.device)
        return F.scaled_dot_product_attention(q, k, v, **extra)
    if form == "causal":
        k, v = k[:, :, :4], v[:, :, :4]
    _same_on_both(fn, [q, k, v])


def test_scaled_dot_product_attention_dropout_has_no_fallback(torch_backend):
    q, k, v = (t.to("lazy").requires_grad_() for t in _leaves((2, 2, 5, 4), (2, 2, 5, 4),
                                                               (2, 2, 5, 4), seed=5))
    lr.metrics.reset()
    F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True).sum().backward()
    lt.mark_step()
    assert lr.metrics.snapshot()["fallbacks"] == {}


EINSUM = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
          ("bij,jk->bik", [(2, 3, 4), (4, 5)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
          ("ij,ij->i", [(3, 4), (3, 4)]), ("i,j->ij", [(3,), (4,)]), ("bij->bji", [(2, 3, 4)]),
          ("ij->", [(3, 4)]), ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("...ij,...jk", [(2, 3, 4), (4, 2)]),
          ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)])]


@pytest.mark.parametrize("equation,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_matches_eager(torch_backend, equation, shapes):
    _same_on_both(lambda *ts: torch.einsum(equation, *ts), _leaves(*shapes, seed=6))


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1)])
def test_baddbmm_and_bmm_match_eager(torch_backend, beta, alpha):
    inputs = _leaves((2, 3, 5), (2, 3, 4), (2, 4, 5), seed=7)
    _same_on_both(lambda a, b, c: torch.baddbmm(a, b, c, beta=beta, alpha=alpha), inputs)
    _same_on_both(lambda a, b, c: torch.baddbmm(a[:1, :1], b, c, beta=beta, alpha=alpha),
                  inputs)  # the added tensor broadcast
    _same_on_both(lambda b, c: torch.bmm(b, c) + torch.addbmm(c[0, :1], b, c), inputs[1:])


@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (1, 0, 2), (-2, 2, 0), (0, -1, -2),
                                              (9, 0, 1)])
def test_diagonal_and_its_gradient_match_eager(torch_backend, offset, dim1, dim2):
    _same_on_both(lambda x: torch.diagonal(x, offset, dim1, dim2) * 2, _leaves((3, 4, 5), seed=8))


def test_diagonal_scatter_refuses_a_src_of_the_wrong_shape(torch_backend):
    x = torch.zeros(3, 3).to("lazy")
    with pytest.raises(RuntimeError, match="diagonal_scatter.*shape"):
        torch.diagonal_scatter(x, torch.ones(2).to("lazy"))
    with pytest.raises(RuntimeError, match="cannot be identical"):
        torch.diagonal(x, 0, 1, 1)
