"""``lazyrt.Tensor``: the recorded operators come from the Cython bases; the
methods here are thin forwards to the function modules, so each op is
defined in one place.
"""
from __future__ import annotations

import numpy as np

from .. import _recorder as R
from .. import _recorder_pointwise as PW
from .. import _recorder_shapes as S
from .. import runtime
from . import pointwise, reductions, views
from . import creation
from . import namespace, subscript
from .manipulation import matrix_transpose
from .device import CPU, check_device
from .. import dtypes as D


class Tensor(PW.PointwiseTensor):
    """A lazy tensor. Operations record; barriers (``numpy()``, ``item()``,
    ``print``, ``bool()``, ``lr.sync()``) compute.

    >>> import lazyrt as lr
    >>> x = lr.tensor([1.0, -2.0, 3.0], dtype="float32")
    >>> y = lr.nn.relu(x * 2 + 1)
    >>> y.numpy()
    array([3., 0., 7.], dtype=float32)
    """

    __slots__ = ()
    # NumPy must hand `ndarray OP tensor` back to us instead of converting
    __array_ufunc__ = None

    # reductions, reshape, indexing and matmul record in Cython (lazyrt/_recorder_shapes.pyx)
    sum, prod, mean = S.sum, S.prod, reductions.mean
    max, min, argmax, argmin, any, all = S.max, S.min, S.argmax, S.argmin, S.any, S.all
    reshape = S.reshape
    __getitem__ = S.getitem
    __matmul__, __rmatmul__ = S.matmul, S.rmatmul

    def var(self, axis=None, keepdims=False, correction=0, ddof=None):
        return reductions.var(self, axis, keepdims, correction, ddof)

    def std(self, axis=None, keepdims=False, correction=0, ddof=None):
        return reductions.std(self, axis, keepdims, correction, ddof)

    def logsumexp(self, axis=None, keepdims=False):
        return reductions.logsumexp(self, axis, keepdims)

    # views and movement
    def permute(self, *axes): return views.permute(self, *axes)
    def transpose(self, *axes): return views.transpose(self, axes if axes else None) \
        if len(axes) != 1 else views.transpose(self, axes[0])
    def swapaxes(self, a, b): return views.swapaxes(self, a, b)
    def expand(self, *shape): return views.broadcast_to(self, shape[0] if len(shape) == 1 and
                                                        not isinstance(shape[0], int) else shape)
    def broadcast_to(self, shape): return views.broadcast_to(self, shape)
    def squeeze(self, axis=None): return views.squeeze(self, axis)
    def unsqueeze(self, axis): return views.unsqueeze(self, axis)
    def flatten(self, start_dim=0, end_dim=-1): return views.flatten(self, start_dim, end_dim)

    @property
    def T(self):
        return views.transpose(self)

    @property
    def mT(self):
        """The last two axes swapped (the array API's matrix transpose)."""
        return matrix_transpose(self)

    def __setitem__(self, index, value):
        subscript.setitem(self, index, value)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("lazyrt: iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    # pointwise methods
    def astype(self, dtype, /, *, copy=True, device=None):
        return pointwise.astype(self, dtype, copy=copy, device=device)
    def clip(self, min=None, max=None): return pointwise.clip(self, min, max)
    def abs(self): return pointwise.abs(self)
    def exp(self): return pointwise.exp(self)
    def log(self): return pointwise.log(self)
    def sqrt(self): return pointwise.sqrt(self)
    def tanh(self): return pointwise.tanh(self)
    def sigmoid(self): return pointwise.sigmoid(self)
    def round(self): return pointwise.round(self)

    # materializing (barriers); numpy() itself is in the Cython base
    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self):
        a = self.numpy()
        if a.size != 1:
            raise ValueError(f"lazyrt.item: tensor of shape {a.shape} has {a.size} elements, "
                             "only one-element tensors can be converted to Python scalars")
        return a.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __bool__(self):
        a = self.numpy()
        if a.size != 1:
            raise ValueError(f"lazyrt: the truth value of a tensor of shape {a.shape} is "
                             "ambiguous; use .any() or .all()")
        return bool(a.reshape(()))

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __complex__(self):
        """The one element as a Python complex (a barrier), as the array API says:
        ``self + 0j``, and NaN + NaN j for NaN. lazyrt has no complex dtypes; this is
        only the conversion to a Python number."""
        value = self.item()
        if value != value:
            return complex(value, value)
        return complex(value)

    # -- the array API protocol --
    def __array_namespace__(self, /, *, api_version=None):
        """The array API namespace of lazyrt tensors: ``lazyrt`` itself
        (``api_version``: None or "2023.12"; earlier versions are subsets)."""
        return namespace.namespace_for(api_version)

    @property
    def device(self):
        """Where the data lives: always ``Device("cpu")`` (the backend, not the
        device, decides where kernels run; see ``lazyrt.api.device``)."""
        return CPU

    def to_device(self, device, /, *, stream=None):
        """``self`` on ``device`` (only "cpu": a new tensor over the same value)."""
        check_device(device, "Tensor.to_device")
        if stream is not None:
            raise ValueError("lazyrt.Tensor.to_device: tensors live on the CPU; a stream "
                             "does not apply")
        return R.wrap(self._node)

    def __index__(self):
        if self._node.dtype not in D.INTEGRAL:
            raise TypeError(f"lazyrt: only integer tensors can be used as an index, "
                            f"not {self.dtype}")
        return int(self.item())

    def __reduce__(self):
        # pickling materializes: the pickle holds the data, never a pending graph
        return (creation.tensor, (np.array(self.numpy()),))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export of the computed value (a barrier). Computed values are
        read-only, which DLPack before 1.0 cannot signal: those consumers get a
        copy (``torch.tensor(t)`` and ``np.from_dlpack(t)`` work either way)."""
        if self._node.dtype == D.BFLOAT16:  # before computing: the refusal costs nothing
            raise BufferError("lazyrt: NumPy's DLPack cannot export bfloat16 (ml_dtypes' dtype); "
                              "use x.numpy() or np.asarray(x), or x.astype(lr.float32) first")
        a = self.numpy()
        kw = {} if max_version is None else {"max_version": max_version}
        if dl_device is not None:
            kw["dl_device"] = dl_device
        if copy is not None:
            kw["copy"] = copy
        if stream is not None:
            raise BufferError("lazyrt: tensors live on the CPU; a DLPack stream does not apply")
        try:
            return a.__dlpack__(**kw)
        except BufferError:
            if copy is False:
                raise BufferError("lazyrt: the value is read-only and this DLPack consumer "
                                  "cannot take a read-only array without a copy") from None
            return np.array(a).__dlpack__(**kw)

    def __dlpack_device__(self):
        return np.empty(0).__dlpack_device__()

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self.dtype})"

    def __str__(self):
        return str(self.numpy())

    def __format__(self, spec):
        return format(self.numpy().item(), spec) if self.ndim == 0 else str(self)


R.install(Tensor, runtime.materialize, creation.asarray)
