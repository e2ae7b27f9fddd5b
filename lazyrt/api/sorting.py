"""Sorting and searching: ``sort``, ``argsort`` and ``searchsorted``.

Their output shapes do not depend on the data, so they record lazily like any
op; each is one OPAQUE op of the table (``lazyrt/ops.py``) that every backend
runs on the host from its NumPy reference (the JAX backend with ``jnp.sort``
and friends, inside its one XLA function).

Semantics, on every backend: sorts are stable (``stable=False`` is allowed to
be, and is, stable too); NaN sorts as the largest value, last in an ascending
sort and first in a descending one; a descending stable sort keeps equal
elements in their original order (it is not the ascending result reversed).

>>> import lazyrt as lr
>>> lr.argsort(lr.asarray([3.0, 1.0, 3.0, 2.0]), descending=True).tolist()
[0, 2, 3, 1]
"""
from __future__ import annotations

from .. import _recorder as R
from .. import dtypes as D
from .. import ops
from ..errors import ShapeError
from .creation import as_tensor
from .manipulation import take
from .operands import normalize_axis
from .pointwise import astype


def _check_flags(name, descending, stable):
    for flag, value in (("descending", descending), ("stable", stable)):
        if not isinstance(value, bool):
            raise TypeError(f"lazyrt.{name}: {flag} must be True or False, not {value!r}")


def _sorted(name, op, x, axis, descending, stable, dtype):
    x = as_tensor(x)
    _check_flags(name, descending, stable)
    if x.ndim == 0:
        raise ShapeError(f"lazyrt.{name}: a 0-d tensor has no axis to sort along "
                         f"(axis={axis}); reshape it to (1,) first")
    axis = normalize_axis(name, axis, x.ndim)
    return R.wrap(R.record(op.id, dtype(x), x.shape, (x._node,), (axis, descending)))


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """``x`` sorted along ``axis`` (stable; NaN last, or first when descending).

    >>> import lazyrt as lr
    >>> lr.sort(lr.asarray([2.0, float("nan"), 1.0])).tolist()
    [1.0, 2.0, nan]
    """
    return _sorted("sort", ops.SORT, x, axis, descending, stable, lambda t: t._node.dtype)


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """int64 indices that sort ``x`` along ``axis``, as :func:`sort` orders it."""
    return _sorted("argsort", ops.ARGSORT, x, axis, descending, stable, lambda t: D.INT64)


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """int64 indices where ``x2``'s values would be inserted into the 1-D ``x1``
    to keep it sorted (``side='left'``: before equal values, ``'right'``: after).

    ``x1`` must be sorted ascending (NaN last), unless ``sorter`` (1-D int
    indices, as :func:`argsort` gives) sorts it. Both are compared in their
    promoted dtype.

    >>> import lazyrt as lr
    >>> lr.searchsorted(lr.asarray([1, 2, 2, 5]), lr.asarray([2, 6]), side="right").tolist()
    [3, 4]
    """
    x1, x2 = as_tensor(x1), as_tensor(x2)
    if side not in ("left", "right"):
        raise ValueError(f"lazyrt.searchsorted: side must be 'left' or 'right', not {side!r}")
    if x1.ndim != 1:
        raise ShapeError(f"lazyrt.searchsorted: x1 must be 1-D, got shape {x1.shape}")
    if sorter is not None:
        sorter = as_tensor(sorter)
        if sorter.shape != x1.shape:
            raise ShapeError(f"lazyrt.searchsorted: sorter must have x1's shape {x1.shape}, "
                             f"got {sorter.shape}")
        x1 = take(x1, sorter, axis=0)
    code = D.promote(x1._node.dtype, x2._node.dtype)
    x1, x2 = astype(x1, D.DTYPES[code]), astype(x2, D.DTYPES[code])
    return R.wrap(R.record(ops.SEARCHSORTED.id, D.INT64, x2.shape, (x1._node, x2._node),
                           (side,)))
