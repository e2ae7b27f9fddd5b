"""Creating tensors: from data (a parameter leaf) or from a fill value.

``tensor`` copies its input (later writes to the source do not leak in);
``asarray`` shares memory only where nobody can write to it, or where asked
to with ``copy=False``: a pending result always equals what eager evaluation
at the time of the op would give. Either way the tensor's value is read-only
from then on: lazyrt has value semantics.

Default dtypes are NumPy's, which are the array API's defaults: float64 for
``zeros``/``ones``/``empty``/``eye``/``linspace``, and for ``full``/``arange``
the fill or start value's kind (int64 for ``full(s, 1)`` and ``arange(5)``,
bool for ``full(s, True)``). Every function takes ``device=`` (only ``"cpu"``,
see :mod:`lazyrt.api.device`); signatures are the array API's, with ``dtype``
also accepted by position (``lr.zeros(3, "int8")``).
``full``/``zeros``/``ones`` are lazy: a 0-d scalar expanded to the shape,
fused into whatever consumes it, never allocated on their own. The fill value
of ``full`` is a runtime parameter (a new value does not recompile).
"""
from __future__ import annotations

import numpy as np

from .. import _recorder as R
from .. import dtypes as D
from .. import ops
from ..backends.base import frozen
from . import dlpack
from .device import check_device
from .operands import data_leaf, normalize_shape


def _from_torch(obj):
    if obj.requires_grad:
        obj = obj.detach()
    if "bfloat16" in str(obj.dtype):  # torch's .numpy() has no bfloat16: a copy, by DLPack
        return dlpack.read_bfloat16(obj.cpu())
    return obj.cpu().numpy()


def _too_large_int(obj):
    """The first Python int in ``obj`` (nested lists) that no lazyrt dtype holds."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool) and \
                not -2**63 <= item < 2**63:
            return item
    return None


def asarray(obj, /, dtype=None, copy=None, *, device=None):
    """A tensor of ``obj`` (NumPy array, nested list, scalar, CPU torch tensor, tensor).

    ``copy=None`` (the default) shares memory only where nobody can write to it
    (a read-only array, such as a value lazyrt computed); otherwise it copies, so
    the tensor holds the data as it was at this call, as eager code would see it.
    ``copy=True`` always copies. ``copy=False`` never copies (and raises where a
    copy is needed): do not write to the source array until the tensors that
    use it are synced — lazyrt reads it at the barrier, not at this call.

    >>> import lazyrt as lr
    >>> lr.asarray([1, 2, 3]).dtype
    dtype('int64')
    """
    check_device(device, "asarray")
    if isinstance(obj, R.TensorBase):
        if dtype is not None and D.code_of(dtype) != obj._node.dtype:
            if copy is False:
                raise ValueError(f"lazyrt.asarray: copy=False, but converting {obj.dtype} "
                                 f"to {np.dtype(dtype)} needs a copy")
            return obj.astype(dtype)
        # a copy of a tensor is a new tensor over the same (immutable) node
        return R.wrap(obj._node) if copy else obj
    if type(obj).__module__.startswith("torch") and hasattr(obj, "detach"):
        obj = _from_torch(obj)  # shares the torch tensor's memory: the rules below apply
    code = None if dtype is None else D.code_of(dtype)
    if code is None and isinstance(obj, (bool, int, float)):
        code = D.default_dtype_of_scalar(obj)
    want = None if code is None else D.DTYPES[code]
    try:
        if copy is False:
            arr = np.asarray(obj, dtype=want, copy=False)
        else:
            arr = np.asarray(obj, dtype=want)
            # an ndarray (or anything with __array__) may come back sharing its memory
            if arr is obj or not arr.flags.owndata or arr.base is not None:
                if copy or not frozen(arr):
                    arr = arr.copy()
    except OverflowError as exc:
        raise OverflowError(f"lazyrt.asarray: {exc} (converting to {want})") from None
    except ValueError as exc:
        if copy is False:
            raise ValueError(f"lazyrt.asarray: copy=False, but {exc}") from None
        raise ValueError(f"lazyrt.asarray: cannot make a tensor from this "
                         f"{type(obj).__name__}: {exc}") from None
    if arr.dtype == object:
        big = _too_large_int(obj)
        if big is not None:
            raise OverflowError(f"lazyrt.asarray: Python integer {big} does not fit any "
                                "lazyrt integer dtype (int64 at most)")
        raise TypeError(f"lazyrt.asarray: cannot make a tensor from {type(obj).__name__} "
                        "(ragged or non-numeric data)")
    return data_leaf(arr, private=arr is not obj and arr.flags.owndata)


def as_tensor(x):
    """``x`` itself if it is a tensor, else :func:`asarray` of it: how every API
    function takes its tensor operands (a list, a scalar, a NumPy array)."""
    return x if isinstance(x, R.TensorBase) else asarray(x)


def tensor(obj, dtype=None, *, device=None):
    """A tensor holding a copy of ``obj``: later writes to ``obj`` do not reach it."""
    return asarray(obj, dtype=dtype, copy=True, device=device)


def from_dlpack(x, /, *, device=None, copy=None):
    """A tensor of ``x``, any object with ``__dlpack__`` (a NumPy array, a torch tensor).

    The data is read now, through NumPy's ``np.from_dlpack``; ``copy`` follows
    :func:`asarray`'s rules: ``None`` shares the producer's memory only where nobody
    can write it, ``False`` always shares it (do not write to it until the tensors
    using it are synced), ``True`` always copies. A lazyrt tensor gives a new tensor
    over the same value, computed or not (lazyrt has value semantics).

    >>> import numpy as np, lazyrt as lr
    >>> lr.from_dlpack(np.arange(3.0)).dtype
    dtype('float64')
    """
    check_device(device, "from_dlpack")
    if isinstance(x, R.TensorBase):
        return R.wrap(x._node)
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"lazyrt.from_dlpack: {type(x).__name__} does not support DLPack "
                        "(it has no __dlpack__); use lr.asarray")
    if dlpack.is_bfloat16_on_cpu(x):  # NumPy's DLPack has no bfloat16: read, copied
        if copy is False:
            raise BufferError("lazyrt.from_dlpack: bfloat16 data cannot be shared without a "
                              "copy (NumPy's DLPack does not carry bfloat16); use copy=None")
        return asarray(dlpack.read_bfloat16(x), copy=False)
    try:
        # device="cpu": a producer on another device copies to the host where it can
        # (unless copy=False, where it must refuse)
        arr = np.from_dlpack(x, device="cpu", copy=copy)
    except (BufferError, ValueError, TypeError, RuntimeError) as exc:
        raise type(exc)(f"lazyrt.from_dlpack: cannot read this {type(x).__name__} on the CPU "
                        f"(copy={copy}): {exc}") from exc
    return asarray(arr, copy=False if copy is False else None)


def full(shape, fill_value, dtype=None, *, device=None):
    """A lazy tensor of ``shape`` filled with ``fill_value`` (a runtime scalar).

    ``dtype=None`` is the fill value's kind: bool, int64 or float64."""
    check_device(device, "full")
    shape = normalize_shape(shape, "full")
    if isinstance(fill_value, R.TensorBase):
        raise TypeError("lazyrt.full: fill_value must be a Python scalar")
    code = D.default_dtype_of_scalar(fill_value) if dtype is None else D.code_of(dtype)
    value = D.DTYPES[code].type(fill_value).item()
    scalar = R.scalar_node(value, code, False)
    return R.wrap(R.record(ops.EXPAND.id, code, shape, (_reshape_scalar(scalar, len(shape)),),
                           (shape,)))


def _reshape_scalar(node, ndim):
    if ndim == 0:
        return node
    return R.record(ops.RESHAPE.id, node.dtype, (1,) * ndim, (node,), ((1,) * ndim,))


def zeros(shape, dtype=None, *, device=None):
    """Zeros of ``shape``; ``dtype=None`` is the default float (float64)."""
    check_device(device, "zeros")
    return full(shape, 0, _float_default(dtype))


def ones(shape, dtype=None, *, device=None):
    """Ones of ``shape``; ``dtype=None`` is the default float (float64)."""
    check_device(device, "ones")
    return full(shape, 1, _float_default(dtype))


def empty(shape, dtype=None, *, device=None):
    """Like ``zeros``: lazyrt never hands out uninitialized memory."""
    check_device(device, "empty")
    return zeros(shape, dtype)


def _like(x, fn):
    if not isinstance(x, R.TensorBase):
        raise TypeError(f"lazyrt.{fn}: expected a lazyrt tensor, not {type(x).__name__}")
    return x


def zeros_like(x, /, dtype=None, *, device=None):
    """Zeros of ``x``'s shape, and of its dtype unless ``dtype`` is given."""
    check_device(device, "zeros_like")
    return zeros(x.shape, _like(x, "zeros_like").dtype if dtype is None else dtype)


def ones_like(x, /, dtype=None, *, device=None):
    """Ones of ``x``'s shape, and of its dtype unless ``dtype`` is given."""
    check_device(device, "ones_like")
    return ones(x.shape, _like(x, "ones_like").dtype if dtype is None else dtype)


def empty_like(x, /, dtype=None, *, device=None):
    """Like ``zeros_like``: lazyrt never hands out uninitialized memory."""
    check_device(device, "empty_like")
    return zeros_like(x, dtype)


def full_like(x, /, fill_value, dtype=None, *, device=None):
    """``fill_value`` in ``x``'s shape, and of its dtype unless ``dtype`` is given."""
    check_device(device, "full_like")
    return full(x.shape, fill_value, _like(x, "full_like").dtype if dtype is None else dtype)


def arange(start, /, stop=None, step=1, dtype=None, *, device=None):
    """As ``np.arange``; its values are data (a parameter), computed eagerly.

    ``dtype=None``: int64 for ints, float64 if any of start, stop, step is a float."""
    check_device(device, "arange")
    if stop is None:
        start, stop = 0, start
    # dtype goes to NumPy itself: arange(0.5, 3, 0.5, dtype=int32) is not a cast of the
    # float result (NumPy steps by the cast difference of the first two values)
    return data_leaf(np.arange(start, stop, step,
                               dtype=None if dtype is None else D.DTYPES[D.code_of(dtype)]))


def _float_default(dtype):
    return D.DTYPES[D.FLOAT64 if dtype is None else D.code_of(dtype)]


def linspace(start, stop, /, num=50, endpoint=True, dtype=None, *, device=None):
    """As ``np.linspace``; ``dtype=None`` is the default float (float64)."""
    check_device(device, "linspace")
    return data_leaf(np.linspace(start, stop, num, endpoint=endpoint,
                                 dtype=_float_default(dtype)))


def eye(n, m=None, /, k=0, dtype=None, *, device=None):
    """As ``np.eye`` (the array API's ``n_rows, n_cols``); ``dtype=None`` is the
    default float (float64)."""
    check_device(device, "eye")
    return data_leaf(np.eye(n, m, k, dtype=_float_default(dtype)))
