# cython: language_level=3, boundscheck=False, wraparound=False
"""Graph capture: the canonical program behind the tensors a barrier computes.

Runs on every barrier, so it is in Cython and walks the graph with marks
kept on the nodes themselves (no per-node dict of ids): a node belongs to
this capture when its ``seen`` stamp equals the capture's number.
"""
from libc.stdint cimport uint64_t
cimport cython

from lazyrt._recorder cimport Node, mix, fmix
from lazyrt import ops as _ops

cdef int OP_DATA = _ops.DATA.id
cdef int OP_SCALAR = _ops.SCALAR.id
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
    cdef readonly list outputs
    cdef readonly uint64_t key


cdef inline uint64_t _numbering_key(uint64_t h, tuple idxs):
    cdef Py_ssize_t i
    for i in idxs:
        h = mix(h, <uint64_t>i)
    return fmix(h)


def capture(list outputs, uint64_t salt=0):
    """Capture the graph behind ``outputs`` (a list of nodes)."""
    global _stamp
    cdef Capture c = Capture.__new__(Capture)
    cdef dict numbering = {}     # value number of (hash, input indices) -> canonical index
    cdef list nodes = [], ins = [], params = [], outs = []
    cdef list stack = []
    cdef Node n, child, other
    cdef uint64_t h = mix(0x1a2b3c4d, salt)
    cdef uint64_t stamp
    cdef Py_ssize_t idx, k
    cdef bint ready
    cdef tuple idxs
    cdef object vn, found
    _stamp += 1
    stamp = _stamp
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
            if n.op == OP_DATA or n.op == OP_SCALAR:
                idx = len(nodes)
                nodes.append(n)
                ins.append(EMPTY)
                params.append(idx)
                h = mix(h, n.hash)
                n.seen = stamp
                n.index = idx
                continue
            idxs = tuple([child.index for child in n.inputs])
            vn = _numbering_key(n.hash, idxs)
            found = numbering.get(vn)
            k = -1
            if found is not None:
                k = found
                other = <Node>nodes[k]
                if other.hash != n.hash or ins[k] != idxs:  # a 64-bit collision: no CSE
                    k = -1
            if k < 0:
                k = len(nodes)
                nodes.append(n)
                ins.append(idxs)
                if found is None:
                    numbering[vn] = k
                h = mix(h, n.hash)
                for idx in idxs:
                    h = mix(h, <uint64_t>idx)
            n.seen = stamp
            n.index = k
        n = <Node>root
        outs.append(n.index)
        h = mix(h, <uint64_t>n.index + 0x777)
    c.nodes = nodes
    c.inputs = ins
    c.params = params
    c.outputs = outs
    c.key = fmix(h)
    return c
