"""Functions whose output shape depends on the data: ``nonzero``, ``unique_all``,
``unique_counts``, ``unique_inverse``, ``unique_values``. (Boolean masks as an
index, ``x[mask]`` and ``x[mask] = value``, are :mod:`lazyrt.api.subscript`'s.)

A recorded node has a fixed shape, so a result whose shape depends on
values cannot be recorded: these functions are *barriers*. They compute
their input (one materialization each, counted in ``lr.metrics`` with the
user's source line, as ``.item()`` is) and return data tensors.

>>> import lazyrt as lr
>>> x = lr.asarray([3.0, float("nan"), 1.0, 3.0, float("nan")])
>>> lr.unique_counts(x).counts.tolist()   # each NaN is its own value
[1, 2, 1, 1]
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import _recorder as R
from ..errors import ShapeError
from .creation import asarray
from .operands import computed, data_leaf

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
    return tuple(data_leaf(i.astype(np.int64)) for i in np.nonzero(computed(x)))


def _unique(x, fn):
    x = _tensor(x, fn)
    a = computed(x)
    # equal_nan=False: every NaN is a distinct value, as the array API says
    values, index, inverse, counts = np.unique(a.reshape(-1), return_index=True,
                                               return_inverse=True, return_counts=True,
                                               equal_nan=False)
    return (data_leaf(values), data_leaf(index.astype(np.int64)),
            data_leaf(inverse.astype(np.int64).reshape(a.shape)),
            data_leaf(counts.astype(np.int64)))


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
