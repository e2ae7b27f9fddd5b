"""Boolean masks and functions whose output shape depends on the data:
``x[mask] = value``, ``nonzero``, ``unique_all``, ``unique_counts``,
``unique_inverse``, ``unique_values``.

A recorded node has a fixed shape, so a result whose shape depends on
values cannot be recorded: these functions are *barriers*. They compute
their input (one materialization each, counted in ``lr.metrics`` with the
user's source line, as ``.item()`` is) and return data tensors. A mask
assignment whose value does not depend on how many elements the mask selects
(a scalar, or a tensor that broadcasts to one selected element) stays lazy:
it is ``where(mask, value, x)``.

>>> import lazyrt as lr
>>> x = lr.asarray([3.0, float("nan"), 1.0, 3.0, float("nan")])
>>> lr.unique_counts(x).counts.tolist()   # each NaN is its own value
[1, 2, 1, 1]
>>> x[x > 2] = 0.0                        # lazy: a where
>>> x.is_pending
True
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import _recorder as R
from .. import dtypes as D
from .. import runtime
from ..errors import ShapeError
from ..metrics import metrics
from .creation import _leaf, asarray

UniqueAllResult = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices",
                                                 "counts"])
UniqueCountsResult = namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def _tensor(x, fn):
    if isinstance(x, R.TensorBase):
        return x
    if isinstance(x, np.ndarray):
        return asarray(x)
    raise TypeError(f"lazyrt.{fn}: expected a tensor, not {type(x).__name__}")


def _computed(x) -> np.ndarray:
    """``x``'s value, counted as one materialization at the user's line."""
    metrics.count_materialization()
    if x.is_pending:
        runtime.sync(x)
    return x.numpy()


# --- nonzero and unique -------------------------------------------------------------

def nonzero(x, /):
    """The indices of the nonzero (True) elements of ``x``: one int64 tensor per axis.

    A barrier: the number of nonzero elements depends on the data, so ``x`` is
    computed here. A 0-d ``x`` is refused, as the array API says.

    >>> import lazyrt as lr
    >>> [i.tolist() for i in lr.nonzero(lr.asarray([[0, 1], [2, 0]]))]
    [[0, 1], [1, 0]]
    """
    x = _tensor(x, "nonzero")
    if x.ndim == 0:
        raise ShapeError("lazyrt.nonzero: a 0-d tensor has no axes to index; "
                         "reshape it to (1,) first")
    return tuple(_leaf(i.astype(np.int64)) for i in np.nonzero(_computed(x)))


def _unique(x, fn):
    x = _tensor(x, fn)
    a = _computed(x)
    # equal_nan=False: every NaN is a distinct value, as the array API says
    values, index, inverse, counts = np.unique(a.reshape(-1), return_index=True,
                                               return_inverse=True, return_counts=True,
                                               equal_nan=False)
    return (_leaf(values), _leaf(index.astype(np.int64)),
            _leaf(inverse.astype(np.int64).reshape(a.shape)), _leaf(counts.astype(np.int64)))


def unique_all(x, /):
    """The unique values of ``x`` (flattened, sorted), the index of each one's first
    occurrence, the index into ``values`` of each element of ``x`` (shape of ``x``),
    and each value's count. NaNs are never equal: each is its own value; -0.0 and
    0.0 are one value. A barrier (the number of values depends on the data)."""
    return UniqueAllResult(*_unique(x, "unique_all"))


def unique_counts(x, /):
    """``(values, counts)`` of :func:`unique_all`. A barrier."""
    values, _, _, counts = _unique(x, "unique_counts")
    return UniqueCountsResult(values, counts)


def unique_inverse(x, /):
    """``(values, inverse_indices)`` of :func:`unique_all`; ``values[inverse_indices]``
    equals ``x``. A barrier."""
    values, _, inverse, _ = _unique(x, "unique_inverse")
    return UniqueInverseResult(values, inverse)


def unique_values(x, /):
    """The unique values of ``x``, flattened and sorted (each NaN its own value).
    A barrier."""
    return _unique(x, "unique_values")[0]


# --- boolean-mask assignment ----------------------------------------------------------

def is_mask_index(index) -> bool:
    """Whether ``x[index]`` is a boolean-mask index (a bool tensor or array, alone)."""
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    if isinstance(index, R.TensorBase):
        return index._node.dtype == D.BOOL
    if isinstance(index, list) and index and all(type(i) is bool for i in index):
        return True  # NumPy reads a list of Python bools as a 1-D mask
    return isinstance(index, np.ndarray) and index.dtype == np.bool_


def mask_assign(x, index, value):
    """``x[mask] = value`` with value semantics (``x`` gets a new node).

    ``mask`` covers ``x``'s leading axes (its shape equals theirs). When ``value``
    broadcasts to one selected element (a scalar, a 0-d tensor, or a tensor of the
    shape of ``x``'s trailing axes), this records ``where(mask, value, x)``: lazy, no
    barrier. A ``value`` with one row per selected element needs the count of True
    in ``mask``: then ``mask``, ``value`` and ``x`` are computed (a barrier).
    """
    from . import pointwise, views  # here: both import the module that imports this one

    mask = index[0] if isinstance(index, tuple) else index
    mask = mask if isinstance(mask, R.TensorBase) else asarray(np.asarray(mask, dtype=bool))
    if mask.shape != x.shape[:mask.ndim]:
        raise IndexError(f"lazyrt.setitem: boolean mask of shape {mask.shape} does not match "
                         f"the leading axes of a tensor of shape {x.shape}")
    if type(value) is int and x._node.dtype in D.INTEGRAL:
        info = np.iinfo(x.dtype)  # NumPy refuses, rather than wraps, such a Python int
        if not info.min <= value <= info.max:
            raise OverflowError(f"lazyrt.setitem: Python integer {value} is out of bounds "
                                f"for {x.dtype} (shape {x.shape})")
    value = value if isinstance(value, R.TensorBase) else asarray(value)
    rest = x.shape[mask.ndim:]
    vshape = value.shape
    if len(vshape) == len(rest) + 1 and vshape[0] == 1:
        vshape = vshape[1:]
    if len(vshape) <= len(rest):
        try:
            np.broadcast_shapes(vshape, rest)
        except ValueError:
            raise ShapeError(f"lazyrt.setitem: value of shape {value.shape} does not "
                             f"broadcast to the selected elements, each of shape {rest} "
                             f"(tensor {x.shape}, mask {mask.shape})") from None
        # one selected element's value, the same for every True: a lazy where
        v = views.reshape(pointwise.astype(value, x.dtype),
                          (1,) * (x.ndim - len(vshape)) + tuple(vshape))
        m = views.reshape(mask, mask.shape + (1,) * len(rest))
        x._node = pointwise.where(m, v, x)._node
        return
    _mask_assign_rows(x, mask, value)


def _mask_assign_rows(x, mask, value):
    """``x[mask] = value`` where ``value`` has one row per True: a barrier."""
    pending = [t for t in (x, mask, value) if t.is_pending]
    metrics.count_materialization()  # one barrier: the three compute in one graph
    if pending:
        runtime.sync(*pending)
    m = mask.numpy()
    selected = (int(np.count_nonzero(m)),) + x.shape[mask.ndim:]
    try:
        np.broadcast_shapes(value.shape, selected)
    except ValueError:
        raise ShapeError(f"lazyrt.setitem: value of shape {value.shape} does not broadcast "
                         f"to the {selected[0]} selected elements, shape {selected} (tensor "
                         f"{x.shape}, mask {mask.shape})") from None
    out = np.array(x.numpy())
    out[m] = value.numpy().astype(x.dtype, copy=False)
    x._node = _leaf(out)._node
