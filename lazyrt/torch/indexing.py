"""Lowerings that pick, reorder or repeat elements: ``index`` with one integer
index tensor (what ``nn.Embedding`` and ``x[idx]`` record) through lazyrt's
``take``; ``flip``, ``repeat``, ``sort``, ``cumsum``/``cumprod``.

``index`` with a boolean mask (a data-dependent shape), several index tensors,
and the scatters (``index_put``, embedding's backward) are not here: they run
through the counted fallback until lazyrt's op table has gather/scatter-add.
"""
from __future__ import annotations

import torch

from .. import _recorder_shapes as S
from .. import dtypes as D
from ..api import creation as C
from ..api import manipulation as M
from ..api import views as V
from ..api import pointwise as P
from ..api import reductions as RD
from ..api import sorting as SO
from .lowerings import LOWERINGS, _register
from .operands import value
from .tensor import LazyTensor, code_of, from_cpu

aten = torch.ops.aten


def _index(a, indices):
    """``a[idx]`` for one integer index tensor on dim 0 (others: the fallback)."""
    if len(indices) != 1 or not isinstance(indices[0], torch.Tensor) or \
            indices[0].dtype in (torch.bool, torch.uint8):
        return NotImplemented
    # an index tensor may be on the CPU (eager lets it index a cuda tensor too)
    x = value(a)
    idx = value(indices[0]) if type(indices[0]) is LazyTensor else from_cpu(indices[0])
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    picked = M.take(x, flat, axis=0)
    return S.reshape(picked, tuple(idx.shape) + tuple(x.shape[1:]))


def _flip(a, dims):
    x = value(a)
    return M.flip(x, axis=tuple(dims)) if len(dims) else P.astype(x, x.dtype)


def _repeat(a, repeats):
    """``x.repeat(r)``: each dimension tiled, as expand of an interleaved size-1 axis."""
    x = value(a)
    repeats = tuple(repeats)
    lead = len(repeats) - x.ndim
    shape = (1,) * lead + tuple(x.shape)
    inter = tuple(d for s in shape for d in (1, s))
    target = tuple(d for r, s in zip(repeats, shape) for d in (r, s))
    y = V.broadcast_to(S.reshape(x, inter), target)
    return S.reshape(y, tuple(r * s for r, s in zip(repeats, shape)))


def _sort(a, dim=-1, descending=False, *, stable=None):
    # eager CPU sorts stably whatever ``stable`` says; NaN sorts as the largest value
    x = value(a)
    if x.ndim == 0:
        return P.astype(x, x.dtype), C.full((), 0, D.int64)
    order = SO.argsort(x, axis=dim, descending=descending, stable=True)
    return SO.sort(x, axis=dim, descending=descending, stable=True), order


def _cumulative(fn):
    def lower(a, dim, *, dtype=None):
        x = value(a)
        if dtype is not None:
            x = P.astype(x, D.DTYPES[code_of(dtype)])
        elif x._node.dtype in D.INTEGRAL or x._node.dtype == D.BOOL:
            x = P.astype(x, D.int64)  # torch's rule: integer sums are int64
        if x.ndim == 0:
            return P.astype(x, x.dtype)
        return fn(x, axis=dim)
    return lower


_register([aten.index.Tensor], _index)
_register([aten.flip.default], _flip)
_register([aten.repeat.default], _repeat)
_register([aten.sort.default, aten.sort.stable], _sort)
_register([aten.cumsum.default], _cumulative(RD.cumulative_sum))
_register([aten.cumprod.default], _cumulative(RD.cumulative_prod))

__all__ = ["LOWERINGS"]
