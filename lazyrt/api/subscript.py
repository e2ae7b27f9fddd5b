"""Advanced subscripting: ``x[idx]``, ``x[mask]``, several arrays as an index, and
``x[mask] = value``; basic indexing (ints, slices, None, ...) is recorded in Cython
and assigned by :func:`lazyrt.api.views.setitem`.

One integer array or tensor, ``x[idx]``, is a lazy gather along axis 0 (``take``).
A boolean mask has a data-dependent count of selected elements: ``x[mask]`` is a
barrier on the mask only, then a lazy gather. A mask assignment whose value does not
depend on how many elements the mask selects (a scalar, or a tensor that broadcasts
to one selected element) stays lazy: it is ``where(mask, value, x)``.

>>> import lazyrt as lr
>>> x = lr.asarray([3.0, float("nan"), 1.0, 3.0, float("nan")])
>>> x[x > 2] = 0.0                        # lazy: a where
>>> x.is_pending
True
"""
from __future__ import annotations

import numpy as np

from .. import _recorder as R
from .. import _recorder_shapes as S
from .. import dtypes as D
from .. import runtime
from ..errors import ShapeError
from ..metrics import metrics
from .creation import as_tensor, asarray
from .manipulation import take
from .operands import computed, data_leaf
from .pointwise import astype, where
from .views import reshape, setitem as basic_setitem


def setitem(x, index, value):
    """``x[index] = value`` with value semantics (``x`` gets a new node): a boolean
    mask alone is :func:`mask_assign`'s, any other index :func:`lazyrt.api.views.setitem`'s."""
    if is_mask_index(index):
        mask_assign(x, index, value)
    else:
        basic_setitem(x, index, value)


# --- x[index] with arrays, tensors or masks ----------------------------------------------

def _advanced_getitem(x, index):
    """Indexing with arrays, masks or tensors (basic indexing never gets here).

    One integer array or tensor, ``x[idx]``, is a lazy gather along axis 0. One
    boolean mask, ``x[mask]``, has a data-dependent shape: a barrier on the mask
    only (counted as a materialization at the user's line when the mask is a
    pending tensor), then a lazy gather of the selected elements. Any other
    form is computed eagerly by NumPy: a barrier, counted as a fallback."""
    key = index if isinstance(index, tuple) else (index,)
    if len(key) == 1 and isinstance(key[0], (R.TensorBase, np.ndarray, list)):
        picked = as_tensor(key[0])
        if picked._node.dtype == D.BOOL:
            return _mask_getitem(x, picked)
        if picked._node.dtype in D.INTEGRAL and x.ndim:
            flat = take(x, reshape(picked, (-1,)), axis=0)
            return reshape(flat, picked.shape + x.shape[1:])
    metrics.count_fallback("getitem[advanced]")
    key = tuple(np.asarray(i) if isinstance(i, R.TensorBase) else i
                for i in (index if isinstance(index, tuple) else (index,)))
    return asarray(x.numpy()[key])


def _mask_getitem(x, mask):
    """``x[mask]``: the elements (or sub-arrays) where ``mask`` is True, in order."""
    if mask.shape != x.shape[:mask.ndim]:
        raise IndexError(f"lazyrt.getitem: a boolean mask of shape {mask.shape} does not "
                         f"match the leading axes of a tensor of shape {x.shape}")
    selected = np.flatnonzero(computed(mask) if mask.is_pending else mask.numpy())
    rows = reshape(x, (int(np.prod(mask.shape, dtype=np.int64)),) + x.shape[mask.ndim:])
    return take(rows, asarray(selected.astype(np.int64)), axis=0)


# the Cython getitem hands every index it cannot parse as basic to this module
S.set_advanced_getitem(_advanced_getitem)


# --- x[mask] = value --------------------------------------------------------------------

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
        v = reshape(astype(value, x.dtype), (1,) * (x.ndim - len(vshape)) + tuple(vshape))
        m = reshape(mask, mask.shape + (1,) * len(rest))
        x._node = where(m, v, x)._node
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
    x._node = data_leaf(out)._node
