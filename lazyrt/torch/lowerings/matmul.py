"""Matrix products (``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``addbmm``, ``dot``,
``mv``, ``addmv``) as lazyrt matmuls. A float16 product accumulates in float32 and is
rounded once, after the bias, as eager's gemm; ``addbmm`` rounds after each
batch, as eager's loop of ``addmm_`` does."""
from __future__ import annotations

import torch

from ... import _recorder_shapes as S
from ...api import reductions as RD
from ..operands import REDUCED_PRECISION, down, opmath, operand, up, value
from ..registry import register_lowering
from ..tensor import raw

aten = torch.ops.aten


def _same_dtype(op, a, b):
    if a.dtype != b.dtype:
        raise RuntimeError(f"lazyrt.torch: {op}: expected both operands to have the same "
                           f"dtype, but got {a.dtype} and {b.dtype} (shapes "
                           f"{tuple(a.shape)} and {tuple(b.shape)})")


def _product(a, b):
    """``a @ b`` in eager's computation dtype (float16 products accumulate in float32)."""
    return S.matmul(up(value(a)), up(value(b)))


def _mm(op):
    def lower(a, b):
        _same_dtype(op, a, b)
        return down(_product(a, b), value(a)._node.dtype)
    return lower


def _addmm(bias, a, b, *, beta=1, alpha=1):
    _same_dtype("addmm", a, b)
    return _scaled_sum(bias, _product(a, b), beta, alpha, value(a))


def _addbmm(bias, a, b, *, beta=1, alpha=1):
    """``beta * bias + alpha * (a[0] @ b[0] + a[1] @ b[1] + ...)``; in float16, as
    eager's loop of ``addmm_`` over the batch, rounding after each."""
    _same_dtype("addbmm", a, b)
    x, y = value(a), value(b)
    code = x._node.dtype
    if opmath(code) == code or not x.shape[0]:
        return _scaled_sum(bias, RD.sum(_product(a, b), axis=0), beta, alpha, x)
    out = bias
    for i in range(x.shape[0]):
        out = raw(_scaled_sum(out, S.matmul(up(x[i]), up(y[i])), beta if i == 0 else 1,
                              alpha, x[i]))
    return out.value


def _addmv(bias, a, b, *, beta=1, alpha=1):
    """``addmv`` as ``addmm``; in float16/bfloat16 eager's gemv rounds in an order
    of its own (one float16 ulp away from a single rounding): the fallback's."""
    if a.dtype in REDUCED_PRECISION:
        return NotImplemented
    return _addmm(bias, a, b, beta=beta, alpha=alpha)


def _scaled_sum(bias, prod, beta, alpha, a):
    """``beta * bias + alpha * prod``, rounded once to ``a``'s dtype (eager's gemm).
    With nothing to sum over, eager's ``addmm`` scales ``bias`` by ``beta`` in the
    result's dtype (a float16 ``beta`` is rounded first)."""
    code, out = prod._node.dtype, a._node.dtype
    if alpha != 1:
        prod = prod * operand(alpha, code)
    if beta == 0:
        return down(prod, out)
    via = out if a.ndim == 2 and a.shape[1] == 0 and code != out else None
    c = operand(bias, code)
    return down((c if beta == 1 else c * operand(beta, code, via)) + prod, out)


for _op, _fn in ((aten.mm.default, _mm("mm")), (aten.bmm.default, _mm("bmm")),
                 (aten.dot.default, _mm("dot")), (aten.mv.default, _mm("mv")),
                 (aten.addmm.default, _addmm), (aten.baddbmm.default, _addmm),
                 (aten.addmv.default, _addmv),
                 (aten.addbmm.default, _addbmm)):
    register_lowering(_op)(_fn)
