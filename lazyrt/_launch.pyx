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
from time import perf_counter as _clock

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
    #: None, or called with the program's buffers before each call (a fused
    #: gather's index range check: it raises before the kernel reads anything)
    cdef public object check

    def __cinit__(self, str name, uintptr_t address, buffers, iargs, scalar_slots, library):
        self.name = name
        self.check = None
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

    def run(self, list bufs, double[::1] scalars):
        """Call the kernel on ``bufs`` (ndarrays by program buffer number) and the
        program's scalar table (64-bit words: doubles, or int64 bits for int slots)."""
        self._call(bufs, <const int64_t *>&scalars[0])

    cdef _call(self, list bufs, const int64_t *words):
        if self.check is not None:
            self.check(bufs)
        cdef char *stack_ptrs[32]
        cdef int64_t stack_fa[32]
        cdef char **ptrs = stack_ptrs
        cdef int64_t *fa = stack_fa
        cdef int k
        cdef object obj
        if self.nbuf > 32 or self.nscal > 32:
            ptrs = <char **>malloc(sizeof(char *) * self.nbuf)
            fa = <int64_t *>malloc(sizeof(int64_t) * (self.nscal + 1))
        try:
            for k in range(self.nbuf):
                obj = bufs[self.buffers[k]]
                if not cnp.PyArray_Check(obj):  # a missing buffer raises, never segfaults
                    raise TypeError(f"lazyrt internal: kernel {self.name} got {type(obj)} "
                                    f"for buffer {self.buffers[k]}")
                ptrs[k] = <char *>cnp.PyArray_DATA(<cnp.ndarray>obj)
            for k in range(self.nscal):
                fa[k] = words[self.scalar_slots[k]]  # bit copies: int slots stay exact
            with nogil:
                self.fn(ptrs, self.ia, <const double *>fa)
        finally:
            if ptrs != stack_ptrs:
                free(ptrs)
                free(fa)


cdef class ProgramRunner:
    """One run of a compiled program, with the per-run bookkeeping in C.

    Per run: a buffer list (scratch reused, outputs fresh from the pool),
    the parameters bound (arrays to buffers; Python scalars into a table of
    64-bit words, ints as exact int64 bits), every step run, the outputs
    collected. ``steps`` holds :class:`KernelLaunch` objects, called
    directly, and other steps (BLAS, NumPy) with a ``run(bufs, None)``.
    """
    cdef list steps
    cdef Py_ssize_t nbuf
    cdef list scratch_spec, scratch, fresh, outputs, shared
    cdef int nparams, n_scalars
    cdef int *param_buf
    cdef int *param_slot
    cdef object make_view
    cdef bint busy

    def __cinit__(self, list steps, Py_ssize_t nbuf, list scratch, list fresh,
                  list params, int n_scalars, list outputs, make_view, list shared=None):
        """``scratch``/``fresh``: (buffer, shape, dtype); ``params``: (buffer or -1,
        scalar slot or -1) per parameter; ``outputs``: (buffer, view or None);
        ``make_view(array, view)`` makes an output that is not a whole buffer;
        ``shared``: (buffer, scratch buffer) pairs, in step order, of scratch
        buffers that are another's memory (a kernel stores one over the other)."""
        cdef int k
        self.steps = steps
        self.nbuf = nbuf
        self.scratch_spec = scratch
        self.scratch = None
        self.fresh = [(i, tuple(shape), np.dtype(dt)) for i, shape, dt in fresh]
        self.shared = shared or []
        self.outputs = outputs
        self.make_view = make_view
        self.n_scalars = n_scalars
        self.nparams = len(params)
        self.param_buf = <int *>malloc(sizeof(int) * (self.nparams + 1))
        self.param_slot = <int *>malloc(sizeof(int) * (self.nparams + 1))
        if self.param_buf == NULL or self.param_slot == NULL:
            raise MemoryError()
        for k in range(self.nparams):
            self.param_buf[k], self.param_slot[k] = params[k]

    def __dealloc__(self):
        free(self.param_buf)
        free(self.param_slot)

    def run(self, list params, report=None, list donated=None):
        """Run on ``params``; ``report(step, seconds)`` after each step, if given.
        ``donated``: (output buffer, parameter position) pairs whose output is
        written over the parameter's array instead of a fresh one (the caller
        found nobody else holding it).

        Kernels release the GIL, so two threads may run one program at once:
        only one of them uses the program's scratch buffers."""
        cdef list bufs = [None] * self.nbuf
        if len(params) != self.nparams:
            raise ValueError(f"lazyrt internal: program takes {self.nparams} parameters, "
                             f"got {len(params)}")
        cdef bint own = not self.busy
        cdef list scratch
        if own:  # the program's own scratch; another thread running it gets fresh ones
            if self.scratch is None:
                self.scratch = [(i, empty(shape, dt)) for i, shape, dt in self.scratch_spec]
            scratch = self.scratch
            self.busy = True
        else:
            scratch = [(i, empty(shape, dt)) for i, shape, dt in self.scratch_spec]
        try:
            for k, value in scratch:
                bufs[k] = value
            for k, j in self.shared:
                bufs[k] = bufs[j]
            if donated:
                for k, p in donated:
                    bufs[k] = params[p]  # _run leaves a bound buffer as it is
            return self._run(params, bufs, report)
        finally:
            if own:
                self.busy = False

    cdef list _run(self, list params, list bufs, report):
        cdef int64_t stack_words[64]
        cdef int64_t *words = stack_words
        cdef int k, slot
        cdef object value, step
        cdef cnp.ndarray big = None  # the scalar table, when the stack one is too small
        for k, shape, dt in self.fresh:
            if bufs[k] is None:
                bufs[k] = _empty(shape, dt)
        if self.n_scalars > 64:
            big = np.zeros(self.n_scalars, np.int64)
            words = <int64_t *>cnp.PyArray_DATA(big)
        for k in range(self.nparams):
            value = params[k]
            if self.param_buf[k] >= 0:
                if not cnp.PyArray_Check(value):  # never hand a non-array to C
                    raise TypeError(f"lazyrt internal: parameter {k} is "
                                    f"{type(value).__name__}, not an ndarray")
                if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>value):
                    value = np.ascontiguousarray(value)
                bufs[self.param_buf[k]] = value
            else:
                slot = self.param_slot[k]
                if type(value) is int:
                    words[slot] = <int64_t>value
                else:
                    (<double *>words)[slot] = <double>value
        for step in self.steps:
            if report is not None:
                t0 = _clock()
            if type(step) is KernelLaunch:
                (<KernelLaunch>step)._call(bufs, words)
            else:
                step.run(bufs, None)
            if report is not None:
                report(step, _clock() - t0)
        return [bufs[b] if view is None else self.make_view(bufs[b], view)
                for b, view in self.outputs]


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
    return _empty(shape, np.dtype(dtype))


cdef object _empty(tuple shape, object dt):
    global _free_bytes
    cdef Py_ssize_t n = dt.itemsize
    for d in shape:
        n *= d
    cdef cnp.npy_intp dims[32]
    cdef int k, nd = len(shape)
    if n < _SMALL and nd <= 32:  # malloc's small bins fault no fresh pages
        for k in range(nd):
            dims[k] = shape[k]
        return cnp.PyArray_EMPTY(nd, dims, dt.num, 0)
    if n < _SMALL:
        return np.empty(shape, dt)
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
