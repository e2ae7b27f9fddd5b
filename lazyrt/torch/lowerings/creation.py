"""Creation-likes as lowerings: ``ones_like``, ``new_zeros``, ``fill``, ``zero``,
``copy`` (what autograd, decompositions and functionalization record on lazy
tensors). Fills are lazy scalars expanded to the shape, so they fuse into
their consumer and their value is a runtime parameter.
"""
from __future__ import annotations

import torch

from ... import dtypes as D
from ...api import creation as C
from ...api import pointwise as P
from ...api import views as V
from ..registry import register_lowering
from ..operands import value
from ..tensor import code_of, from_cpu, number_of

aten = torch.ops.aten


def full_of(shape, fill, dtype):
    code = code_of(dtype)
    return C.full(tuple(shape), number_of(fill, code), D.DTYPES[code])


def _like(fill):
    def lower(a, *, dtype=None, **_ignored):
        return full_of(a.shape, fill, dtype or a.dtype)
    return lower


def _new(fill):
    def lower(a, size, *args, dtype=None, **_ignored):
        return full_of(size, fill, dtype or a.dtype)
    return lower


@register_lowering(aten.copy.default)
def _copy(dst, src, non_blocking=False):
    if type(src) is not type(dst) and isinstance(src, torch.Tensor) and src.device.type != "lazy":
        v = from_cpu(src)
    else:
        v = value(src)
    v = P.astype(v, D.DTYPES[code_of(dst.dtype)])
    return v if tuple(v.shape) == tuple(dst.shape) else V.broadcast_to(v, tuple(dst.shape))


register_lowering(aten.ones_like.default)(_like(1))
register_lowering(aten.zeros_like.default, aten.empty_like.default)(_like(0))
register_lowering(aten.full_like.default)(
    lambda a, fill, *, dtype=None, **_k: full_of(a.shape, fill, dtype or a.dtype))
register_lowering(aten.new_ones.default)(_new(1))
register_lowering(aten.new_zeros.default, aten.new_empty.default,
                  aten.new_empty_strided.default)(_new(0))
register_lowering(aten.new_full.default)(
    lambda a, size, fill, *, dtype=None, **_k: full_of(size, fill, dtype or a.dtype))
register_lowering(aten.fill.Scalar)(lambda a, fill: full_of(a.shape, fill, a.dtype))
register_lowering(aten.zero.default)(lambda a: full_of(a.shape, 0, a.dtype))
