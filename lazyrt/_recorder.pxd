# cython: language_level=3
"""What the recorder's Cython modules share: the node, the tensor base, the
hash mix, and the C-level constructors, so the other recorder
modules call them directly instead of through Python."""
from libc.stdint cimport uint64_t, int64_t
from cpython.object cimport PyObject


cdef inline uint64_t _rotl(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t mix(uint64_t h, uint64_t v) noexcept nogil:
    """Fold one 64-bit word into a running hash (murmur3's block step)."""
    v *= 0x87c37b91114253d5ULL
    v = _rotl(v, 31)
    v *= 0x4cf5ad432745937fULL
    h ^= v
    h = _rotl(h, 27)
    return h * 5ULL + 0x52dce729ULL


cdef inline uint64_t fmix(uint64_t h) noexcept nogil:
    """murmur3's finalizer: every input bit affects every output bit."""
    h ^= h >> 33
    h *= 0xff51afd7ed558ccdULL
    h ^= h >> 33
    h *= 0xc4ceb9fe1a85ec53ULL
    h ^= h >> 33
    return h


cdef class Node:
    cdef readonly int op
    cdef readonly int dtype
    cdef readonly tuple shape
    cdef readonly tuple inputs
    cdef readonly object attrs
    cdef readonly object value
    cdef readonly uint64_t hash
    cdef readonly uint64_t shape_hash
    # the user's line that recorded this node: a code object and a bytecode
    # offset (cheap to take), turned into "file:line" only when shown
    cdef readonly object source_code
    cdef readonly int source_offset
    # capture's bookkeeping: this node's canonical index in capture number `seen`
    cdef uint64_t seen
    cdef Py_ssize_t index


cdef class TensorBase:
    cdef public Node _node
    cdef PyObject* _prev
    cdef PyObject* _next


cdef uint64_t _shape_hash(tuple shape) except? 0
cdef Node _new_node(int op, int dtype, tuple shape, uint64_t shape_hash,
                    tuple inputs, object attrs)
cdef Node _scalar_node(object value, int dtype, bint baked)
cdef Node _cast(Node n, int dtype)
cdef tuple _broadcast(tuple a, tuple b, int op)
cdef TensorBase _wrap(Node node)
cdef int _scalar_kind(object v) noexcept
cdef bint _int_fits(object value, int dtype) except -1
cdef object _check_int_range(int op, object value, int dtype)
cdef object _as_tensor(object x)
