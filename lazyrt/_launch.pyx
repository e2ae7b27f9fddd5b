# cython: language_level=3, boundscheck=False, wraparound=False
"""Low-overhead kernel launches and the output buffer pool.

A compiled kernel is a C function ``void k(char **bufs, const int64_t *ia,
const double *fa)``. :class:`KernelLaunch` keeps its function pointer, the
program buffers it touches and its integer arguments in C arrays, so a launch
costs a pointer gather and an indirect call, not a ctypes conversion.

:class:`BufferPool` hands out 64-byte-aligned NumPy arrays whose memory
returns to a size-bucketed free list when the last array over it dies. A
steady-state loop then writes into pages that are already mapped: on this
class of machine, fresh pages cost as much as the kernel itself.
"""
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport malloc, free
from cpython.buffer cimport PyBUF_WRITABLE
cimport numpy as cnp
import numpy as np

cnp.import_array()

ctypedef void (*kernel_fn)(char **bufs, const int64_t *ia, const double *fa) noexcept nogil

cdef extern from "stdlib.h":
    int posix_memalign(void **memptr, size_t alignment, size_t size) nogil


cdef class KernelLaunch:
    """One kernel of a program: function pointer, buffer numbers, arguments."""
    cdef kernel_fn fn
    cdef int nbuf, nia, nscal
    cdef int *buffers
    cdef int64_t *ia
    cdef int *scalar_slots
    cdef readonly str name
    cdef object library        # keeps the shared object loaded

    def __cinit__(self, str name, uintptr_t address, buffers, iargs, scalar_slots, library):
        self.name = name
        self.fn = <kernel_fn>address
        self.library = library
        self.nbuf = len(buffers)
        self.nia = len(iargs)
        self.nscal = len(scalar_slots)
        self.buffers = <int *>malloc(sizeof(int) * (self.nbuf + 1))
        self.ia = <int64_t *>malloc(sizeof(int64_t) * (self.nia + 1))
        self.scalar_slots = <int *>malloc(sizeof(int) * (self.nscal + 1))
        if self.buffers == NULL or self.ia == NULL or self.scalar_slots == NULL:
            raise MemoryError()
        for k in range(self.nbuf):
            self.buffers[k] = buffers[k]
        for k in range(self.nia):
            self.ia[k] = iargs[k]
        for k in range(self.nscal):
            self.scalar_slots[k] = scalar_slots[k]

    def __dealloc__(self):
        free(self.buffers)
        free(self.ia)
        free(self.scalar_slots)

    cpdef run(self, list bufs, double[::1] scalars):
        """Call the kernel on ``bufs`` (ndarrays by program buffer number)."""
        cdef char *stack_ptrs[32]
        cdef double stack_fa[32]
        cdef char **ptrs = stack_ptrs
        cdef double *fa = stack_fa
        cdef int k
        cdef cnp.ndarray arr
        cdef object obj
        if self.nbuf > 32 or self.nscal > 32:
            ptrs = <char **>malloc(sizeof(char *) * self.nbuf)
            fa = <double *>malloc(sizeof(double) * (self.nscal + 1))
        try:
            for k in range(self.nbuf):
                obj = bufs[self.buffers[k]]
                if not cnp.PyArray_Check(obj):  # a missing buffer raises, never segfaults
                    raise TypeError(f"lazyrt internal: kernel {self.name} got {type(obj)} "
                                    f"for buffer {self.buffers[k]}")
                arr = <cnp.ndarray>obj
                ptrs[k] = <char *>cnp.PyArray_DATA(arr)
            for k in range(self.nscal):
                fa[k] = scalars[self.scalar_slots[k]]
            with nogil:
                self.fn(ptrs, self.ia, fa)
        finally:
            if ptrs != stack_ptrs:
                free(ptrs)
                free(fa)


cdef dict _free_blocks = {}          # bucket bytes -> list of addresses
cdef Py_ssize_t _free_bytes = 0
cdef Py_ssize_t _max_free_bytes = 1 << 31
cdef int _max_per_bucket = 8
cdef Py_ssize_t _SMALL = 1 << 16


cdef Py_ssize_t _bucket(Py_ssize_t nbytes):
    """Round up to 1/8th steps of a power of two: bounded waste, few buckets."""
    cdef Py_ssize_t p = 64
    if nbytes <= 64:
        return 64
    while p < nbytes:
        p <<= 1
    cdef Py_ssize_t step = p >> 3
    return ((nbytes + step - 1) // step) * step


cdef class _Block:
    cdef void *ptr
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __getbuffer__(self, Py_buffer *view, int flags):
        self.shape[0] = self.nbytes
        self.strides[0] = 1
        view.buf = self.ptr
        view.obj = self
        view.len = self.nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = self.shape
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def __dealloc__(self):
        global _free_bytes
        if self.ptr == NULL:
            return
        if _free_blocks is None:  # interpreter shutdown
            free(self.ptr)
            self.ptr = NULL
            return
        bucket = _free_blocks.get(self.nbytes)
        if bucket is None:
            bucket = _free_blocks[self.nbytes] = []
        if len(bucket) < _max_per_bucket and _free_bytes + self.nbytes <= _max_free_bytes:
            bucket.append(<uintptr_t>self.ptr)
            _free_bytes += self.nbytes
        else:
            free(self.ptr)
        self.ptr = NULL


def empty(tuple shape, dtype):
    """An uninitialized, 64-byte-aligned array whose memory returns to the pool."""
    global _free_bytes
    dt = np.dtype(dtype)
    cdef Py_ssize_t n = dt.itemsize
    for d in shape:
        n *= d
    if n < _SMALL:
        return np.empty(shape, dt)  # malloc's small bins fault no fresh pages
    cdef Py_ssize_t nbytes = _bucket(n if n > 0 else 1)
    cdef _Block block = _Block.__new__(_Block)
    cdef void *ptr = NULL
    bucket = _free_blocks.get(nbytes)
    if bucket:
        ptr = <void *><uintptr_t>bucket.pop()
        _free_bytes -= nbytes
    elif posix_memalign(&ptr, 64, nbytes) != 0:
        raise MemoryError(f"lazyrt: cannot allocate {nbytes} bytes")
    block.ptr = ptr
    block.nbytes = nbytes
    arr = np.frombuffer(block, dtype=dt, count=n // dt.itemsize)
    return arr.reshape(shape)


def pool_stats():
    return {"free_bytes": _free_bytes,
            "free_blocks": sum(len(v) for v in _free_blocks.values())}
