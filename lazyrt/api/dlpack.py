"""Reading a bfloat16 DLPack capsule, which NumPy's ``np.from_dlpack`` refuses
(NumPy has no bfloat16; lazyrt's is ml_dtypes'): the DLPack structures read
through ctypes, the data copied out as 16-bit words, the producer's deleter
called. Only CPU tensors of DLPack's ``kDLBfloat`` 16-bit type; anything else
is left to NumPy's error.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .. import dtypes as D

_KDL_CPU, _KDL_BFLOAT = 1, 4


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_Managed._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed)))]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype, _is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype, _set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


def is_bfloat16_on_cpu(x) -> bool:
    """Whether ``x.__dlpack__()`` would hand over a CPU bfloat16 tensor (``x``'s
    ``dtype`` names it: DLPack says so only inside the capsule)."""
    try:
        on_cpu = tuple(x.__dlpack_device__())[0] == _KDL_CPU
    except Exception:  # noqa: BLE001 - a producer without a device answer is not ours
        return False
    return on_cpu and "bfloat16" in str(getattr(x, "dtype", ""))


def read_bfloat16(x) -> np.ndarray:
    """A fresh bfloat16 array holding ``x``'s values (a DLPack producer on the CPU)."""
    capsule = x.__dlpack__()  # the unversioned capsule every producer still gives
    if not _is_valid(capsule, b"dltensor"):
        raise BufferError("lazyrt.from_dlpack: the producer gave no unused DLPack capsule")
    managed = ctypes.cast(_get_pointer(capsule, b"dltensor"), ctypes.POINTER(_Managed))
    t = managed.contents.dl_tensor
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (_KDL_BFLOAT, 16, 1) or \
            t.device.device_type != _KDL_CPU:
        raise BufferError("lazyrt.from_dlpack: the capsule does not hold CPU bfloat16 data")
    shape = tuple(t.shape[k] for k in range(t.ndim))
    strides = tuple(t.strides[k] for k in range(t.ndim)) if t.strides else \
        tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(t.ndim))
    try:
        out = np.empty(shape, np.uint16)
        if out.size:
            lo = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0)
            hi = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0)
            base = (t.data or 0) + t.byte_offset + 2 * lo
            words = np.ctypeslib.as_array(ctypes.cast(base, ctypes.POINTER(ctypes.c_uint16)),
                                          (hi - lo + 1,))
            out[...] = np.lib.stride_tricks.as_strided(
                words[-lo:], shape, tuple(2 * s for s in strides), writeable=False)
    finally:  # consumed: the producer's memory is released now, and only once
        _set_name(capsule, b"used_dltensor")
        if managed.contents.deleter:
            managed.contents.deleter(managed)
    return out.view(D.bfloat16)
