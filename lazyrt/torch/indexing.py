"""Lowerings that pick, scatter, reorder or repeat elements: ``index`` with one
integer index tensor (what ``nn.Embedding`` and ``x[idx]`` record) through
lazyrt's ``take``; ``gather``, ``scatter_add`` and ``index_put(accumulate=True)``
(an embedding's backward) through ``take_along_axis``, ``scatter_add`` and
``index_add``; ``scatter`` of one value, or of one element per row (what
``F.one_hot`` records), through a ``scatter_add`` of hit counts (its kernel
range-checks the indices) and a select; ``flip``, ``repeat``, ``sort``, ``topk``,
``cumsum``/``cumprod``.

Other forms return ``NotImplemented`` and go on to the next stage (a
decomposition, or the counted fallback): ``index`` with a boolean mask (a
data-dependent shape) or several index tensors, ``index_put`` without
``accumulate`` (repeated indices would race), a ``scatter_add`` whose index
covers only part of the other axes, a ``scatter`` of a tensor with more than one
element per row along its axis (which of two writes to one place wins is
unspecified in eager too, and lazyrt keeps no order).
"""
from __future__ import annotations

import torch

from .. import _recorder_shapes as S
from .. import dtypes as D
from ..api import creation as C
from ..api import indexing as IX
from ..api import manipulation as M
from ..api import views as V
from ..api import pointwise as P
from ..api import reductions as RD
from ..api import sorting as SO
from .lowerings import KEEP_DECOMPOSITION, LOWERINGS, _register
from .operands import down, up, value
from .tensor import LazyTensor, code_of, from_cpu, number_of, runtime_scalar

aten = torch.ops.aten


def _index(a, indices):
    """``a[idx]`` for one integer index tensor on dim 0 (others: the fallback)."""
    if len(indices) != 1 or not isinstance(indices[0], torch.Tensor) or \
            indices[0].dtype in (torch.bool, torch.uint8):
        return NotImplemented
    # an index tensor may be on the CPU (eager lets it index a cuda tensor too)
    x = value(a)
    idx = _index_tensor(indices[0])
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    picked = M.take(x, flat, axis=0)
    return S.reshape(picked, tuple(idx.shape) + tuple(x.shape[1:]))


def _index_tensor(t):
    return value(t) if type(t) is LazyTensor else from_cpu(t)


def _gather(a, dim, index, *, sparse_grad=False):
    x, idx = value(a), _index_tensor(index)
    if x.ndim == 0 or idx.ndim != x.ndim:
        return NotImplemented
    # torch reads x only over the index's extent on the other axes
    cut = tuple(slice(None) if k == dim % x.ndim else slice(0, n)
                for k, n in enumerate(idx.shape))
    return IX.take_along_axis(S.getitem(x, cut), idx, axis=dim, negative_indices=False)


def _scatter_add(a, dim, index, src):
    x, idx, v = value(a), _index_tensor(index), value(src)
    axis = dim % max(x.ndim, 1)
    if x.ndim == 0 or idx.ndim != x.ndim or any(
            n != m for k, (n, m) in enumerate(zip(idx.shape, x.shape)) if k != axis):
        return NotImplemented
    v = S.getitem(v, tuple(slice(0, n) for n in idx.shape))  # src is read over the index
    return IX.scatter_add(x, idx, v, axis=axis, negative_indices=False)


def _scatter(a, dim, index, src):
    """``a.scatter(dim, index, src)`` where ``src`` is one value, or the index has
    one element per row along ``dim``: the places hit, counted by a scatter-add
    (which refuses an index out of range as eager does), take the new value."""
    x, idx = value(a), _index_tensor(index)
    axis = dim % max(x.ndim, 1)
    if x.ndim == 0 or idx.ndim != x.ndim or any(
            n != m for k, (n, m) in enumerate(zip(idx.shape, x.shape)) if k != axis):
        return NotImplemented
    if isinstance(src, torch.Tensor) and src.dim():
        if idx.shape[axis] != 1:
            return NotImplemented
        new = S.getitem(value(src), tuple(slice(0, n) for n in idx.shape))
        new = P.astype(new, x.dtype)
    else:
        fill = src.item() if isinstance(src, torch.Tensor) else src
        new = runtime_scalar(number_of(fill, x._node.dtype), x._node.dtype)
    zeros = C.full(x.shape, 0, D.int32)
    hits = IX.scatter_add(zeros, idx, C.full(idx.shape, 1, D.int32), axis=axis,
                          negative_indices=False)
    return S.where(hits > runtime_scalar(0, D.INT32), new, x)


def _topk(a, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (smallest) along ``dim``, from a stable sort: NaN counts as
    the largest, as in eager; ties may come in another order than eager's, whose
    order for them is unspecified."""
    x = value(a)
    if x.ndim == 0 and k == 1 and dim in (0, -1):  # a 0-d tensor is its own top 1
        return P.astype(x, x.dtype), C.full((), 0, D.int64)
    if x.ndim == 0 or not 0 <= k <= x.shape[dim]:
        return NotImplemented  # eager's error (or its k=0 0-d form) from the fallback
    first = tuple(slice(0, k) if i == dim % x.ndim else slice(None) for i in range(x.ndim))
    order = S.getitem(SO.argsort(x, axis=dim, descending=largest, stable=True), first)
    return _picked(x, order, dim), order


def _picked(x, order, dim):
    """The values ``order`` (argsort's indices) picks along ``dim``: a gather the
    planner fuses, where a second sort would run on the host again."""
    return IX.take_along_axis(x, order, axis=dim, negative_indices=False)


def _index_put(a, indices, values, accumulate=False):
    if not accumulate or len(indices) != 1 or not isinstance(indices[0], torch.Tensor) or \
            indices[0].dtype in (torch.bool, torch.uint8):
        return NotImplemented
    x, idx = value(a), _index_tensor(indices[0])
    if x.ndim == 0:
        return NotImplemented
    v = values.value if type(values) is LazyTensor else from_cpu(values)
    v = V.broadcast_to(v, tuple(idx.shape) + tuple(x.shape[1:]))
    # one row of values per index, whatever the index's shape
    flat = S.reshape(idx, (-1,))
    return IX.index_add(x, flat, S.reshape(v, (flat.shape[0],) + tuple(x.shape[1:])), axis=0)


def _index_select(a, dim, index):
    """``x.index_select(dim, index)``: a 1-D (or 0-d) index picks slices along ``dim``."""
    x, idx = value(a), _index_tensor(index)
    if idx.ndim > 1 or (x.ndim == 0 and idx.size != 1):
        return NotImplemented  # (a scalar indexed by several: eager's error, from the fallback)
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    if x.ndim == 0:  # a scalar stays one: index 0 of it as of a 1-element axis
        return S.reshape(_take(S.reshape(x, (1,)), flat, 0), ())
    return _take(x, flat, dim % x.ndim)


def _take(x, flat, axis):
    """Slices of ``x`` at the 1-D ``flat`` along ``axis``; a negative or too large
    index is eager's IndexError (when computed), never wrapped."""
    along = [1] * x.ndim
    along[axis] = flat.shape[0]
    return IX.take_along_axis(x, S.reshape(flat, tuple(along)), axis=axis,
                              negative_indices=False)


def _embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The weight's gradient: each index's row of ``grad`` added into its row (none
    for ``padding_idx``); with ``scale_grad_by_freq``, each row of ``grad`` first
    divided by how often its index occurs in the batch (a scatter-add of ones, read
    back by a gather)."""
    g, idx = value(grad), _index_tensor(indices)
    dtype = D.DTYPES[g._node.dtype]
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    rows = S.reshape(g, (flat.shape[0], g.shape[-1]))
    if scale_grad_by_freq:
        counts = IX.index_add(C.zeros((num_weights,), dtype), flat,
                              C.ones((flat.shape[0],), dtype), axis=0)
        rows = rows / V.unsqueeze(M.take(counts, flat, axis=0), -1)
    if padding_idx >= 0:
        rows = S.where(V.unsqueeze(flat == padding_idx, -1), 0, rows)
    out = C.zeros((num_weights, g.shape[-1]), dtype)
    return IX.index_add(out, flat, rows, axis=0)


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
    return _picked(x, order, dim), order


def _cumulative(fn):
    def lower(a, dim, *, dtype=None):
        x = value(a)
        if dtype is not None:
            x = P.astype(x, D.DTYPES[code_of(dtype)])
        elif x._node.dtype in D.INTEGRAL or x._node.dtype == D.BOOL:
            x = P.astype(x, D.int64)  # torch's rule: integer sums are int64
        if x.ndim == 0:
            return P.astype(x, x.dtype)
        # float16 accumulates in float32 in eager, each output rounded from it
        wide = up(x)
        return down(P.astype(fn(wide, axis=dim), wide.dtype), x._node.dtype)
    return lower


_register([aten.index.Tensor], _index)
_register([aten.gather.default], _gather)
_register([aten.scatter_add.default], _scatter_add)
_register([aten.index_put.default], _index_put)
_register([aten.index_select.default], _index_select)
_register([aten.embedding_dense_backward.default], _embedding_backward)
KEEP_DECOMPOSITION.add(aten.embedding_dense_backward.default)
_register([aten.flip.default], _flip)
_register([aten.repeat.default], _repeat)
_register([aten.sort.default, aten.sort.stable], _sort)
_register([aten.topk.default], _topk)
_register([aten.scatter.value, aten.scatter.src], _scatter)
_register([aten.cumsum.default], _cumulative(RD.cumulative_sum))
_register([aten.cumprod.default], _cumulative(RD.cumulative_prod))

__all__ = ["LOWERINGS"]
