"""Lowerings that pick, scatter, reorder or repeat elements.

``index`` with one index tensor at any dim (``x[idx]``, ``x[:, [-1]]``,
``x[..., idx]``; a boolean mask becomes its positions on the host, computed
alone first when the graph computes it) and ``take``, ``index_select`` and
``embedding`` are gathers (``take_along_axis``); ``gather`` too;
``index_put(accumulate=True)`` (their backward), ``index_add``, ``scatter_add``
and an embedding's backward are scatter-adds. ``index_put`` without
``accumulate`` is ``where(mask, v, x)`` for a mask (computed or not) and a value
the same for every selected element (``x[x < t] = -inf``), else a select for
indices known on the host, as ``index_copy``; ``index_fill`` and ``scatter`` of
one value, or of one element per row (``F.one_hot``), select the places hit.
Also ``flip``, ``repeat``, ``sort``, ``topk``, ``cumsum``/``cumprod``.

Every index keeps eager's range rule for its op (:func:`checked_index`):
``index``, ``index_put``, ``take`` and ``index_fill`` wrap a negative index, the
others refuse it; eager's error class, naming the torch op, at the call or at
the barrier.

Other forms return ``NotImplemented`` and go on to the next stage (a
decomposition, or the counted fallback): several index tensors, ``index_put``
without ``accumulate`` of an index the graph computes (which of repeated writes
wins is eager's loop), a ``scatter_add`` whose index covers only part of the
other axes, a ``scatter`` of a tensor with more than one element per row along
its axis (which of two writes to one place wins is unspecified in eager too).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ... import _recorder_shapes as S
from ... import dtypes as D
from ... import ops as OPS
from ...api import creation as C
from ...api import indexing as IX
from ...api import manipulation as M
from ...api import views as V
from ...api import pointwise as P
from ...api import reductions as RD
from ...api import sorting as SO
from ..operands import down, up, value
from ..registry import register_lowering
from ..tensor import (LazyTensor, code_of, compute, count_materialization, defer_error, from_cpu,
                     number_of, reads_refused, runtime_scalar)

aten = torch.ops.aten


def host_array(t):
    """An index's value when it is known as the op is recorded (a CPU or list index,
    a lazy one already computed on the host, or views and casts of one: what
    ``idx.view(-1)`` or ``expand`` records), else None (the graph computes it, as it
    does for every index while a graph is recorded for replay)."""
    if reads_refused():
        return None
    return _host_value(t._node, 0)


#: ops an index known on the host may pass through and stay known (NumPy's reference)
_HOST_OPS = frozenset(op.id for op in (OPS.RESHAPE, OPS.PERMUTE, OPS.EXPAND, OPS.SLICE,
                                       OPS.CAST))


def _host_value(node, depth):
    v = node.value
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, (bool, int, np.integer, np.bool_)):
        return np.asarray(v)
    if v is None and depth < 8 and node.op in _HOST_OPS:
        src = _host_value(node.inputs[0], depth + 1)
        if src is not None:
            return np.asarray(OPS.reference(OPS.OPS[node.op], [src], node.attrs))
    return None


def checked_index(idx, n, *, op, dim, shape, negative, error, words=None):
    """``idx`` (an integer lazyrt tensor) with eager's range check of ``op`` along
    ``dim`` of size ``n``: indices in [-n, n) where eager wraps negative ones
    (``negative``), [0, n) where it refuses them. Eager raises ``error`` at the
    call; so does this one when the index is known then. One the graph computes
    is checked at the barrier that computes it (:func:`.tensor.defer_error`,
    naming the bad index and the user's line), the graph reading 0 in place of a
    bad index meanwhile, so lazyrt's own gather (whose error names its internal
    function) never sees one. ``words(bad)`` overrides the message's start."""
    low = -n if negative else 0
    if 0 in idx.shape:
        return idx

    def message(bad):
        start = words(bad) if words else f"index {bad} is out of bounds for dimension {dim} " \
                                         f"with size {n}"
        return (f"lazyrt.torch: {op}(): {start} (input of shape {tuple(shape)}, index of "
                f"shape {tuple(idx.shape)})")
    known = host_array(idx)
    if known is not None:
        lo, hi = int(known.min()), int(known.max())
        if lo < low or hi >= n:
            raise error(message(lo if lo < low else hi))
        return idx
    if n == 0:  # no index is in range: eager's error whatever the value
        raise error(f"lazyrt.torch: {op}(): index out of bounds for dimension {dim} with size "
                    f"0 (input of shape {tuple(shape)}, index of shape {tuple(idx.shape)})")
    code = idx._node.dtype
    lo_s, n_s = runtime_scalar(low, code), runtime_scalar(n, code)
    lo, hi = S.min(idx), S.max(idx)
    bad = S.where(lo < lo_s, lo, S.where(hi >= n_s, hi, lo_s))
    defer_error(bad, lambda b: message(b) if not low <= b < n else None, error)
    return S.where(P.logical_and(idx >= lo_s, idx < n_s), idx, runtime_scalar(0, code))


def _index_tensor(t):
    return value(t) if type(t) is LazyTensor else from_cpu(t)


_INTEGER_INDEX = (torch.int64, torch.int32)


def _one_index(x, indices):
    """``(d, k, idx, check)`` for ``x[indices]`` with one index tensor (``None`` for
    the dims before it, as torch passes ``x[:, idx]`` and ``x[..., idx]``): ``d``
    its first dim, ``k`` the dims it spans, ``idx`` integer positions along those
    dims merged into one, and ``check(op)`` that returns ``idx`` range-checked as
    eager checks it (negative indices wrap), to call once the caller is sure to
    record. A boolean mask becomes its positions on the host: computed first (a
    barrier, counted at the user's line: the result's shape depends on it) when
    the graph computes it. None for other forms (several tensors, other dtypes)."""
    at = [k for k, t in enumerate(indices) if t is not None]
    if len(at) != 1 or not isinstance(indices[at[0]], torch.Tensor):
        return None
    d, t = at[0], indices[at[0]]
    if t.dtype in (torch.bool, torch.uint8):
        k = t.dim()
        if d + k > x.ndim or tuple(t.shape) != tuple(x.shape[d:d + k]):
            return None  # eager's error, from the fallback
        mask = _index_tensor(t)
        known = host_array(mask)
        if known is None:
            count_materialization()
            known = compute(mask)
        idx = from_cpu(torch.from_numpy(np.flatnonzero(known)))
        return d, k, idx, lambda op: idx
    if t.dtype not in _INTEGER_INDEX or d >= x.ndim:
        return None
    idx = _index_tensor(t)
    return d, 1, idx, lambda op: checked_index(idx, x.shape[d], op=op, dim=d, shape=x.shape,
                                               negative=True, error=IndexError)


def _several_indices(x, indices):
    """``(d, k, idx, check)`` as :func:`_one_index` for integer index tensors at
    the adjacent dims ``d .. d+k-1`` (``x[:, ih[:, None], iw]``, what torch's
    decompositions of resampling record): they broadcast together, and
    ``idx`` is their row-major position in the merged dims. None otherwise."""
    at = [k for k, t in enumerate(indices) if t is not None]
    if len(at) < 2 or at != list(range(at[0], at[-1] + 1)) or at[-1] >= x.ndim or any(
            not isinstance(indices[k], torch.Tensor) or indices[k].dtype not in _INTEGER_INDEX
            for k in at):
        return None
    d, k = at[0], len(at)
    try:
        common = tuple(np.broadcast_shapes(*(tuple(indices[j].shape) for j in at)))
    except ValueError:
        return None  # eager's shape error, from the fallback
    tensors = [_index_tensor(indices[j]) for j in at]

    def check(op):
        flat = None
        for j, t in zip(at, tensors):
            t = P.astype(checked_index(t, x.shape[j], op=op, dim=j, shape=x.shape, negative=True,
                                       error=IndexError), D.int64)
            n = runtime_scalar(x.shape[j], D.INT64)
            t = S.where(t < runtime_scalar(0, D.INT64), t + n, t)  # checked, not yet wrapped
            flat = t if flat is None else flat * n + t
        return V.broadcast_to(flat, common)
    # the index's shape stands in for it until check() records it (nothing recorded here)
    return d, k, np.broadcast_to(np.int64(0), common), check


def _merged(x, d, k):
    """``x`` with dims ``d .. d+k-1`` merged into one (inserted, of size 1, for k = 0)."""
    shape = tuple(x.shape)
    return S.reshape(x, shape[:d] + (math.prod(shape[d:d + k]),) + shape[d + k:])


@register_lowering(aten.index.Tensor)
def _index(a, indices):
    """``x[..., idx, ...]`` with one index tensor at any dim: a gather along it
    (``x[:, [-1]]``, ``x[..., [0, 2]]``, ``x[idx]``); the result has ``idx``'s
    shape in place of the dims it indexes."""
    x = value(a)
    found = _one_index(x, indices) or _several_indices(x, indices)
    if found is None:
        at = [j for j, t in enumerate(indices) if t is not None]
        if len(at) < 2 or at[-1] >= x.ndim:
            return NotImplemented
        # non-adjacent index tensors: their broadcast dims come first (numpy's rule)
        rest = [j for j in range(x.ndim) if j not in at]
        x = V.permute(x, *(at + rest))
        found = _several_indices(x, [indices[j] for j in at])
        if found is None:
            return NotImplemented
    d, k, idx, check = found
    idx = check("index")
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    picked = _take(_merged(x, d, k), flat, d, negative=True)
    shape = tuple(x.shape)
    return S.reshape(picked, shape[:d] + tuple(idx.shape) + shape[d + k:])


@register_lowering(aten.take.default)
def _take_flat(a, index):
    """``torch.take``: ``x.flatten()[idx]``, negative indices wrapping."""
    x, idx = value(a), _index_tensor(index)
    if index.dtype != torch.int64:
        return NotImplemented  # eager's dtype error, from the fallback
    flat = S.reshape(x, (-1,))
    idx = checked_index(idx, flat.shape[0], op="take", dim=0, shape=x.shape, negative=True,
                        error=IndexError)
    picked = _take(flat, S.reshape(idx, (-1,)), 0, negative=True)
    return S.reshape(picked, tuple(idx.shape))


@register_lowering(aten.gather.default)
def _gather(a, dim, index, *, sparse_grad=False):
    x, idx = value(a), _index_tensor(index)
    if x.ndim == 0 or idx.ndim != x.ndim:
        return NotImplemented
    axis = dim % x.ndim
    idx = checked_index(idx, x.shape[axis], op="gather", dim=axis, shape=x.shape,
                        negative=False, error=RuntimeError)
    # torch reads x only over the index's extent on the other axes
    cut = tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(idx.shape))
    return IX.take_along_axis(S.getitem(x, cut), idx, axis=axis, negative_indices=False)


@register_lowering(aten.scatter_add.default)
def _scatter_add(a, dim, index, src):
    x, idx, v = value(a), _index_tensor(index), value(src)
    axis = dim % max(x.ndim, 1)
    if x.ndim == 0 or idx.ndim != x.ndim or any(
            n != m for k, (n, m) in enumerate(zip(idx.shape, x.shape)) if k != axis):
        return NotImplemented
    idx = checked_index(idx, x.shape[axis], op="scatter_add", dim=axis, shape=x.shape,
                        negative=False, error=RuntimeError)
    v = S.getitem(v, tuple(slice(0, n) for n in idx.shape))  # src is read over the index
    return IX.scatter_add(x, idx, v, axis=axis, negative_indices=False)


@register_lowering(aten.scatter.value, aten.scatter.src)
def _scatter(a, dim, index, src):
    """``a.scatter(dim, index, src)`` where ``src`` is one value, or the index has
    one element per row along ``dim``: the places hit, counted by a scatter-add,
    take the new value."""
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
    idx = checked_index(idx, x.shape[axis], op="scatter", dim=axis, shape=x.shape,
                        negative=False, error=RuntimeError)
    zeros = C.full(x.shape, 0, D.int32)
    hits = IX.scatter_add(zeros, idx, C.full(idx.shape, 1, D.int32), axis=axis,
                          negative_indices=False)
    return S.where(hits > runtime_scalar(0, D.INT32), new, x)


@register_lowering(aten.searchsorted.Tensor)
def _searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None,
                  sorter=None):
    """Positions of ``values`` in a 1-D sorted sequence (``torch.searchsorted``);
    ``side`` overrides ``right`` as in eager. Sequences with batch dims, or a
    ``sorter``, go on to the fallback."""
    seq = _index_tensor(sorted_sequence)
    if seq.ndim != 1 or sorter is not None or seq._node.dtype == D.BOOL:
        return NotImplemented
    x = _index_tensor(values) if isinstance(values, torch.Tensor) else None
    if x is None or x._node.dtype != seq._node.dtype:
        return NotImplemented  # eager's dtype rule, from the fallback
    pos = SO.searchsorted(seq, x, side=side or ("right" if right else "left"))
    return P.astype(pos, D.int32 if out_int32 else D.int64)


@register_lowering(aten.bucketize.Tensor)
def _bucketize(values, boundaries, *, out_int32=False, right=False):
    """``torch.bucketize``: ``searchsorted`` with the arguments swapped."""
    return _searchsorted(boundaries, values, out_int32=out_int32, right=right)


@register_lowering(aten.topk.default)
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


@register_lowering(aten.index_put.default)
def _index_put(a, indices, values, accumulate=False):
    """``x[..., idx, ...] = v`` (or ``+= v`` with ``accumulate``, what the backward
    of ``x[idx]`` records) with one index tensor at any dim. Accumulating: an
    index-add. Not: for a boolean mask with a value that is the same for every
    selected element (``x[x < t] = -inf``), ``where(mask, v, x)``, mask computed or
    not; else a select between ``x`` and ``v`` read at each place's position in
    ``idx``, for positions known on the host (of repeated indices the last wins,
    as in eager's CPU loop); a computed integer index goes to the fallback."""
    x = value(a)
    v = values.value if type(values) is LazyTensor else from_cpu(values)
    return _put_values(x, indices, v, accumulate)


def _put_values(x, indices, v, accumulate):
    """:func:`_index_put` on lazyrt values ``x`` and ``v``."""
    if v._node.dtype != x._node.dtype or x.ndim == 0:
        return NotImplemented  # eager's dtype error (or a 0-d target) from the fallback
    if not accumulate:
        out = _masked_fill(x, indices, v)
        if out is not None:
            return out
    found = _one_index(x, indices) or (_several_indices(x, indices) if accumulate else None)
    at = [j for j, t in enumerate(indices) if t is not None]
    if found is None and accumulate and 1 < len(at) and at[-1] < x.ndim:
        # index tensors apart: put on x with their dims first (as ``index`` reads), back after
        order = at + [j for j in range(x.ndim) if j not in at]
        moved = _put_values(V.permute(x, *order), [indices[j] for j in at], v, True)
        if moved is NotImplemented:
            return moved
        return V.permute(moved, *np.argsort(order).tolist())
    if found is None:
        return NotImplemented
    d, k, idx, check = found
    if not accumulate and host_array(idx) is None:
        return NotImplemented  # which of repeated writes wins: the fallback's (eager's) loop
    shape = tuple(x.shape)
    picked = shape[:d] + tuple(idx.shape) + shape[d + k:]
    if v.ndim > len(picked) or any(a not in (1, b) for a, b in zip(v.shape[::-1],
                                                                   picked[::-1])):
        # before the index's check is recorded: nothing is left to raise later
        raise RuntimeError(f"lazyrt.torch: index_put(): shape mismatch: value tensor of "
                           f"shape {tuple(v.shape)} cannot be broadcast to indexing result of "
                           f"shape {picked}")
    return _put(x, d, k, check("index_put"), v, accumulate)


def _put(x, d, k, idx, v, accumulate):
    """``x`` with ``v`` (which broadcasts to the indexed shape) written (added) at
    the range-checked ``idx`` along dims ``d .. d+k-1`` merged; ``idx`` known on
    the host unless ``accumulate``."""
    shape = tuple(x.shape)
    v = V.broadcast_to(v, shape[:d] + tuple(idx.shape) + shape[d + k:])
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    rows = S.reshape(v, shape[:d] + (flat.shape[0],) + shape[d + k:])
    base = _merged(x, d, k)
    if accumulate:
        return S.reshape(IX.index_add(base, flat, rows, axis=d), shape)
    positions = host_array(idx)
    n = base.shape[d]
    last = np.full(n, -1, np.int64)  # the last write to each place, as eager's loop
    last[positions.reshape(-1) % max(n, 1)] = np.arange(positions.size)
    hit = last >= 0
    along = [1] * base.ndim
    along[d] = n
    new = _take(rows, from_cpu(torch.from_numpy(np.maximum(last, 0))), d) if hit.any() \
        else base
    out = S.where(S.reshape(from_cpu(torch.from_numpy(hit)), tuple(along)), new, base)
    return S.reshape(out, shape)


@register_lowering(aten.index_copy.default)
def _index_copy(a, dim, index, source):
    """``x.index_copy(dim, index, source)`` for an index known on the host: eager
    refuses a negative index here (``x[idx] = v``, its decomposition, wraps it)."""
    x, idx = value(a), _index_tensor(index)
    v = source.value if type(source) is LazyTensor else None
    if v is None or idx.ndim > 1 or index.dtype != torch.int64 or \
            v._node.dtype != x._node.dtype or host_array(idx) is None:
        return NotImplemented  # eager's errors, a computed index: the fallback
    if x.ndim == 0:  # a scalar as a 1-element axis
        if v.ndim or idx.size != 1:
            return NotImplemented
        return S.reshape(_index_copy(LazyTensor(S.reshape(x, (1,))), 0, index,
                                     LazyTensor(S.reshape(v, (1,)))), ())
    axis = dim % x.ndim
    want = tuple(x.shape[:axis]) + (idx.size,) + tuple(x.shape[axis + 1:])
    if tuple(v.shape) != want:
        return NotImplemented
    idx = checked_index(S.reshape(idx, (-1,)), x.shape[axis], op="index_copy", dim=axis,
                        shape=x.shape, negative=False, error=IndexError)
    return _put(x, axis, 1, idx, v, False)


@register_lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def _index_fill(a, dim, index, fill):
    """``x.index_fill(dim, index, value)``: the slices hit (counted by an index-add,
    for an index the graph computes) take the value; negative indices wrap."""
    x, idx = value(a), _index_tensor(index)
    if x.ndim == 0:  # a scalar as a 1-element axis
        out = _index_fill(LazyTensor(S.reshape(x, (1,))), 0, index, fill)
        return out if out is NotImplemented else S.reshape(out, ())
    if index.dtype != torch.int64 or idx.ndim > 1 or \
            (isinstance(fill, torch.Tensor) and (fill.dim() or type(fill) is not LazyTensor
                                                 and fill.device.type != "cpu")):
        return NotImplemented  # eager's errors and 0-d forms, from the fallback
    axis = dim % x.ndim
    n = x.shape[axis]
    idx = checked_index(S.reshape(idx, (-1,)), n, op="index_fill", dim=axis, shape=x.shape,
                        negative=True, error=IndexError)
    code = x._node.dtype
    if type(fill) is LazyTensor:
        new = P.astype(fill.value, D.DTYPES[code])
    else:
        number = fill.item() if isinstance(fill, torch.Tensor) else fill
        new = runtime_scalar(number_of(number, code), code)
    known = host_array(idx)
    if known is not None:
        hit = np.zeros(n, bool)
        hit[known % max(n, 1)] = True
        hit = from_cpu(torch.from_numpy(hit))
    else:
        hit = IX.index_add(C.zeros((n,), D.int32), idx, C.ones((idx.shape[0],), D.int32),
                           axis=0) > runtime_scalar(0, D.INT32)
    along = [1] * x.ndim
    along[axis] = n
    return S.where(S.reshape(hit, tuple(along)), new, x)


def _masked_fill(x, indices, v):
    """``x[mask] = v`` for a boolean ``mask`` (computed or not) at one dim and a
    ``v`` that broadcasts to every selected element alike (its size on the mask's
    dim is 1): ``where(mask, v, x)``; None for other forms."""
    at = [k for k, t in enumerate(indices) if t is not None]
    if len(at) != 1 or not isinstance(indices[at[0]], torch.Tensor) or \
            indices[at[0]].dtype != torch.bool:
        return None
    d, mask = at[0], _index_tensor(indices[at[0]])
    k, shape = mask.ndim, tuple(x.shape)
    rest = shape[d + k:]
    target = shape[:d] + (1,) + rest
    if d + k > x.ndim or tuple(mask.shape) != shape[d:d + k] or v.ndim > len(target) or \
            any(s not in (1, t) for s, t in zip(reversed(v.shape), reversed(target))):
        return None
    full = (1,) * (len(target) - v.ndim) + tuple(v.shape)
    v = S.reshape(v, full[:d] + (1,) * k + full[d + 1:])
    m = S.reshape(mask, (1,) * d + tuple(mask.shape) + (1,) * len(rest))
    return S.where(m, v, x)


@register_lowering(aten.index_select.default)
def _index_select(a, dim, index):
    """``x.index_select(dim, index)``: a 1-D (or 0-d) index picks slices along ``dim``;
    negative indices are eager's error, as large ones."""
    x, idx = value(a), _index_tensor(index)
    if idx.ndim > 1 or (x.ndim == 0 and idx.size != 1):
        return NotImplemented  # (a scalar indexed by several: eager's error, from the fallback)
    axis = dim % max(x.ndim, 1)
    idx = checked_index(idx, x.shape[axis] if x.ndim else 1, op="index_select", dim=axis,
                        shape=x.shape, negative=False, error=IndexError)
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    if x.ndim == 0:  # a scalar stays one: index 0 of it as of a 1-element axis
        return S.reshape(_take(S.reshape(x, (1,)), flat, 0), ())
    return _take(x, flat, axis)


@register_lowering(aten.index_add.default)
def _index_add(a, dim, index, source, *, alpha=1):
    """``x.index_add(dim, index, source, alpha=alpha)``: eager refuses a negative
    index here (where ``x[idx] += v`` wraps it)."""
    x, idx = value(a), _index_tensor(index)
    v = source.value if type(source) is LazyTensor else None
    if v is None or x.ndim == 0 or idx.ndim > 1 or index.dtype not in _INTEGER_INDEX or \
            v._node.dtype != x._node.dtype or (x._node.dtype == D.BOOL and alpha != 1):
        return NotImplemented  # eager's error (or its 0-d form) from the fallback
    axis = dim % x.ndim
    want = tuple(x.shape[:axis]) + (idx.size,) + tuple(x.shape[axis + 1:])
    if tuple(v.shape) != want and not (v.ndim == 0 and math.prod(want) == 1):
        return NotImplemented
    idx = checked_index(idx, x.shape[axis], op="index_add", dim=axis, shape=x.shape,
                        negative=False, error=RuntimeError)
    flat = S.reshape(idx, (-1,))
    v = S.reshape(v, want)
    if alpha != 1:
        v = v * runtime_scalar(number_of(alpha, x._node.dtype), x._node.dtype)
    return IX.index_add(x, flat, v, axis=axis, negative_indices=False)


@register_lowering(aten.embedding.default)
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``F.embedding``: rows of the 2-D ``weight``; a negative index is eager's
    error (``weight[idx]`` would wrap it)."""
    w, idx = value(weight), _index_tensor(indices)
    if w.ndim != 2 or indices.dtype not in _INTEGER_INDEX:
        return NotImplemented
    idx = checked_index(idx, w.shape[0], op="embedding", dim=0, shape=w.shape,
                        negative=False, error=IndexError)
    flat = S.reshape(P.astype(idx, D.int64), (-1,))
    return S.reshape(_take(w, flat, 0), tuple(idx.shape) + (w.shape[1],))


def _take(x, flat, axis, negative=False):
    """Slices of ``x`` at the 1-D ``flat`` along ``axis`` (already range-checked)."""
    along = [1] * x.ndim
    along[axis] = flat.shape[0]
    return IX.take_along_axis(x, S.reshape(flat, tuple(along)), axis=axis,
                              negative_indices=negative)


@register_lowering(aten.embedding_dense_backward.default, keep_decomposition=True)
def _embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The weight's gradient: each index's row of ``grad`` added into its row (none
    for ``padding_idx``); with ``scale_grad_by_freq``, each row of ``grad`` first
    divided by how often its index occurs in the batch (a scatter-add of ones, read
    back by a gather)."""
    g, idx = value(grad), _index_tensor(indices)
    dtype = D.DTYPES[g._node.dtype]
    idx = checked_index(idx, num_weights, op="embedding_dense_backward", dim=0,
                        shape=(num_weights, g.shape[-1]), negative=False, error=IndexError)
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


@register_lowering(aten.flip.default)
def _flip(a, dims):
    x = value(a)
    return M.flip(x, axis=tuple(dims)) if len(dims) else P.astype(x, x.dtype)


@register_lowering(aten.repeat.default)
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


@register_lowering(aten.sort.default, aten.sort.stable)
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


register_lowering(aten.cumsum.default)(_cumulative(RD.cumulative_sum))
register_lowering(aten.cumprod.default)(_cumulative(RD.cumulative_prod))
