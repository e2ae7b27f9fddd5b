"""Views and movement: reshape, permute, expand, slicing, concat, stack.

lazyrt has value semantics: a view never aliases a mutable buffer. ``y =
x[1:]`` followed by ``x[2] = 0`` leaves ``y`` unchanged (the array API
leaves view mutation unspecified; NumPy would change ``y``). That is what
lets the planner fold every view into an index map instead of copying.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from . import _recorder as R
from . import dtypes as D
from . import ops
from .creation import asarray
from .errors import AxisError, ShapeError
from .metrics import metrics
from .pointwise import astype


def _t(x):
    return x if isinstance(x, R.TensorBase) else asarray(x)


def _axis(name, axis, ndim):
    try:
        axis = operator.index(axis)
    except TypeError as exc:
        raise TypeError(f"lazyrt.{name}: axis must be an int, not {axis!r}") from exc
    if not -ndim <= axis < ndim:
        raise AxisError(f"lazyrt.{name}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def _record(op, x, shape, attrs, dtype=None):
    code = x._node.dtype if dtype is None else dtype
    return R.wrap(R.record(op.id, code, tuple(shape), (x._node,), attrs))


def reshape(x, *shape):
    """``x`` with a new shape of the same size; one dimension may be -1."""
    x = _t(x)
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = shape[0]
    if type(shape) is not tuple or not all(type(d) is int for d in shape):
        shape = tuple(operator.index(d) for d in shape)
    size = math.prod(x.shape)
    if -1 in shape:
        if shape.count(-1) > 1 or any(d < -1 for d in shape):
            raise ShapeError(f"lazyrt.reshape: invalid shape {shape} for a tensor of shape "
                             f"{x.shape}")
        known = -math.prod(shape)
        if known == 0 or size % known:
            raise ShapeError(f"lazyrt.reshape: cannot reshape {x.shape} (size {size}) "
                             f"into {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif math.prod(shape) != size or any(d < 0 for d in shape):
        raise ShapeError(f"lazyrt.reshape: cannot reshape {x.shape} (size {size}) into {shape}")
    if shape == x.shape:
        return x
    return R.wrap(R.record(_RESHAPE, x._node.dtype, shape, (x._node,), (shape,)))


_RESHAPE = ops.RESHAPE.id
_SLICE = ops.SLICE.id


def permute(x, *axes):
    """Axes reordered: ``permute(x, (1, 0))`` is a transpose."""
    x = _t(x)
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = axes[0]
    axes = tuple(_axis("permute", a, x.ndim) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise AxisError(f"lazyrt.permute: {axes} is not a permutation of the axes of a "
                        f"tensor of shape {x.shape}")
    if axes == tuple(range(x.ndim)):
        return x
    return _record(ops.PERMUTE, x, [x.shape[a] for a in axes], (axes,))


def transpose(x, axes=None):
    """NumPy's transpose: reverse the axes, or permute them by ``axes``."""
    x = _t(x)
    return permute(x, tuple(reversed(range(x.ndim))) if axes is None else axes)


def swapaxes(x, a, b):
    x = _t(x)
    axes = list(range(x.ndim))
    a, b = _axis("swapaxes", a, x.ndim), _axis("swapaxes", b, x.ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return permute(x, axes)


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape`` (NumPy rules; -1 keeps a dimension, as torch's expand)."""
    x = _t(x)
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
        return x
    if lead:
        x = reshape(x, full)
    if target == full:
        return x
    return _record(ops.EXPAND, x, target, (target,))


expand = broadcast_to


def squeeze(x, axis=None):
    """Drop size-1 axes (all of them, or the given ones, which must be size 1)."""
    x = _t(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = axis if isinstance(axis, (tuple, list)) else (axis,)
        axes = tuple(_axis("squeeze", a, x.ndim) for a in axes)
        for a in axes:
            if x.shape[a] != 1:
                raise ShapeError(f"lazyrt.squeeze: axis {a} of shape {x.shape} has size "
                                 f"{x.shape[a]}, not 1")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def unsqueeze(x, axis):
    """Insert a size-1 axis at ``axis`` (as ``np.expand_dims``)."""
    x = _t(x)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    ndim = x.ndim + len(axes)
    axes = sorted(_axis("unsqueeze", a, ndim) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


expand_dims = unsqueeze


def flatten(x, start_dim=0, end_dim=-1):
    """Merge axes ``start_dim..end_dim`` into one (all of them by default)."""
    x = _t(x)
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = _axis("flatten", start_dim, x.ndim), _axis("flatten", end_dim, x.ndim)
    merged = 1
    for d in x.shape[s:e + 1]:
        merged *= d
    return reshape(x, x.shape[:s] + (merged,) + x.shape[e + 1:])


# --- indexing ---------------------------------------------------------------

def _parse_index(x, index):
    """Basic indexing → (per-axis (start, step, length), result shape).

    The result shape keeps int-indexed axes out and None axes in.
    Returns None for advanced indexing (arrays, masks), which falls back.
    """
    if type(index) is not tuple:
        index = (index,)
    shape = x._node.shape
    ndim = len(shape)
    n_real = 0
    ellipses = 0
    for i in index:
        if i is None:
            continue
        if i is Ellipsis:
            ellipses += 1
        elif isinstance(i, (R.TensorBase, np.ndarray, list)):
            return None
        else:
            n_real += 1
    if ellipses > 1:
        raise IndexError("lazyrt: an index can only have a single ellipsis ('...')")
    if n_real > ndim:
        raise IndexError(f"lazyrt: too many indices for a tensor of shape {shape}: "
                         f"{n_real} were given")
    spec, out_shape, axis = [], [], 0
    fill = ndim - n_real
    for i in index + ((Ellipsis,) if not ellipses else ()):
        if i is None:
            out_shape.append(1)
            continue
        if i is Ellipsis:
            for _ in range(fill):
                dim = shape[axis]
                spec.append((0, 1, dim))
                out_shape.append(dim)
                axis += 1
            continue
        dim = shape[axis]
        if type(i) is slice:
            start, stop, step = i.indices(dim)
            length = len(range(start, stop, step))
            spec.append((start if length else 0, step, length))
            out_shape.append(length)
        else:
            try:
                k = operator.index(i)
            except TypeError as exc:
                raise IndexError(f"lazyrt: only ints, slices, None and ... are valid "
                                 f"indices, not {i!r}") from exc
            if not -dim <= k < dim:
                raise IndexError(f"lazyrt: index {k} is out of bounds for axis {axis} "
                                 f"with size {dim} (shape {shape})")
            spec.append((k % dim, 1, 1))
        axis += 1
    return tuple(spec), tuple(out_shape)


def _is_identity(spec, shape):
    for s, d in zip(spec, shape):
        if s[0] != 0 or s[1] != 1 or s[2] != d:
            return False
    return True


def getitem(x, index):
    parsed = _parse_index(x, index)
    if parsed is None:
        metrics.count_fallback("getitem[advanced]")
        key = tuple(np.asarray(i) if isinstance(i, R.TensorBase) else i
                    for i in (index if isinstance(index, tuple) else (index,)))
        return asarray(x.numpy()[key])
    spec, out_shape = parsed
    out = x
    if not _is_identity(spec, x.shape):
        out = R.wrap(R.record(_SLICE, x._node.dtype, tuple([s[2] for s in spec]),
                              (x._node,), (spec,)))
    return reshape(out, out_shape) if out.shape != out_shape else out


def setitem(x, index, value):
    """``x[index] = value`` with value semantics: ``x`` gets a new node."""
    parsed = _parse_index(x, index)
    if parsed is None:
        raise IndexError("lazyrt: assignment supports basic indexing only (ints, slices, "
                         "None, ...); use lr.where for masks")
    spec, out_shape = parsed
    if type(value) is int and x._node.dtype in D.INTEGRAL:
        info = np.iinfo(x.dtype)  # NumPy refuses, rather than wraps, such a Python int
        if not info.min <= value <= info.max:
            raise OverflowError(f"lazyrt.setitem: Python integer {value} is out of bounds "
                                f"for {x.dtype} (shape {x.shape})")
    value = astype(_t(value), x.dtype)
    value = broadcast_to(value, out_shape) if value.shape != out_shape else value
    value = reshape(value, tuple(s[2] for s in spec))
    node = R.record(ops.SETSLICE.id, x._node.dtype, x.shape, (x._node, value._node), (spec,))
    x._node = node


# --- joining ------------------------------------------------------------------

def concat(tensors, axis=0):
    """Join tensors along an existing axis; dtypes promote as in NumPy."""
    ts = [_t(t) for t in tensors]
    if not ts:
        raise ValueError("lazyrt.concat: needs at least one tensor")
    ndim = ts[0].ndim
    if ndim == 0:
        raise ShapeError("lazyrt.concat: zero-dimensional tensors cannot be concatenated")
    axis = _axis("concat", axis, ndim)
    for t in ts[1:]:
        if t.ndim != ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape))
                                 if i != axis):
            raise ShapeError(f"lazyrt.concat: shapes {[u.shape for u in ts]} differ outside "
                             f"axis {axis}")
    code = D.promote(*(t._node.dtype for t in ts))
    ts = [astype(t, D.DTYPES[code]) for t in ts]
    if len(ts) == 1:
        return ts[0]
    shape = list(ts[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ts)
    return R.wrap(R.record(ops.CONCAT.id, code, tuple(shape), tuple(t._node for t in ts),
                           (axis,)))


concatenate = concat


def stack(tensors, axis=0):
    """Join same-shape tensors along a new axis."""
    ts = [_t(t) for t in tensors]
    if not ts:
        raise ValueError("lazyrt.stack: needs at least one tensor")
    if any(t.shape != ts[0].shape for t in ts):
        raise ShapeError(f"lazyrt.stack: all shapes must be equal, got {[t.shape for t in ts]}")
    axis = _axis("stack", axis, ts[0].ndim + 1)
    return concat([unsqueeze(t, axis) for t in ts], axis)
