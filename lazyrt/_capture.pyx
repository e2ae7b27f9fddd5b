# cython: language_level=3, boundscheck=False, wraparound=False
"""Graph capture: the canonical program behind the tensors a barrier computes.

Runs on every barrier, so it is in Cython and walks the graph with marks
kept on the nodes themselves (no per-node dict of ids): a node belongs to
this capture when its ``seen`` stamp equals the capture's number.
"""
from libc.stdint cimport uint64_t
from libc.stdlib cimport malloc, calloc, free
cimport cython
cimport numpy as cnp

from lazyrt._recorder cimport Node, mix, fmix
from lazyrt import ops as _ops

cnp.import_array()

cdef int OP_DATA = _ops.DATA.id
cdef int OP_SCALAR = _ops.SCALAR.id
cdef int OP_CONST = _ops.CONST.id
cdef tuple EMPTY = ()
cdef uint64_t _stamp = 0


@cython.final
cdef class Capture:
    """The canonical program behind some outputs, and its graph key.

    ``nodes`` is topologically ordered and deduplicated: leaves by identity,
    ops by value numbering (same hash, same canonical inputs), so a common
    subexpression is computed once. ``inputs[i]`` holds the canonical indices
    of node i's inputs; ``params`` the indices of the parameters (data leaves
    and runtime scalars) in a stable order; ``outputs`` one index per
    requested node. The key covers every node's structural hash and wiring,
    so two captures with equal keys are the same program.
    """
    cdef readonly list nodes
    cdef readonly list inputs
    cdef readonly list params
    cdef readonly list values    # the parameters' values, in ``params`` order
    cdef readonly list outputs
    cdef readonly uint64_t key
    cdef uint64_t stamp


cdef struct _Table:
    # open addressing, linear probing: value number -> canonical node index + 1
    uint64_t *keys
    Py_ssize_t *slots
    Py_ssize_t mask
    Py_ssize_t used


cdef int _table_init(_Table *t, Py_ssize_t capacity) except -1:
    cdef Py_ssize_t n = 64
    while n < 2 * capacity:
        n <<= 1
    t.keys = <uint64_t *>malloc(n * sizeof(uint64_t))
    t.slots = <Py_ssize_t *>calloc(n, sizeof(Py_ssize_t))
    if t.keys == NULL or t.slots == NULL:
        free(t.keys)
        free(t.slots)
        raise MemoryError()
    t.mask = n - 1
    t.used = 0
    return 0


cdef inline Py_ssize_t _table_find(_Table *t, uint64_t key) noexcept:
    """Position of ``key``, or of the empty slot where it would go."""
    cdef Py_ssize_t i = <Py_ssize_t>(key & <uint64_t>t.mask)
    while t.slots[i] != 0 and t.keys[i] != key:
        i = (i + 1) & t.mask
    return i


cdef int _table_put(_Table *t, Py_ssize_t pos, uint64_t key, Py_ssize_t value) except -1:
    cdef _Table bigger
    cdef Py_ssize_t i
    t.keys[pos] = key
    t.slots[pos] = value + 1
    t.used += 1
    if 2 * t.used > t.mask:  # keep the load under one half: probes stay short
        _table_init(&bigger, t.mask + 1)
        for i in range(t.mask + 1):
            if t.slots[i] != 0:
                pos = _table_find(&bigger, t.keys[i])
                bigger.keys[pos] = t.keys[i]
                bigger.slots[pos] = t.slots[i]
        bigger.used = t.used
        free(t.keys)
        free(t.slots)
        t[0] = bigger
    return 0


cdef inline bint _same_inputs(Node a, Node b) noexcept:
    """Whether a and b read the same canonical nodes (in this capture)."""
    cdef Py_ssize_t j, n = len(a.inputs)
    if len(b.inputs) != n:
        return False
    for j in range(n):
        if (<Node>a.inputs[j]).index != (<Node>b.inputs[j]).index:
            return False
    return True


def capture(list outputs, uint64_t salt=0):
    """Capture the graph behind ``outputs`` (a list of nodes).

    Captures in two threads can interleave only if a garbage-collection
    finalizer switches threads mid-walk; the stamps would then mix, so a
    capture that sees a newer stamp when it ends simply runs again.
    """
    cdef Capture c
    while True:
        c = _capture_once(outputs, salt)
        if c.stamp == _stamp:
            return c


cdef Capture _capture_once(list outputs, uint64_t salt):
    global _stamp
    cdef Capture c = Capture.__new__(Capture)
    cdef _Table numbering        # value number of (hash, input indices) -> canonical index
    cdef list nodes = [], ins = [], params = [], values = [], outs = []
    cdef list stack = []
    cdef Node n, child, other
    cdef uint64_t h = mix(0x1a2b3c4d, salt)
    cdef uint64_t stamp, vn
    cdef Py_ssize_t idx, k, pos
    cdef bint ready
    _table_init(&numbering, 32)
    _stamp += 1
    stamp = _stamp
    try:
        for root in outputs:
            stack.append(root)
            while stack:
                n = <Node>stack[len(stack) - 1]
                if n.seen == stamp:
                    stack.pop()
                    continue
                ready = True
                for child in n.inputs:
                    if child.seen != stamp:
                        stack.append(child)
                        ready = False
                if not ready:
                    continue
                stack.pop()
                n.seen = stamp
                if n.op == OP_DATA or n.op == OP_SCALAR:
                    n.index = len(nodes)
                    params.append(n.index)
                    values.append(n.value)
                    nodes.append(n)
                    ins.append(EMPTY)
                    h = mix(h, n.hash)
                    continue
                vn = n.hash
                for child in n.inputs:
                    vn = mix(vn, <uint64_t>child.index)
                vn = fmix(vn)
                pos = _table_find(&numbering, vn)
                k = numbering.slots[pos] - 1
                if k >= 0:
                    other = <Node>nodes[k]
                    if other.hash != n.hash or not _same_inputs(other, n):
                        k = -1  # a 64-bit collision: computed twice, still correct
                if k < 0:
                    k = len(nodes)
                    nodes.append(n)
                    ins.append(tuple([child.index for child in n.inputs]))
                    if numbering.slots[pos] == 0:
                        _table_put(&numbering, pos, vn, k)
                    h = mix(h, n.hash)
                    for child in n.inputs:
                        h = mix(h, <uint64_t>child.index)
                n.index = k
            n = <Node>root
            outs.append(n.index)
            h = mix(h, <uint64_t>n.index + 0x777)
    finally:
        free(numbering.keys)
        free(numbering.slots)
    c.nodes = nodes
    c.inputs = ins
    c.params = params
    c.values = values
    c.outputs = outs
    c.key = fmix(h)
    c.stamp = stamp
    return c


def pending_graph_size(list roots, Py_ssize_t limit):
    """How many distinct ops wait for a barrier in the graph behind ``roots``
    (nodes), counted up to ``limit``: the walk stops there, so its cost is
    bounded. Leaves (computed values, scalars) are neither counted nor
    walked through. Iterative, like capture: graphs are 10^5 nodes deep."""
    global _stamp
    cdef list stack = list(roots)
    cdef Node n, child
    cdef Py_ssize_t count = 0
    cdef uint64_t stamp
    _stamp += 1
    stamp = _stamp
    while stack and count < limit:
        n = <Node>stack.pop()
        if n.seen == stamp or n.op == OP_DATA or n.op == OP_SCALAR or n.op == OP_CONST:
            continue
        n.seen = stamp
        count += 1
        for child in n.inputs:
            if child.seen != stamp:
                stack.append(child)
    return count


def bind_results(list nodes, list values, bint device_values=False):
    """Each computed node becomes a data leaf holding its (now read-only) value,
    which releases the graph behind it. With ``device_values`` (a backend that
    keeps results on its device) a value may be that backend's array."""
    cdef Py_ssize_t i
    cdef object value
    if len(values) != len(nodes):
        raise RuntimeError(f"lazyrt internal: {len(nodes)} outputs requested, "
                           f"{len(values)} computed")
    for i in range(len(nodes)):
        value = values[i]
        if cnp.PyArray_Check(value):
            cnp.PyArray_CLEARFLAGS(<cnp.ndarray>value, cnp.NPY_ARRAY_WRITEABLE)
        elif not device_values:
            raise TypeError(f"lazyrt internal: a backend returned {type(value).__name__}, "
                            "not an ndarray")
        (<Node>nodes[i]).bind(value)
