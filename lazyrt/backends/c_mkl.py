"""Intel MKL as a BLAS the C backend's matmuls may call: where it is, and how it loads.

MKL is optional (``pip install lazyrt[mkl]``, or the ``mkl`` package itself: a
few hundred MB, x86-64 only). Its wheel puts ``libmkl_rt.so.<N>`` in the
environment's ``lib/`` folder, beside the libraries it loads itself (the
sequential threading layer, the kernels of each instruction set).

:mod:`.c_blas` measures it against NumPy's OpenBLAS and calls it where it won.
lazyrt runs one product per OpenMP thread (:mod:`.c_gemm`), so MKL must not
start threads of its own: it is loaded with its *sequential* threading layer.
That layer can only be chosen before MKL's first call in a process; where
another part of the process already loaded the same library with another
layer, it is refused here (lazyrt then calls OpenBLAS). lazyrt passes 64-bit
dimensions (``int64_t`` M, N, K, lda...), so it binds MKL's ILP64 entry
points, ``cblas_sgemm_64``/``cblas_dgemm_64``, as it binds OpenBLAS's
``...64_`` ones.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import site
import sys
import threading
from typing import Optional

#: the ILP64 CBLAS products lz_gemm calls, and MKL's threading-layer switch
SGEMM, DGEMM = "cblas_sgemm_64", "cblas_dgemm_64"
SET_THREADING_LAYER = "MKL_Set_Threading_Layer"
#: MKL_THREADING_SEQUENTIAL in mkl_service.h
SEQUENTIAL = 1

_LOCK = threading.Lock()


def mkl_path() -> Optional[str]:
    """The ``libmkl_rt.so.<N>`` this environment holds (the ``mkl`` wheel's: in the
    environment's, the base Python's or the user's ``lib/``), the newest soname;
    None when MKL is not installed."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix, site.getuserbase())):
        found = glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so.*"))
        found = [p for p in found if p.rsplit(".so.", 1)[-1].isdigit()]
        if found:
            return max(found, key=lambda p: int(p.rsplit(".so.", 1)[-1]))
    return None


def family_from_maps(maps_text: str) -> str:
    """The instruction set of the MKL kernels a process has mapped, from its
    ``/proc/self/maps`` text (``libmkl_avx512.so.3`` -> ``avx512``); "" if none."""
    found = set()
    for line in maps_text.splitlines():
        name = os.path.basename(line.split(None, 5)[-1].strip()) if line.strip() else ""
        if name.startswith("libmkl_") and ".so" in name:
            part = name[len("libmkl_"):].split(".so")[0]
            if part in ("avx10", "avx512", "avx2", "avx", "mc3", "mc", "def"):
                found.add(part)
    return "+".join(sorted(found))


def loaded_family() -> str:
    """:func:`family_from_maps` of this process."""
    try:
        with open("/proc/self/maps") as f:
            return family_from_maps(f.read())
    except OSError:
        return ""


def version(lib) -> str:
    """MKL's version (``2026.2``), from its version line (``Intel(R) oneAPI Math
    Kernel Library Version 2026.2-Product Build 20260915 for ...``)."""
    buf = ctypes.create_string_buffer(256)
    lib.mkl_get_version_string(buf, len(buf))
    text = buf.value.decode(errors="replace").strip()
    found = re.search(r"Version (\S+?)(-Product|\s|$)", text)
    return found.group(1) if found else text


def load(path: str):
    """``(CDLL, sgemm address, dgemm address, kernel family, version)`` of the MKL
    at ``path``, single-threaded (sequential layer); OSError when it cannot be,
    or when a 2x2 product through it comes out wrong."""
    try:
        with _LOCK:
            lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
            set_layer = getattr(lib, SET_THREADING_LAYER)
            set_layer.restype, set_layer.argtypes = ctypes.c_int, [ctypes.c_int]
            layer = set_layer(SEQUENTIAL)  # answers the layer in force: set once per process
        sgemm, dgemm = (ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                        for name in (SGEMM, DGEMM))
    except AttributeError as e:  # an MKL older than its ILP64 CBLAS entry points (2023)
        raise OSError(f"{os.path.basename(path)} lacks {e}") from None
    if layer != SEQUENTIAL:
        raise OSError(f"{os.path.basename(path)} was already loaded in this process with "
                      f"threading layer {layer}, not the sequential one lazyrt needs")
    _check_product(sgemm, ctypes.c_float)
    _check_product(dgemm, ctypes.c_double)
    return lib, sgemm, dgemm, loaded_family(), version(lib)


def _check_product(address: int, real) -> None:
    """[[1,2],[3,4]] @ [[5,6],[7,8]] through the product at ``address``, row major:
    a wrong binding fails here rather than in a user's matmul."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    gemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, i64, real,
                            ptr, i64, ptr, i64, real, ptr, i64)(address)
    a, b, c = (real * 4)(1, 2, 3, 4), (real * 4)(5, 6, 7, 8), (real * 4)()
    gemm(101, 111, 111, 2, 2, 2, 1.0, a, 2, b, 2, 0.0, c, 2)
    if list(c) != [19.0, 22.0, 43.0, 50.0]:
        raise OSError(f"a 2x2 product through MKL's {real.__name__} gemm gave {list(c)}")
