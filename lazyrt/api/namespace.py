"""lazyrt as an array API namespace (version 2023.12): the inspection
functions, the data type functions and the constants.

Dtypes are NumPy's dtype objects (``lr.float32 is np.dtype("float32")``), so
``x.dtype == lr.float32`` holds and ``x.dtype == "float32"`` does too.
lazyrt has bool, int8, uint8, int32, int64, float16, float32, float64 and
bfloat16 (``ml_dtypes.bfloat16``, ``lr.bfloat16``); no complex, int16, uint16, uint32 or uint64.

Promotion is NumPy 2's (:mod:`lazyrt.dtypes`). Where the standard defines a
promotion, NumPy's agrees with it except for int8 with uint8 (the standard's
int16; lazyrt has none and gives int32). Where the standard leaves it to the
library (mixed kinds: bool with int, int with float), ``result_type`` and
``can_cast`` give NumPy's answer, the one every lazyrt op follows.

>>> import lazyrt as lr
>>> lr.result_type(lr.int8, lr.float32), lr.can_cast(lr.uint8, lr.int32)
(dtype('float32'), True)
>>> lr.isdtype(lr.int8, ("signed integer", "real floating"))
True
>>> lr.__array_namespace_info__().default_dtypes()["real floating"]
dtype('float64')
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .. import _recorder as R
from .. import dtypes as D
from .device import CPU, check_device
from ..errors import DTypeError

__array_api_version__ = "2023.12"

e, inf, nan, pi = math.e, math.inf, math.nan, math.pi
newaxis = None

#: the kinds ``isdtype`` and ``dtypes(kind=...)`` accept, and lazyrt's dtypes of each
KINDS: dict[str, tuple[np.dtype, ...]] = {
    "bool": (D.bool_,),
    "signed integer": (D.int8, D.int32, D.int64),
    "unsigned integer": (D.uint8,),
    "integral": (D.int8, D.uint8, D.int32, D.int64),
    "real floating": (D.float16, D.float32, D.float64, D.bfloat16),
    "complex floating": (),
    "numeric": (D.int8, D.uint8, D.int32, D.int64, D.float16, D.float32, D.float64,
                D.bfloat16),
}

#: lazyrt's dtypes the standard does not have: counted in their kind by ``isdtype``,
#: left out of ``__array_namespace_info__().dtypes()``
EXTRA_DTYPES = (D.float16, D.bfloat16)


def _dtype_of(x, fn: str) -> np.dtype:
    """The lazyrt dtype of a tensor or dtype-like argument of ``fn``."""
    if isinstance(x, R.TensorBase):
        return x.dtype
    if isinstance(x, (bool, int, float, complex)) or x is None:
        raise TypeError(f"lazyrt.{fn}: expected a dtype or a tensor, not {x!r}")
    try:
        dt = np.dtype(x)
    except TypeError:
        raise TypeError(f"lazyrt.{fn}: expected a dtype or a tensor, not {x!r}") from None
    if dt not in D.CODE:
        raise DTypeError(f"lazyrt.{fn}: {dt} is not a lazyrt dtype; lazyrt has "
                         f"{', '.join(D.NAMES)}")
    return dt


@dataclass(frozen=True)
class finfo_object:
    """What ``lr.finfo`` returns: Python floats, as the standard asks."""
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


@dataclass(frozen=True)
class iinfo_object:
    """What ``lr.iinfo`` returns."""
    bits: int
    max: int
    min: int
    dtype: np.dtype


def finfo(type, /) -> finfo_object:
    """Machine limits of a floating dtype (or of a tensor's dtype).

    >>> import lazyrt as lr
    >>> lr.finfo(lr.float16).max
    65504.0
    """
    dt = _dtype_of(type, "finfo")
    if dt not in KINDS["real floating"]:
        raise TypeError(f"lazyrt.finfo: {dt} is not a floating dtype; use lr.iinfo for integers")
    fi = ml_dtypes.finfo(dt)  # NumPy's finfo does not know bfloat16
    return finfo_object(int(fi.bits), float(fi.eps), float(fi.max), float(fi.min),
                        float(fi.smallest_normal), dt)


def iinfo(type, /) -> iinfo_object:
    """Machine limits of an integer dtype (or of a tensor's dtype).

    >>> import lazyrt as lr
    >>> lr.iinfo(lr.uint8).max
    255
    """
    dt = _dtype_of(type, "iinfo")
    if dt.kind not in "iu":
        raise TypeError(f"lazyrt.iinfo: {dt} is not an integer dtype; use lr.finfo for floats")
    ii = np.iinfo(dt)
    return iinfo_object(int(ii.bits), int(ii.max), int(ii.min), dt)


def isdtype(dtype, kind) -> bool:
    """Whether ``dtype`` is ``kind``: a dtype, a kind name (``"integral"``,
    ``"real floating"``, ...; see :data:`KINDS`) or a tuple of those."""
    dt = _dtype_of(dtype, "isdtype") if not isinstance(dtype, R.TensorBase) else None
    if dt is None:
        raise TypeError("lazyrt.isdtype: expected a dtype, not a tensor; use x.dtype")
    if isinstance(kind, tuple):
        if any(isinstance(k, tuple) for k in kind):
            raise TypeError("lazyrt.isdtype: kind must be a dtype, a kind name or a flat "
                            "tuple of those")
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str) and kind in KINDS:
        return dt in KINDS[kind]
    if isinstance(kind, np.dtype):
        return dt == kind
    raise ValueError(f"lazyrt.isdtype: {kind!r} is not a dtype or one of the kinds "
                     f"{', '.join(repr(k) for k in KINDS)}")


def result_type(*arrays_and_dtypes):
    """The dtype an op on these operands gives: NumPy 2's promotion (NEP 50).

    Python scalars are weak (``result_type(lr.int8, 1)`` is int8,
    ``result_type(lr.int8, 1.0)`` float64), as the standard's 2024.12 version
    allows; at least one tensor or dtype is needed.
    """
    codes, scalars = [], []
    for a in arrays_and_dtypes:
        if isinstance(a, complex):
            raise TypeError("lazyrt.result_type: lazyrt has no complex dtypes")
        if isinstance(a, (bool, int, float)):
            scalars.append(a)
        else:
            codes.append(D.CODE[_dtype_of(a, "result_type")])
    if not codes:
        raise ValueError("lazyrt.result_type: needs at least one tensor or dtype")
    code = D.promote(*codes)
    for s in scalars:
        promoted = D._lazyrt_code(np.result_type(D.DTYPES[code], s))
        if promoted < 0:
            raise TypeError(f"lazyrt.result_type: no lazyrt dtype for {D.DTYPES[code]} with "
                            f"the Python scalar {s!r}")
        code = promoted
    return D.DTYPES[code]


def can_cast(from_, to, /) -> bool:
    """Whether ``from_`` (a dtype or tensor) promotes to ``to``:
    ``result_type(from_, to) == to``. Within a kind that is the standard's
    table; across kinds (bool to int, int to float) it is NumPy's promotion,
    which every lazyrt op follows (``can_cast(lr.int8, lr.float16)`` is True,
    ``can_cast(lr.int32, lr.float32)`` False)."""
    a, b = _dtype_of(from_, "can_cast"), _dtype_of(to, "can_cast")
    return D.DTYPES[D.promote(D.CODE[a], D.CODE[b])] == b


class __array_namespace_info__:
    """The array API's inspection namespace: ``lr.__array_namespace_info__()``.

    >>> import lazyrt as lr
    >>> info = lr.__array_namespace_info__()
    >>> info.capabilities()["data-dependent shapes"], info.devices()
    (True, [Device('cpu')])
    """

    def capabilities(self) -> dict:
        # boolean-mask reads and writes, nonzero and unique_* all work; each one whose
        # output shape depends on the data is a barrier (it computes its input)
        return {"boolean indexing": True, "data-dependent shapes": True}

    def default_device(self):
        return CPU

    def devices(self) -> list:
        return [CPU]

    def default_dtypes(self, *, device=None) -> dict:
        check_device(device, "__array_namespace_info__().default_dtypes")
        return {"real floating": D.float64, "complex floating": None,
                "integral": D.int64, "indexing": D.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        """``{name: dtype}`` of the array API dtypes of ``kind`` (a kind name, a tuple
        of them, or None for all of them). float16 and bfloat16, which the standard
        does not have, are not listed (``isdtype(lr.float16, "real floating")`` is True)."""
        check_device(device, "__array_namespace_info__().dtypes")
        if kind is None:
            return {dt.name: dt for dt in D.DTYPES if dt not in EXTRA_DTYPES}
        if isinstance(kind, tuple):
            out = {}
            for k in kind:
                out.update(self.dtypes(device=device, kind=k))
            return out
        if isinstance(kind, str) and kind in KINDS:
            return {dt.name: dt for dt in KINDS[kind] if dt not in EXTRA_DTYPES}
        raise ValueError(f"lazyrt.__array_namespace_info__().dtypes: unknown kind {kind!r}; "
                         f"use one of {', '.join(repr(k) for k in KINDS)} or a tuple of them")


def namespace_for(api_version):
    """The module ``Tensor.__array_namespace__`` returns (lazyrt itself)."""
    if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12"):
        raise ValueError(f"lazyrt: array API version {api_version!r} is not supported; lazyrt "
                         f"implements {__array_api_version__!r} (and the earlier 2021.12, "
                         "2022.12, which it contains)")
    import lazyrt
    return lazyrt
