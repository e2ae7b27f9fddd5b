"""Opaque steps on the host: the one implementation every backend shares.

A plan's :class:`~lazyrt.planner.OpaqueStep` is work the planner does not turn
into a loop: data movement (concat, setslice), indexed reads and writes
(gather, scatter_add), sorting and searching (sort, argsort, searchsorted). Backends read what it
does from its ``kind`` and run it here, on NumPy arrays: the C backend on its
buffers directly, the Triton backend on CPU tensors (zero copies) or after
copying a GPU operand to the host (where it has no device path for the kind).
Each kind runs the op table's NumPy reference, so its semantics live in one
place (``lazyrt/ops.py``).

>>> import numpy as np
>>> from lazyrt.backends import host
>>> host.KINDS
('concat', 'setslice', 'sort', 'argsort', 'searchsorted', 'gather', 'scatter_add')
"""
from __future__ import annotations

import numpy as np

from .. import ops

CONCAT = "concat"
SETSLICE = "setslice"
SORT = "sort"
ARGSORT = "argsort"
SEARCHSORTED = "searchsorted"
GATHER = "gather"            # the C and Triton backends run these two as their own
SCATTER_ADD = "scatter_add"  # kernels (codegen/c_gather.py, codegen/triton_gather.py)
KINDS = (CONCAT, SETSLICE, SORT, ARGSORT, SEARCHSORTED, GATHER, SCATTER_ADD)

#: the op table's reference implementation per kind: the semantics live in one place
_IMPLEMENTATION = {CONCAT: ops.CONCAT.ref, SETSLICE: ops.SETSLICE.ref,
                   SORT: ops.SORT.ref, ARGSORT: ops.ARGSORT.ref,
                   SEARCHSORTED: ops.SEARCHSORTED.ref, GATHER: ops.GATHER.ref,
                   SCATTER_ADD: ops.SCATTER_ADD.ref}


def concat_axis(step) -> int:
    """The axis a ``concat`` step joins along."""
    return step.attrs[0]


def run(step, inputs) -> np.ndarray:
    """The step's result from its operands (NumPy arrays, in step order). A
    ``gather`` or ``scatter_add`` with an index out of range raises IndexError."""
    try:
        implementation = _IMPLEMENTATION[step.kind]
    except KeyError:
        raise NotImplementedError(f"lazyrt internal: no host implementation for opaque step "
                                  f"{step.kind!r}; known: {KINDS}") from None
    return implementation(*inputs, step.attrs)
