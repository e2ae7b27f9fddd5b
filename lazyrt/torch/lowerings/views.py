"""View, split, scatter and concatenation lowerings (value semantics: torch's
functionalization keeps the aliasing, so every view here is a ``*_copy``).

The views functionalization replays most (``t``, ``transpose``, ``permute``,
``unsqueeze``) record one node without the API's argument checks; bad
arguments still reach the API's error. ``select_backward`` is an elementwise
mask the planner fuses.
"""
from __future__ import annotations

import sys

import torch

from ... import _recorder as R
from ... import _recorder_shapes as S
from ... import ops as OPS
from ...api import creation as C
from ...api import pointwise as P
from ...api import views as V
from ..operands import KIND, operand, promoted, value
from ..operands import value as value_of
from ..registry import register_lowering
from ..tensor import runtime_scalar
from .creation import full_of
from .reductions import dims_of_0d

aten = torch.ops.aten
_PERMUTE = OPS.PERMUTE.id


def _index_at(ndim, dim, item):
    idx = [slice(None)] * ndim
    idx[dim % ndim] = item
    return tuple(idx)


def _slice_item(length, start, end, step):
    start = 0 if start is None else start
    end = sys.maxsize if end is None else end
    return slice(start, end, step)


def _slice(a, dim=0, start=None, end=None, step=1):
    x = value(a)
    return S.getitem(x, _index_at(x.ndim, dim, _slice_item(x.shape[dim], start, end, step)))


@register_lowering(aten.narrow_copy.default)
def _narrow_copy(a, dim, start, length):
    """``narrow_copy``: ``length`` elements from ``start`` (wrapped when negative);
    a range outside the dim goes on to the fallback, which raises eager's error."""
    n = value(a).shape[dim]
    start = start + n if start < 0 else start
    if not (0 <= start <= n and 0 <= length <= n - start):
        return NotImplemented
    return _slice(a, dim, start, start + length)


@register_lowering(aten.select.int, aten.select_copy.int)
def _select(a, dim, index):
    x = value(a)
    n = x.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"lazyrt.torch: select(): index {index} out of range for tensor of "
                         f"size {tuple(x.shape)} at dimension {dim}")
    return S.getitem(x, _index_at(x.ndim, dim, index))


def _squeeze(a, dim=None):
    x = value(a)
    dims = range(x.ndim) if dim is None else (dim if isinstance(dim, (list, tuple)) else [dim])
    keep = {d % max(x.ndim, 1) for d in dims if x.ndim and x.shape[d] == 1}
    return S.reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in keep))


def _permuted(x, axes):
    """``x`` with its axes reordered by ``axes`` (a permutation of ``range(x.ndim)``,
    checked by the caller): one recorded node, none of the API's argument checks
    (the view ops are most of what functionalization replays)."""
    node = x._node
    shape = node.shape
    return R.wrap(R.record(_PERMUTE, node.dtype, tuple([shape[i] for i in axes]), (node,),
                           (axes,)))


def _t(a):
    x = value(a)
    return _permuted(x, (1, 0)) if x.ndim == 2 else P.astype(x, x.dtype)


def _permute(a, dims):
    x = value(a)
    n = x.ndim
    axes = tuple(d % n if -n <= d < n else d for d in dims) if n else tuple(dims)
    if n and sorted(axes) == list(range(n)):
        return _permuted(x, axes) if axes != tuple(range(n)) else R.wrap(x._node)
    return V.permute(x, tuple(dims))  # raises the API's error


def _unsqueeze(a, dim):
    x = value(a)
    n = x.ndim + 1
    if not -n <= dim < n:
        return V.unsqueeze(x, dim)  # raises the API's error
    shape = list(x.shape)
    shape.insert(dim % n, 1)
    return S.reshape(x, tuple(shape))


def _copies(*names):
    out = []
    for n in names:
        for packet_name in (n, n + "_copy"):
            packet = getattr(aten, packet_name, None)
            if packet is not None:
                out += [getattr(packet, o) for o in packet.overloads()
                        if not o.endswith("out")]
    return out


register_lowering(*_copies("view", "_unsafe_view", "reshape"))(
    lambda a, shape: S.reshape(value(a), tuple(shape)))
register_lowering(*_copies("permute"))(_permute)
register_lowering(*_copies("expand"))(
    lambda a, size, *, implicit=False: V.broadcast_to(value(a), tuple(size)))
register_lowering(*_copies("slice"))(_slice)


@register_lowering(aten.transpose.int, aten.transpose_copy.int)
def _transpose(a, d0, d1):
    x = value(a)
    if dims_of_0d(x, (d0, d1)):  # torch lets a 0-d tensor swap dims 0/-1 with itself
        return P.astype(x, x.dtype)
    n = x.ndim
    if -n <= d0 < n and -n <= d1 < n:
        axes = list(range(n))
        axes[d0], axes[d1] = axes[d1], axes[d0]
        return _permuted(x, tuple(axes)) if d0 % n != d1 % n else R.wrap(x._node)
    return V.swapaxes(x, d0, d1)  # raises the API's error


register_lowering(*_copies("t"))(_t)
register_lowering(*_copies("unsqueeze"))(_unsqueeze)
register_lowering(*_copies("squeeze"))(_squeeze)


@register_lowering(*_copies("split_with_sizes"))
def _split_sizes(a, sizes, dim=0):
    x = value(a)
    out, start = [], 0
    for n in sizes:
        out.append(S.getitem(x, _index_at(x.ndim, dim, slice(start, start + n))))
        start += n
    return out


@register_lowering(aten.split.Tensor, aten.split_copy.Tensor)
def _split(a, size, dim=0):
    n = value(a).shape[dim]
    sizes = [min(size, n - s) for s in range(0, n, size)] if n else [0]
    return _split_sizes(a, sizes, dim)


register_lowering(aten.unbind.int, aten.unbind_copy.int)(
    lambda a, dim=0: [_select(a, dim, i) for i in range(value(a).shape[dim])])


def _scatter_into(base, src, index):
    out = P.astype(value(base), value(base).dtype)  # a new tensor: base keeps its value
    V.setitem(out, index, operand(src, out._node.dtype))
    return out


@register_lowering(aten.select_backward.default)
def _select_backward(grad, input_sizes, dim, index):
    """Zeros of ``input_sizes`` with ``grad`` at ``index`` along ``dim``, as a mask over
    ``grad`` spread along ``dim``: elementwise, so the planner fuses it (and the sum of
    the three of ``q, k, v = proj[0], proj[1], proj[2]``) instead of running a
    scatter into zeros per select."""
    g = value(grad)
    sizes = tuple(input_sizes)
    d = dim % len(sizes)
    spread = V.broadcast_to(V.unsqueeze(g, d), sizes)
    at = [1] * len(sizes)
    at[d] = sizes[d]
    mask = S.reshape(C.arange(sizes[d]) == index % sizes[d], tuple(at))
    return S.where(mask, spread, runtime_scalar(0, g._node.dtype))


register_lowering(aten.select_scatter.default)(
    lambda a, src, dim, index: _scatter_into(a, src, _index_at(value(a).ndim, dim, index)))
register_lowering(aten.slice_scatter.default)(
    lambda a, src, dim=0, start=None, end=None, step=1:
        _scatter_into(a, src, _index_at(value(a).ndim, dim, _slice_item(
            value(a).shape[dim], start, end, step))))


@register_lowering(aten.cat.default)
def _cat(tensors, dim=0):
    # torch's legacy rule: 1-d empty tensors are skipped
    kept = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)] or list(tensors)
    comp, _ = promoted(KIND.NO_OPMATH, *kept)
    return V.concat([operand(t, comp) for t in kept], dim)


@register_lowering(aten.constant_pad_nd.default)
def _constant_pad_nd(a, pad, value=0):
    """``F.pad(x, pad, value=v)``: ``pad`` holds (before, after) pairs from the last
    dimension back; a negative one crops. A fill of the padded shape with the
    (cropped) input set into it. Shapes eager refuses go on to the fallback,
    which raises eager's error."""
    x = value_of(a)  # (aten names the fill ``value``)
    n = len(pad) // 2
    if len(pad) % 2 or n > x.ndim:
        return NotImplemented
    crop, put, shape = [slice(None)] * x.ndim, [slice(None)] * x.ndim, list(x.shape)
    for i in range(n):
        d = x.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        start, stop = max(-before, 0), shape[d] + min(after, 0)
        kept = stop - start
        if kept < 0:  # cropped past the other end: eager's narrow() error
            return NotImplemented
        crop[d], put[d] = slice(start, start + kept), slice(max(before, 0),
                                                          max(before, 0) + kept)
        shape[d] = kept + max(before, 0) + max(after, 0)
    out = full_of(shape, value, a.dtype)
    V.setitem(out, tuple(put), S.getitem(x, tuple(crop)))
    return out
