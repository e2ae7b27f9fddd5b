"""Reductions: ``sum``, ``mean``, ``var``, ``amax``, ``any``, ``prod``, ``max``...
as lazyrt reductions, with torch's accumulation dtypes and its 0-d rules."""
from __future__ import annotations

import torch

from ... import _recorder_shapes as S
from ... import dtypes as D
from ...api import creation as C
from ...api import pointwise as P
from ...api import reductions as RD
from ..operands import down, opmath, up, value
from ..opmath import float16_product
from ..registry import overloads_of, register_lowering
from ..tensor import code_of

aten = torch.ops.aten


def _dims(dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)


def dims_of_0d(x, dim):
    """torch lets a 0-d tensor be reduced over dim 0 or -1 (as if it had one axis):
    the reduction is then the value itself."""
    if x.ndim or dim is None:
        return False
    for d in _dims(dim) or ():
        if d not in (0, -1):
            raise IndexError(f"lazyrt.torch: dimension out of range (expected to be in "
                             f"range of [-1, 0], but got {d})")
    return True


def _accumulate(reduce):
    """torch's sum/prod: ints and bool accumulate in int64 unless ``dtype`` says
    otherwise; the result keeps the (cast) input's dtype (lazyrt's bool sum is int64).
    float16 accumulates in float32, as eager's: its float32 result rounded once (but
    a short product, :func:`.opmath.float16_product`)."""
    def lower(a, dim=None, keepdim=False, *, dtype=None):
        x = value(a)
        if dtype is not None:
            x = P.astype(x, D.DTYPES[code_of(dtype)])
        elif x._node.dtype in D.INTEGRAL or x._node.dtype == D.BOOL:
            x = P.astype(x, D.int64)
        if dims_of_0d(x, dim):
            return P.astype(x, x.dtype)
        if reduce is RD.prod and opmath(x._node.dtype) != x._node.dtype:
            product = float16_product(x, _dims(dim), keepdim)
            if product is not None:
                return product
        wide = up(x)
        return down(P.astype(reduce(wide, _dims(dim), keepdim), wide.dtype), x._node.dtype)
    return lower


_sum = _accumulate(S.sum)


@register_lowering(aten.mean.default, aten.mean.dim)
def _mean(a, dim=None, keepdim=False, *, dtype=None):
    x = value(a)
    if dtype is not None:
        x = P.astype(x, D.DTYPES[code_of(dtype)])
    if x._node.dtype not in D.FLOATING:
        raise RuntimeError(f"lazyrt.torch: mean(): could not infer output dtype. Input dtype "
                           f"must be either a floating point or complex dtype. Got: "
                           f"{a.dtype}")
    if dims_of_0d(x, dim):
        return P.astype(x, x.dtype)
    return RD.mean(x, _dims(dim), keepdim)


def _amax(fn):
    def lower(a, dim=(), keepdim=False):
        x = value(a)
        return P.astype(x, x.dtype) if dims_of_0d(x, dim) else fn(x, _dims(dim), keepdim)
    return lower


def _max_dim(fn, arg):
    def lower(a, dim, keepdim=False):
        x = value(a)
        if dims_of_0d(x, dim):
            return P.astype(x, x.dtype), C.full((), 0, D.int64)
        return fn(x, (dim,), keepdim), arg(x, dim, keepdim)
    return lower


def _arg(fn):
    def lower(a, dim=None, keepdim=False):
        x = value(a)
        if dims_of_0d(x, dim):
            return C.full((), 0, D.int64)
        return fn(x, dim, keepdim)
    return lower


@register_lowering(aten.var.correction)
def _var(a, dim=None, *, correction=None, keepdim=False):
    x = value(a)
    if x._node.dtype not in D.FLOATING:
        raise RuntimeError(f"lazyrt.torch: var(): input dtype should be floating point, "
                           f"got {a.dtype}")
    c = 1 if correction is None else correction
    code = x._node.dtype
    if code != opmath(code):  # eager: float32 input, double accumulators, rounded twice
        x = P.astype(x, D.float64)
    if dims_of_0d(x, dim):
        v = RD.var(x, None, False, c)
    else:
        v = RD.var(x, _dims(dim), keepdim, c)
    return down(P.astype(v, D.DTYPES[opmath(code)]), code)


@register_lowering(aten.var_mean.correction)
def _var_mean(a, dim=None, *, correction=None, keepdim=False):
    x = value(a)
    code = x._node.dtype
    wide = P.astype(x, D.float64) if code != opmath(code) else x  # as _var
    mean = RD.mean(wide, None if dims_of_0d(x, dim) else _dims(dim), keepdim)
    mean = down(P.astype(mean, D.DTYPES[opmath(code)]), code)
    return _var(a, dim, correction=correction, keepdim=keepdim), mean


register_lowering(aten.sum.default, aten.sum.dim_IntList)(_sum)
register_lowering(aten.amax.default)(_amax(S.max))
register_lowering(aten.amin.default)(_amax(S.min))
def _logical(fn):
    def lower(a, dim=None, keepdim=False):
        x = value(a)
        if dims_of_0d(x, dim):
            return P.astype(x, D.bool_)
        return fn(x, _dims(dim), keepdim)
    return lower


_prod = _accumulate(RD.prod)


register_lowering(*overloads_of(aten.any, "default", "dim", "dims"))(_logical(S.any))
register_lowering(*overloads_of(aten.all, "default", "dim", "dims"))(_logical(S.all))
register_lowering(aten.prod.default, aten.prod.dim_int)(_prod)
register_lowering(aten.max.default)(lambda a: S.max(value(a)))
register_lowering(aten.min.default)(lambda a: S.min(value(a)))
register_lowering(aten.max.dim)(_max_dim(S.max, S.argmax))
register_lowering(aten.min.dim)(_max_dim(S.min, S.argmin))
register_lowering(aten.argmax.default)(_arg(S.argmax))
register_lowering(aten.argmin.default)(_arg(S.argmin))
