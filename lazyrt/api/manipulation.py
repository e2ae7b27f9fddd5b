"""Array-API creation and manipulation functions, composed from recorded ops.

Everything here stays lazy and is built from ops the planner already knows,
so it fuses with its neighbours: ``flip`` is a slice with step -1, ``roll``
two slices joined by ``concat``, ``tile`` and ``repeat`` (by an int) a
reshape, an expand and a reshape, ``tril``/``triu`` one ``where`` over an
index comparison (one kernel with ``x``), ``tensordot`` a permute, a reshape
and a matmul, ``vecdot`` a multiply and a sum. ``take`` is the one new op: an
OPAQUE indexed read the host runs (``lazyrt/ops.py``).

The one barrier: ``repeat`` by a *tensor* of counts, whose output shape
depends on their values (see :func:`repeat`).

>>> import lazyrt as lr
>>> lr.roll(lr.arange(5), 2).tolist()
[3, 4, 0, 1, 2]
"""
from __future__ import annotations

import math

import numpy as np

from .. import _recorder as R
from .. import dtypes as D
from .. import ops
from ..errors import AxisError, DTypeError, ShapeError
from .creation import arange, as_tensor, asarray
from .pointwise import astype, where
from .reductions import sum as _sum
from .views import broadcast_to, concat, permute, reshape, swapaxes
from .indexing import take_along_axis
from .operands import int_argument, normalize_axis

__all__ = ["broadcast_arrays", "flip", "matrix_transpose", "meshgrid", "moveaxis",
           "permute_dims", "repeat", "roll", "take", "tensordot", "tile", "tril", "triu",
           "unstack", "vecdot"]


def _axes(name, axis, ndim) -> tuple:
    """``axis`` (an int or a sequence of ints) normalized, without repeats."""
    seq = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = tuple(normalize_axis(name, a, ndim) for a in seq)
    if len(set(out)) != len(out):
        raise AxisError(f"lazyrt.{name}: repeated axis in {axis!r}")
    return out


def _copy(x):
    return R.wrap(x._node)  # a new tensor on the same node: value semantics


def _zero(code):
    return R.wrap(R.scalar_node(False if code == D.BOOL else 0, code, True))


def _along(axis, index, ndim):
    """An index tuple selecting ``index`` on ``axis`` and everything elsewhere."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


# --- triangles -------------------------------------------------------------------

def _triangle(name, x, k, keep):
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"lazyrt.{name}: needs a tensor of rank >= 2, got shape {x.shape}")
    k = int_argument(name, "k", k)
    n, m = x.shape[-2:]
    # column - row against k: the indices are data, k a runtime scalar, and the
    # comparison fuses with the select into one kernel over x
    offset = arange(m) - reshape(arange(n), (n, 1))
    return where(keep(offset, k), x, _zero(x._node.dtype))


def tril(x, /, *, k=0):
    """The lower triangle of the last two axes: elements on and below diagonal ``k``
    (``k > 0`` above the main diagonal), zeros elsewhere."""
    return _triangle("tril", x, k, lambda offset, k: offset <= k)


def triu(x, /, *, k=0):
    """The upper triangle of the last two axes: elements on and above diagonal ``k``."""
    return _triangle("triu", x, k, lambda offset, k: offset >= k)


# --- reordering ------------------------------------------------------------------

def flip(x, /, *, axis=None):
    """``x`` with the order of elements reversed along ``axis`` (every axis by
    default): a slice with step -1, no data moved until it is read."""
    x = as_tensor(x)
    axes = tuple(range(x.ndim)) if axis is None else _axes("flip", axis, x.ndim)
    if not axes:
        return _copy(x)
    return x[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))]


def roll(x, /, shift, *, axis=None):
    """Elements shifted along ``axis`` (of the flattened tensor when None), those
    pushed past the end coming back at the start. ``shift`` and ``axis`` may be
    tuples (paired, or one broadcast against the other, as NumPy)."""
    x = as_tensor(x)
    if axis is None:
        shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
        total = builtins_sum(int_argument("roll", "shift", s) for s in shifts)
        return reshape(roll(reshape(x, (-1,)), total, axis=0), x.shape)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(shifts) != len(axes) and 1 not in (len(shifts), len(axes)):
        raise ValueError(f"lazyrt.roll: shift {shift!r} and axis {axis!r} differ in length")
    width = max(len(shifts), len(axes))
    totals = {}
    for s, a in zip(shifts * (width // len(shifts)), axes * (width // len(axes))):
        a = normalize_axis("roll", a, x.ndim)
        totals[a] = totals.get(a, 0) + int_argument("roll", "shift", s)
    out = _copy(x)
    for a, s in sorted(totals.items()):
        n = x.shape[a]
        if n == 0 or s % n == 0:
            continue
        cut = n - s % n
        out = concat([out[_along(a, slice(cut, None), x.ndim)],
                      out[_along(a, slice(None, cut), x.ndim)]], axis=a)
    return out


builtins_sum = sum  # the builtin: this module's own sums are _sum (lazy)


def moveaxis(x, source, destination, /):
    """Axes ``source`` moved to positions ``destination`` (ints or tuples); the
    other axes keep their order."""
    x = as_tensor(x)
    src, dst = _axes("moveaxis", source, x.ndim), _axes("moveaxis", destination, x.ndim)
    if len(src) != len(dst):
        raise ValueError(f"lazyrt.moveaxis: source {source!r} and destination "
                         f"{destination!r} must have the same number of axes")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(x, tuple(order))


def permute_dims(x, /, axes):
    """Axes reordered by ``axes``, a permutation of ``(0, ..., x.ndim - 1)``."""
    x = as_tensor(x)
    axes = tuple(axes)
    if len(axes) != x.ndim:
        raise AxisError(f"lazyrt.permute_dims: axes {axes} do not permute the "
                        f"{x.ndim} axes of shape {x.shape}")
    return permute(x, axes)


def matrix_transpose(x, /):
    """The last two axes swapped (``x.mT``); ``x`` must have rank >= 2."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"lazyrt.matrix_transpose: needs a tensor of rank >= 2, "
                         f"got shape {x.shape}")
    return swapaxes(x, -1, -2)


# --- broadcasting and grids ---------------------------------------------------------

def broadcast_arrays(*arrays):
    """The arrays broadcast to their common shape (a list, each a lazy view)."""
    ts = [as_tensor(a) for a in arrays]
    try:
        shape = np.broadcast_shapes(*(t.shape for t in ts))
    except ValueError:
        raise ShapeError(f"lazyrt.broadcast_arrays: shapes {[t.shape for t in ts]} do not "
                         "broadcast together") from None
    return [broadcast_to(t, shape) for t in ts]


def meshgrid(*arrays, indexing="xy"):
    """Coordinate grids from 1-D tensors: ``indexing='xy'`` (Cartesian: the first
    two outputs' axes swapped) or ``'ij'`` (matrix). Each keeps its dtype."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"lazyrt.meshgrid: indexing must be 'xy' or 'ij', not {indexing!r}")
    ts = [as_tensor(a) for a in arrays]
    for t in ts:
        if t.ndim != 1:
            raise ShapeError(f"lazyrt.meshgrid: inputs must be 1-D, got shapes "
                             f"{[u.shape for u in ts]}")
    pos = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        pos[0], pos[1] = 1, 0
    shape = [0] * len(ts)
    for t, p in zip(ts, pos):
        shape[p] = t.shape[0]
    out = []
    for t, p in zip(ts, pos):
        single = [1] * len(ts)
        single[p] = t.shape[0]
        out.append(broadcast_to(reshape(t, tuple(single)), tuple(shape)))
    return out


# --- repetition ---------------------------------------------------------------------

def tile(x, repetitions, /):
    """``x`` repeated ``repetitions[i]`` times along each axis (NumPy's tile:
    the shorter of ``repetitions`` and the shape is padded with leading 1s)."""
    x = as_tensor(x)
    reps = tuple(int_argument("tile", "repetitions", r) for r in repetitions)
    if any(r < 0 for r in reps):
        raise ValueError(f"lazyrt.tile: repetitions must be >= 0, got {reps}")
    d = max(len(reps), x.ndim)
    reps = (1,) * (d - len(reps)) + reps
    shape = (1,) * (d - x.ndim) + x.shape
    # (n0, n1) -> (1, n0, 1, n1) -> (r0, n0, r1, n1) -> (r0*n0, r1*n1)
    split = tuple(v for n in shape for v in (1, n))
    spread = tuple(v for r, n in zip(reps, shape) for v in (r, n))
    return reshape(broadcast_to(reshape(x, split), spread),
                   tuple(r * n for r, n in zip(reps, shape)))


def repeat(x, repeats, /, *, axis=None):
    """Each element repeated along ``axis`` (of the flattened tensor when None).

    ``repeats`` is an int (lazy: a reshape, an expand and a reshape) or a 1-D
    int tensor of counts, one per element (or one for all). With a tensor the
    output shape depends on its values, so ``repeats`` is computed first: a
    barrier, counted in ``lr.metrics.materializations`` when it was pending;
    ``x`` itself stays lazy (an indexed read, ``take``).
    """
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    else:
        axis = normalize_axis("repeat", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(repeats, (R.TensorBase, np.ndarray, list, tuple)):
        counts = repeats.numpy() if isinstance(repeats, R.TensorBase) else np.asarray(repeats)
        if counts.dtype.kind not in "iu":
            raise DTypeError(f"lazyrt.repeat: repeats must have an integer dtype, "
                             f"not {counts.dtype}")
        if counts.ndim > 1 or (counts.ndim == 1 and counts.shape[0] not in (1, n)):
            raise ShapeError(f"lazyrt.repeat: repeats of shape {counts.shape} do not match "
                             f"axis {axis} of size {n}")
        if (counts < 0).any():
            raise ValueError("lazyrt.repeat: repeats must be >= 0")
        if counts.ndim == 1 and counts.shape[0] == n and n != 1:
            picks = np.repeat(np.arange(n, dtype=np.int64), counts)
            return take(x, asarray(picks), axis=axis)
        repeats = int(counts.reshape(-1)[0])
    r = int_argument("repeat", "repeats", repeats)
    if r < 0:
        raise ValueError(f"lazyrt.repeat: repeats must be >= 0, got {r}")
    head, tail = x.shape[:axis + 1], x.shape[axis + 1:]
    spread = broadcast_to(reshape(x, head + (1,) + tail), head + (r,) + tail)
    return reshape(spread, x.shape[:axis] + (n * r,) + tail)


# --- splitting and indexed reads --------------------------------------------------------

def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple of tensors of rank ``x.ndim - 1``."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise ShapeError("lazyrt.unstack: a 0-d tensor has no axis to unstack")
    axis = normalize_axis("unstack", axis, x.ndim)
    return tuple(x[_along(axis, i, x.ndim)] for i in range(x.shape[axis]))


def take(x, indices, /, *, axis=None):
    """Elements of ``x`` at ``indices`` (1-D, integer) along ``axis``, which may be
    omitted only for a 1-D ``x``. Negative indices count from the end; an index
    out of range raises IndexError when the result is computed (never an
    out-of-bounds read). Lazy: the gather of :func:`lazyrt.take_along_axis`, with
    the indices broadcast over the other axes (a kernel on C and Triton).

    >>> import lazyrt as lr
    >>> lr.take(lr.asarray([[1, 2], [3, 4]]), lr.asarray([1, -2, 1]), axis=0).tolist()
    [[3, 4], [1, 2], [3, 4]]
    """
    x, indices = as_tensor(x), as_tensor(indices)
    if indices.ndim != 1:
        raise ShapeError(f"lazyrt.take: indices must be 1-D, got shape {indices.shape}")
    if indices._node.dtype not in D.INTEGRAL or indices._node.dtype == D.BOOL:
        raise DTypeError(f"lazyrt.take: indices must have an integer dtype, not "
                         f"{indices.dtype}")
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"lazyrt.take: axis is required for a tensor of shape {x.shape} "
                             "(it may be omitted only for a 1-D tensor)")
        axis = 0
    axis = normalize_axis("take", axis, x.ndim)
    if x.shape[axis] == 0 and indices.shape[0]:
        raise IndexError(f"lazyrt.take: cannot take from axis {axis} of size 0 "
                         f"(shape {x.shape})")
    along = [1] * x.ndim
    along[axis] = indices.shape[0]
    return take_along_axis(x, reshape(indices, tuple(along)), axis=axis)


# --- contractions -----------------------------------------------------------------------

def tensordot(x1, x2, /, *, axes=2):
    """Sum of products over ``axes``: an int n (the last n axes of ``x1`` with the
    first n of ``x2``) or two sequences of axes to pair. Contracted sizes must be
    equal (or 1, broadcast). Lazy: a permute, a reshape and one matmul.
    """
    x1, x2 = as_tensor(x1), as_tensor(x2)
    if isinstance(axes, (tuple, list)):
        if len(axes) != 2:
            raise ValueError(f"lazyrt.tensordot: axes must be an int or a pair of "
                             f"sequences, not {axes!r}")
        a1 = _axes("tensordot", axes[0], x1.ndim) if _seq_len(axes[0]) else ()
        a2 = _axes("tensordot", axes[1], x2.ndim) if _seq_len(axes[1]) else ()
    else:
        n = int_argument("tensordot", "axes", axes)
        if not 0 <= n <= min(x1.ndim, x2.ndim):
            raise ValueError(f"lazyrt.tensordot: axes={n} is out of range for shapes "
                             f"{x1.shape} and {x2.shape}")
        a1, a2 = tuple(range(x1.ndim - n, x1.ndim)), tuple(range(n))
    if len(a1) != len(a2):
        raise ValueError(f"lazyrt.tensordot: axes {a1} of x1 and {a2} of x2 differ in number")
    sizes = []
    for i, j in zip(a1, a2):
        p, q = x1.shape[i], x2.shape[j]
        if p != q and 1 not in (p, q):
            raise ShapeError(f"lazyrt.tensordot: contracted axes differ in size: axis {i} of "
                             f"{x1.shape} and axis {j} of {x2.shape}")
        sizes.append(max(p, q) if 0 not in (p, q) else 0)
    free1 = tuple(i for i in range(x1.ndim) if i not in a1)
    free2 = tuple(j for j in range(x2.ndim) if j not in a2)
    s1, s2 = tuple(x1.shape[i] for i in free1), tuple(x2.shape[j] for j in free2)
    left = broadcast_to(permute(x1, free1 + a1), s1 + tuple(sizes))
    right = broadcast_to(permute(x2, a2 + free2), tuple(sizes) + s2)
    k = math.prod(sizes)
    product = reshape(left, (math.prod(s1), k)) @ reshape(right, (k, math.prod(s2)))
    return reshape(product, s1 + s2)


def _seq_len(axes):
    return len(axes) if isinstance(axes, (tuple, list)) else 1


def vecdot(x1, x2, /, *, axis=-1):
    """Dot products of vectors along ``axis`` (of the broadcast shape); the other
    axes broadcast. Both must have the same size along ``axis``. The result has the
    promoted dtype (ints wrap, as NumPy; bool is or-of-ands). Lazy: a multiply and
    a sum, one kernel."""
    x1, x2 = as_tensor(x1), as_tensor(x2)
    if x1.ndim == 0 or x2.ndim == 0:
        raise ShapeError(f"lazyrt.vecdot: inputs must have rank >= 1, got shapes "
                         f"{x1.shape} and {x2.shape}")
    try:
        shape = np.broadcast_shapes(x1.shape, x2.shape)
    except ValueError:
        raise ShapeError(f"lazyrt.vecdot: shapes {x1.shape} and {x2.shape} do not "
                         "broadcast together") from None
    axis = normalize_axis("vecdot", axis, len(shape))
    back = axis - len(shape)
    if -back > min(x1.ndim, x2.ndim) or x1.shape[back] != x2.shape[back]:
        raise ShapeError(f"lazyrt.vecdot: axis {axis} must have the same size in both "
                         f"inputs, got shapes {x1.shape} and {x2.shape}")
    code = D.promote(x1._node.dtype, x2._node.dtype)
    dt = D.DTYPES[code]
    return astype(_sum(astype(x1, dt) * astype(x2, dt), axis=axis), dt)
