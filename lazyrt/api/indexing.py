"""Indexed reads and accumulating writes along one axis: ``take_along_axis``,
``scatter_add`` and ``index_add``.

Each records one op of the op table (``gather``, ``scatter_add``), lazily; the C
and Triton backends run it as its own kernel. Indices are int32 or int64 (other
integer dtypes are widened to int64). With ``negative_indices=True`` (NumPy's
rule, the default) an index in ``[-n, 0)`` counts from the end; with ``False``
it is an error, as in torch's ``gather`` and ``embedding``. An index out of
range raises IndexError when the result is computed, on every backend; no
kernel ever reads or writes outside its buffers.

>>> import lazyrt as lr
>>> x = lr.asarray([[10, 11], [20, 21], [30, 31]])
>>> lr.take_along_axis(x, lr.asarray([[2], [0]]), axis=0).tolist()   # rows 2 and 0
[[30, 31], [10, 11]]
>>> lr.index_add(lr.zeros((3, 2)), lr.asarray([1, 1, 0]), lr.ones((3, 2)), axis=0).tolist()
[[1.0, 1.0], [2.0, 2.0], [0.0, 0.0]]
"""
from __future__ import annotations

import numpy as np

from .. import _recorder as R
from .. import dtypes as D
from .. import ops
from ..errors import DTypeError, ShapeError
from .creation import as_tensor
from .operands import normalize_axis
from .pointwise import astype
from .views import broadcast_to, reshape

__all__ = ["index_add", "scatter_add", "take_along_axis"]


def _indices(name, indices):
    """``indices`` as a tensor of int32 or int64 (narrower ints widened)."""
    indices = as_tensor(indices)
    code = indices._node.dtype
    if code not in D.INTEGRAL or code == D.BOOL:
        raise DTypeError(f"lazyrt.{name}: indices must have an integer dtype, not "
                         f"{indices.dtype}")
    return indices if code in (D.INT32, D.INT64) else astype(indices, "int64")


def _off_axis(name, axis, *shapes):
    """The broadcast of ``shapes`` on every axis but ``axis`` (sizes 1 stretch)."""
    out = []
    for k in range(len(shapes[0])):
        if k == axis:
            out.append(None)
            continue
        sizes = {s[k] for s in shapes} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"lazyrt.{name}: shapes {', '.join(map(str, shapes))} do not "
                             f"broadcast on axis {k} (axis {axis} excepted)")
        out.append(sizes.pop() if sizes else 1)
    return out


def take_along_axis(x, indices, /, *, axis=-1, negative_indices=True):
    """``out[..., j, ...] = x[..., indices[..., j, ...], ...]`` along ``axis``
    (``np.take_along_axis``). ``x`` and ``indices`` have the same rank and
    broadcast on the other axes: ``indices`` of shape (n, 1) picks whole rows of
    a matrix (``index_select``, an embedding lookup ``weight[idx]``). The result
    has ``x``'s dtype and the broadcast shape with ``indices``' size on ``axis``.

    >>> import lazyrt as lr
    >>> w = lr.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> lr.take_along_axis(w, lr.asarray([[1], [1], [0]]), axis=0).tolist()
    [[3.0, 4.0], [3.0, 4.0], [1.0, 2.0]]
    """
    x, indices = as_tensor(x), _indices("take_along_axis", indices)
    if x.ndim == 0:
        raise ShapeError("lazyrt.take_along_axis: x must have at least one axis, got a 0-d "
                         "tensor")
    if indices.ndim != x.ndim:
        raise ShapeError(f"lazyrt.take_along_axis: indices must have x's rank {x.ndim}, got "
                         f"shape {indices.shape} for x of shape {x.shape}")
    axis = normalize_axis("take_along_axis", axis, x.ndim)
    common = _off_axis("take_along_axis", axis, x.shape, indices.shape)
    n, m = x.shape[axis], indices.shape[axis]
    shape = tuple(m if k == axis else d for k, d in enumerate(common))
    if n == 0 and 0 not in shape:
        raise IndexError(f"lazyrt.take_along_axis: cannot take from axis {axis} of size 0 "
                         f"(shape {x.shape})")
    src = broadcast_to(x, tuple(n if k == axis else d for k, d in enumerate(common)))
    indices = broadcast_to(indices, shape)
    return R.wrap(R.record(ops.GATHER.id, x._node.dtype, shape, (src._node, indices._node),
                           (axis, bool(negative_indices))))


def scatter_add(x, indices, values, /, *, axis=0, negative_indices=True):
    """``x`` plus ``values`` added at ``indices`` along ``axis``: for every
    position p of the broadcast shape of ``indices`` and ``values``,
    ``out[p with p[axis] = indices[p]] += values[p]`` (torch's ``scatter_add``,
    NumPy's ``np.add.at``). Repeated indices accumulate, in order of p (floats
    on the C backend sum exactly as ``np.add.at``; float16 sums in float32).
    ``values`` is cast to ``x``'s dtype; its other axes must broadcast to ``x``'s.

    >>> import lazyrt as lr
    >>> lr.scatter_add(lr.zeros(3), lr.asarray([0, 2, 0]), lr.asarray([1.0, 2.0, 4.0])).tolist()
    [5.0, 0.0, 2.0]
    """
    x, indices, values = as_tensor(x), _indices("scatter_add", indices), as_tensor(values)
    if x.ndim == 0:
        raise ShapeError("lazyrt.scatter_add: x must have at least one axis, got a 0-d tensor")
    if not indices.ndim == values.ndim == x.ndim:
        raise ShapeError(f"lazyrt.scatter_add: x, indices and values must have the same rank; "
                         f"got shapes {x.shape}, {indices.shape} and {values.shape}")
    axis = normalize_axis("scatter_add", axis, x.ndim)
    try:
        shape = np.broadcast_shapes(indices.shape, values.shape)
    except ValueError:
        raise ShapeError(f"lazyrt.scatter_add: indices of shape {indices.shape} and values of "
                         f"shape {values.shape} do not broadcast together") from None
    common = _off_axis("scatter_add", axis, x.shape, shape)
    shape = tuple(shape[axis] if k == axis else d for k, d in enumerate(common))
    if common != [None if k == axis else d for k, d in enumerate(x.shape)]:
        raise ShapeError(f"lazyrt.scatter_add: values of shape {values.shape} and indices of "
                         f"shape {indices.shape} do not fit x of shape {x.shape} off axis {axis}")
    size = x.shape[axis]
    if size == 0 and 0 not in shape:
        raise IndexError(f"lazyrt.scatter_add: cannot add into axis {axis} of size 0 "
                         f"(shape {x.shape})")
    values = broadcast_to(astype(values, x.dtype), shape)
    indices = broadcast_to(indices, shape)
    added = R.wrap(R.record(ops.SCATTER_ADD.id, x._node.dtype, x.shape,
                            (values._node, indices._node),
                            (axis, size, bool(negative_indices))))
    return x + added  # bool + bool is or


def index_add(x, indices, values, /, *, axis=0, negative_indices=True):
    """``x`` with ``values`` added at the 1-D ``indices`` along ``axis`` (torch's
    ``index_add``, ``index_put(accumulate=True)`` with one index, and an
    embedding's backward): ``out[..., indices[i], ...] += values[..., i, ...]``.
    ``values`` has ``x``'s shape with ``len(indices)`` on ``axis``.

    >>> import lazyrt as lr
    >>> lr.index_add(lr.zeros(4, dtype=lr.int64), lr.asarray([3, 3]), lr.asarray([1, 2])).tolist()
    [0, 0, 0, 3]
    """
    x, indices, values = as_tensor(x), _indices("index_add", indices), as_tensor(values)
    if indices.ndim != 1:
        raise ShapeError(f"lazyrt.index_add: indices must be 1-D, got shape {indices.shape}")
    if x.ndim == 0:
        raise ShapeError("lazyrt.index_add: x must have at least one axis, got a 0-d tensor")
    axis = normalize_axis("index_add", axis, x.ndim)
    want = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
    if values.ndim != x.ndim or any(v not in (w, 1) for v, w in zip(values.shape, want)):
        raise ShapeError(f"lazyrt.index_add: values of shape {values.shape} do not match "
                         f"{want} (x of shape {x.shape} with {indices.shape[0]} indices on "
                         f"axis {axis})")
    spread = reshape(indices, tuple(-1 if k == axis else 1 for k in range(x.ndim)))
    return scatter_add(x, spread, broadcast_to(values, want), axis=axis,
                       negative_indices=negative_indices)
