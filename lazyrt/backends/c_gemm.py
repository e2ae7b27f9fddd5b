"""Matmul for the C backend: OpenBLAS (or MKL), run on lazyrt's OpenMP threads.

Why not just ``np.matmul``: OpenBLAS keeps its own worker threads, and after a
call they spin for a while waiting for the next one. On a 2-core machine the
kernel that follows (the matmul's bias + GELU epilogue) then shares its cores
with two spinning threads: measured here, 1024^2 sgemm + a ReLU epilogue took
60.5 ms that way against 30.8 ms when each OpenMP thread of lazyrt calls a
single-threaded sgemm on its block of rows. One thread pool, never two.

So a float32/float64 2-D matmul whose operands BLAS can address (one unit
stride, leading dimension at least the row length) becomes a C launch that
runs one single-threaded sgemm/dgemm per OpenMP thread over a slice of the
rows (or columns, when there are more of them).

Which BLAS: :mod:`.c_blas` measures, once per host, NumPy's instance against a
private copy of the same library running the kernel family of the other vector
width, and against MKL's sequential layer where MKL is installed, for large
products and for small ones of each transposition, float32 and float64, and
each launch calls the fastest for its product. A private copy and MKL are
single-threaded from the start. NumPy's instance is set to one thread under a
process-wide lock while any launch runs, and its thread count comes back when
the last concurrent caller leaves: meanwhile NumPy matmuls in *other* Python
threads use one BLAS thread, slower, never wrong.

A batched product (up to four batch dims, broadcast ones included: attention's
``(B, H, S, D) @ (B, H, D, S)``) takes the same launch: with at least as many
products as threads, each thread runs whole products; with fewer, each product
is split by rows as above. ``np.matmul`` of a batch would wake OpenBLAS's own
threads again. Why OpenBLAS even for attention's tiny per-head products: a
hand-written AVX2 kernel (6x16 register tile, A broadcast in place, B packed
only when transposed) ran 64x64x32 and 64x32x64 products within 10% of
OpenBLAS's single-threaded call on a Zen 3 host, ahead without a transposed B
and behind with one: not worth a second GEMM to keep correct.

Everything else (integer and float16 matmuls, more batch dims, odd strides, a
NumPy without an ILP64 OpenBLAS) goes through ``np.matmul``.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os

import numpy as np

from .. import dtypes as D
from ..planner import matmul_operands
from .c_blas import address, gemm_library, product_kind

#: below this many multiply-adds a matmul runs on the calling thread only
PARALLEL_FLOPS = 1 << 18


def _gemm_source() -> str:
    """The hand-written driver, ``kernels/lazyrt_gemm.c`` (installed with the headers)."""
    from .c_compiler import kernels_dir
    with open(os.path.join(kernels_dir(), "lazyrt_gemm.c")) as f:
        return f.read()


#: the C source of ``lz_gemm`` (compiled once, cached like a generated kernel)
GEMM_SOURCE = _gemm_source()

@functools.cache
def numpy_openblas():
    """(library, addresses of sgemm, dgemm, get/set threads) of the ILP64
    OpenBLAS NumPy itself uses, or None when NumPy has another BLAS."""
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
            return (lib,) + tuple(address(lib, name) for name in (
                "cblas_sgemm", "cblas_dgemm", "openblas_get_num_threads",
                "openblas_set_num_threads"))
        except OSError:
            continue
    return None


def _openblas_paths():
    """OpenBLAS libraries this process has mapped (NumPy's), then NumPy's wheel folder."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if "openblas" in os.path.basename(path).lower() and path not in found:
                    found.append(path)
    except OSError:
        pass
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    found += [p for p in sorted(glob.glob(os.path.join(libs, "*openblas*"))) if p not in found]
    return found


def _blas_operand(view):
    """(offset, transposed, leading dimension) of a 2-D strided view, or None
    when BLAS cannot read it in place."""
    (r, c), (s0, s1) = view.shape, view.strides
    if s0 < 0 or s1 < 0:
        return None
    if s1 == 1 or c == 1:
        ld = s0 if r > 1 else c
        return (view.offset, 0, ld) if ld >= max(1, c) else None
    if s0 == 1 or r == 1:
        ld = s1 if c > 1 else r
        return (view.offset, 1, ld) if ld >= max(1, r) else None
    return None


#: batch dims ``lz_gemm`` takes (``LZ_MAX_BATCH`` in kernels/lazyrt_gemm.c)
MAX_BATCH = 4


def gemm_args(step, buffers):
    """The ``lz_gemm`` integer arguments for ``step``, or None when it must go
    through ``np.matmul`` (see the module docstring for which ones)."""
    va, vb = matmul_operands(step)  # a transposed product: b^T @ a^T
    a, b = va.view, vb.view
    out = buffers[step.out]
    if out.dtype not in (D.FLOAT32, D.FLOAT64) or len(a.shape) < 2 or len(b.shape) < 2:
        return None
    if buffers[va.buffer].dtype != out.dtype or buffers[vb.buffer].dtype != out.dtype:
        return None
    (m, k), n = a.shape[-2:], b.shape[-1]
    rank = len(out.shape)
    nb = rank - 2
    if min(m, n, k) == 0 or tuple(out.shape[-2:]) != (m, n) or nb > MAX_BATCH:
        return None
    batch = tuple(out.shape[:nb])
    a_strides = _batch_strides(a, batch)
    b_strides = _batch_strides(b, batch)
    pa, pb = _blas_operand(_matrix(a)), _blas_operand(_matrix(b))
    if pa is None or pb is None or a_strides is None or b_strides is None:
        return None
    blas = gemm_library(numpy_openblas(), product_kind(m, n, k, pa[1], pb[1],
                                                   out.dtype == D.FLOAT64))
    if blas is None:
        return None
    if 0 in batch:
        return None
    gemm = blas.dgemm if out.dtype == D.FLOAT64 else blas.sgemm
    pad = (0,) * (MAX_BATCH - nb)
    flops = m * n * k * int(np.prod(batch, dtype=np.int64))
    return (gemm, blas.get_threads, blas.set_threads, int(out.dtype == D.FLOAT64), m, n, k,
            *pa, *pb, n, int(flops >= PARALLEL_FLOPS),
            nb, *batch, *pad, *a_strides, *pad, *b_strides, *pad)


class _Matrix:
    """The last two dims of a strided view (its batch dims dropped)."""
    __slots__ = ("shape", "strides", "offset")

    def __init__(self, view):
        self.shape, self.strides, self.offset = (tuple(view.shape[-2:]),
                                                 tuple(view.strides[-2:]), view.offset)


def _matrix(view):
    return view if len(view.shape) == 2 else _Matrix(view)


def _batch_strides(view, batch):
    """``view``'s element strides along the output's batch dims (0 where it
    broadcasts), or None when they do not line up."""
    own = len(view.shape) - 2
    if own > len(batch):
        return None
    strides = [0] * (len(batch) - own)
    for size, dim, stride in zip(batch[len(batch) - own:], view.shape[:own], view.strides[:own]):
        if dim == size:
            strides.append(stride if size > 1 else 0)
        elif dim == 1:
            strides.append(0)
        else:
            return None
    return tuple(strides)
