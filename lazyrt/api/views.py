"""Views and movement: reshape, permute, expand, basic slicing, concat, stack.

lazyrt has value semantics: a view never aliases a mutable buffer. ``y =
x[1:]`` followed by ``x[2] = 0`` leaves ``y`` unchanged (the array API
leaves view mutation unspecified; NumPy would change ``y``). That is what
lets the planner fold every view into an index map instead of copying.
"""
from __future__ import annotations

import numpy as np

from .. import _recorder as R
from .. import _recorder_shapes as S
from .. import dtypes as D
from .. import ops
from .creation import as_tensor
from ..errors import AxisError, ShapeError
from .operands import normalize_axis
from .pointwise import astype


def _record(op, x, shape, attrs, dtype=None):
    code = x._node.dtype if dtype is None else dtype
    return R.wrap(R.record(op.id, code, tuple(shape), (x._node,), attrs))


def reshape(x, /, shape, *dims, copy=None):
    """``x`` with a new ``shape`` of the same size; one dimension may be -1.

    The array API's signature; recorded in Cython. ``lr.reshape(x, 2, 8)`` and
    ``x.reshape(2, 8)`` (sizes as separate arguments) are the same as ``(2, 8)``.
    Always a new tensor and never a copy at this call (value semantics). ``copy=False``
    raises a ValueError where NumPy would have to copy (a reshape of a transposed or
    strided view): the planner then keeps a copy in a buffer. ``copy=True`` is the
    default's behaviour.
    """
    x = as_tensor(x)
    if dims:
        shape = (shape,) + dims
    if copy is False and _reshape_needs_copy(x._node, S.reshape(x, shape).shape):
        raise ValueError(f"lazyrt.reshape: copy=False, but reshaping this non-contiguous "
                         f"view of shape {x.shape} to {shape} needs a copy")
    return S.reshape(x, shape)


def _reshape_needs_copy(node, shape) -> bool:
    """Whether NumPy could not reshape ``node``'s value to ``shape`` without a copy,
    given the chain of views that leads to it from a buffer."""
    from ..planner import strided
    chain = []
    while ops.OPS[node.op].kind == ops.VIEW:
        chain.append(node)
        node = node.inputs[0]
    base = node.value if node.op == ops.DATA.id else None
    if not isinstance(base, np.ndarray):
        base = None  # computed, or a device backend's array: contiguous
    if base is not None and base.ndim and any(
            st % base.itemsize for st in base.strides):
        return True
    view = strided.Strided.contiguous(node.shape) if base is None or not base.ndim else \
        strided.Strided(base.shape, tuple(st // base.itemsize for st in base.strides), 0)
    for n in reversed(chain):
        view = strided.apply_view(view, ops.OPS[n.op].name, n.attrs)
        if view is None:
            return True
    return strided.reshape(view, shape) is None


def permute(x, *axes):
    """Axes reordered: ``permute(x, (1, 0))`` is a transpose."""
    x = as_tensor(x)
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = axes[0]
    axes = tuple(normalize_axis("permute", a, x.ndim) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise AxisError(f"lazyrt.permute: {axes} is not a permutation of the axes of a "
                        f"tensor of shape {x.shape}")
    if axes == tuple(range(x.ndim)):
        return R.wrap(x._node)  # a new tensor: value semantics, nothing copied
    return _record(ops.PERMUTE, x, [x.shape[a] for a in axes], (axes,))


def transpose(x, axes=None):
    """NumPy's transpose: reverse the axes, or permute them by ``axes``."""
    x = as_tensor(x)
    return permute(x, tuple(reversed(range(x.ndim))) if axes is None else axes)


def swapaxes(x, a, b):
    x = as_tensor(x)
    axes = list(range(x.ndim))
    a, b = normalize_axis("swapaxes", a, x.ndim), normalize_axis("swapaxes", b, x.ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return permute(x, axes)


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape`` (NumPy rules; -1 keeps a dimension, as torch's expand)."""
    x = as_tensor(x)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if len(shape) < x.ndim:
        raise ShapeError(f"lazyrt.broadcast_to: cannot broadcast {x.shape} to {shape}: "
                         "target has fewer dimensions")
    lead = len(shape) - x.ndim
    full = (1,) * lead + x.shape
    target = tuple(full[i] if d == -1 else int(d) for i, d in enumerate(shape))
    for have, want in zip(full, target):
        if have != want and have != 1:
            raise ShapeError(f"lazyrt.broadcast_to: cannot broadcast {x.shape} to {target}")
    if target == x.shape:
        return R.wrap(x._node)  # a new tensor: value semantics, nothing copied
    if lead:
        x = reshape(x, full)
    if target == full:
        return x  # the new tensor reshape made
    return _record(ops.EXPAND, x, target, (target,))


expand = broadcast_to


def squeeze(x, axis=None):
    """Drop size-1 axes (all of them, or the given ones, which must be size 1)."""
    x = as_tensor(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = axis if isinstance(axis, (tuple, list)) else (axis,)
        axes = tuple(normalize_axis("squeeze", a, x.ndim) for a in axes)
        for a in axes:
            if x.shape[a] != 1:
                raise ShapeError(f"lazyrt.squeeze: axis {a} of shape {x.shape} has size "
                                 f"{x.shape[a]}, not 1")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def unsqueeze(x, axis):
    """Insert a size-1 axis at ``axis`` (as ``np.expand_dims``)."""
    x = as_tensor(x)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    ndim = x.ndim + len(axes)
    axes = sorted(normalize_axis("unsqueeze", a, ndim) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


expand_dims = unsqueeze


def flatten(x, start_dim=0, end_dim=-1):
    """Merge axes ``start_dim..end_dim`` into one (all of them by default)."""
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1,))
    s = normalize_axis("flatten", start_dim, x.ndim)
    e = normalize_axis("flatten", end_dim, x.ndim)
    merged = 1
    for d in x.shape[s:e + 1]:
        merged *= d
    return reshape(x, x.shape[:s] + (merged,) + x.shape[e + 1:])


# --- indexing ---------------------------------------------------------------

# basic indexing (ints, slices, None, ...) is parsed and recorded in Cython; arrays,
# tensors and masks as indices are lazyrt.api.subscript's
getitem = S.getitem


def setitem(x, index, value):
    """``x[index] = value`` for a basic ``index`` (ints, slices, None, ...), with value
    semantics: ``x`` gets a new node. (``x[mask] = value`` is
    :func:`lazyrt.api.subscript.setitem`'s.)"""
    parsed = S.parse_index(x.shape, index)
    if parsed is None:
        raise IndexError("lazyrt: assignment supports basic indexing (ints, slices, None, "
                         "...) and a boolean mask alone (x[mask] = v); for integer arrays, "
                         "build the result with lr.where")
    spec, out_shape = parsed
    if type(value) is int and x._node.dtype in D.INTEGRAL:
        info = np.iinfo(x.dtype)  # NumPy refuses, rather than wraps, such a Python int
        if not info.min <= value <= info.max:
            raise OverflowError(f"lazyrt.setitem: Python integer {value} is out of bounds "
                                f"for {x.dtype} (shape {x.shape})")
    value = astype(as_tensor(value), x.dtype)
    value = broadcast_to(value, out_shape) if value.shape != out_shape else value
    value = reshape(value, tuple(s[2] for s in spec))
    node = R.record(ops.SETSLICE.id, x._node.dtype, x.shape, (x._node, value._node), (spec,))
    x._node = node


# --- joining ------------------------------------------------------------------

def concat(tensors, /, axis=0):
    """Join tensors along an existing axis; dtypes promote as in NumPy.
    ``axis=None`` flattens each tensor first (the array API's rule)."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("lazyrt.concat: needs at least one tensor")
    if axis is None:
        ts, axis = [S.reshape(t, (t.size,)) for t in ts], 0
    ndim = ts[0].ndim
    if ndim == 0:
        raise ShapeError("lazyrt.concat: zero-dimensional tensors cannot be concatenated")
    axis = normalize_axis("concat", axis, ndim)
    for t in ts[1:]:
        if t.ndim != ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape))
                                 if i != axis):
            raise ShapeError(f"lazyrt.concat: shapes {[u.shape for u in ts]} differ outside "
                             f"axis {axis}")
    code = D.promote(*(t._node.dtype for t in ts))
    ts = [astype(t, D.DTYPES[code]) for t in ts]
    if len(ts) == 1:
        return ts[0]  # a new tensor (astype always makes one)
    shape = list(ts[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    return R.wrap(R.record(ops.CONCAT.id, code, tuple(shape), tuple(t._node for t in ts),
                           (axis,)))


concatenate = concat


def stack(tensors, axis=0):
    """Join same-shape tensors along a new axis."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("lazyrt.stack: needs at least one tensor")
    if any(t.shape != ts[0].shape for t in ts):
        raise ShapeError(f"lazyrt.stack: all shapes must be equal, got {[t.shape for t in ts]}")
    axis = normalize_axis("stack", axis, ts[0].ndim + 1)
    return concat([unsqueeze(t, axis) for t in ts], axis)
