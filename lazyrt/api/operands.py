"""What the API functions do with their operands, shared by every module of
``lazyrt/api/``: check and normalize an axis, an int, a shape, a probability,
a floating dtype; wrap a NumPy array as a data leaf; compute a tensor's value
at a barrier.

The bottom of ``lazyrt/api/``: it imports no other module of it, so each
module imports these by their public names and none reaches into another's
private ones. (Making a tensor of any other operand is ``creation.as_tensor``:
it needs ``asarray``.)
"""
from __future__ import annotations

import operator

import numpy as np

from .. import _recorder as R
from .. import dtypes as D
from .. import runtime
from ..errors import AxisError, DTypeError, ShapeError
from ..metrics import metrics


def normalize_axis(name, axis, ndim) -> int:
    """``axis`` as an index in ``range(ndim)`` (negative counts from the end);
    ``name`` is the lazyrt function the error messages name."""
    try:
        axis = operator.index(axis)
    except TypeError as exc:
        raise TypeError(f"lazyrt.{name}: axis must be an int, not {axis!r}") from exc
    if not -ndim <= axis < ndim:
        raise AxisError(f"lazyrt.{name}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def int_argument(name, what, value) -> int:
    """``value`` (the argument ``what`` of ``lazyrt.name``) as a Python int; a bool
    is refused, as the array API's integer arguments refuse it."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"lazyrt.{name}: {what} must be an int, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"lazyrt.{name}: {what} must be an int, not {value!r}") from None


def normalize_shape(shape, op="zeros") -> tuple:
    """``shape`` (an int or a sequence of ints, none negative) as a tuple of ints."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(int(d) for d in shape)
    except TypeError as exc:
        raise TypeError(f"lazyrt.{op}: shape must be an int or a tuple of ints, "
                        f"not {shape!r}") from exc
    if any(d < 0 for d in shape):
        raise ShapeError(f"lazyrt.{op}: negative dimension in shape {shape}")
    return shape


def require_float(name, x) -> None:
    """Refuse a tensor ``x`` of a non-floating dtype, naming ``lazyrt.name``."""
    if x._node.dtype not in D.FLOATING:
        raise DTypeError(f"lazyrt.{name}: needs a floating tensor, got {x.dtype} "
                         f"(shape {x.shape}); cast it with .astype('float32')")


def check_probability(p, fn) -> None:
    """Refuse a ``p`` that is not a Python or NumPy number in [0, 1] (a tensor ``p``
    would be a barrier), naming ``lazyrt.fn``."""
    if isinstance(p, R.TensorBase) or not isinstance(p, (int, float, np.integer, np.floating)) \
            or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"lazyrt.{fn}: p must be a probability in [0, 1], not {p!r}")


def data_leaf(array: np.ndarray, private: bool = True):
    """A data leaf over ``array``, which nobody may write to from now on.

    A ``private`` array (made for this tensor, nobody else holds it) is frozen
    itself, so that it reads as immutable to the owner (see :func:`lazyrt.backends.base.frozen`); a
    shared one gets a read-only view, and its owner may still write to it."""
    code = D.code_of(array.dtype)
    if array.dtype != D.DTYPES[code]:
        array = array.astype(D.DTYPES[code])
        private = True
    if array.flags.writeable:
        if not (private and array.flags.owndata):
            array = array.view()
        array.flags.writeable = False
    return R.wrap(R.data_node(array, code))


def computed(x) -> np.ndarray:
    """``x``'s value, counted as one materialization at the user's line."""
    metrics.count_materialization()
    if x.is_pending:
        runtime.sync(x)
    return x.numpy()
