"""Opaque steps on the host: the one implementation every backend shares.

A plan's :class:`~lazyrt.planner.schedule.OpaqueStep` (concat, setslice) is data
movement the planner does not turn into a loop. Backends see it as a step
with a :func:`kind` and run it here, on NumPy arrays, rather than reaching
into the op table (this module is the one place that does): the C backend on its buffers directly, the Triton backend
on CPU tensors (zero copies) or after copying a GPU operand to the host
(where it has no device path for the kind).

>>> import numpy as np
>>> from lazyrt.backends import host
>>> host.KINDS
('concat', 'setslice')
"""
from __future__ import annotations

import numpy as np

from .. import ops

CONCAT = "concat"
SETSLICE = "setslice"
KINDS = (CONCAT, SETSLICE)

_BY_OP = {ops.CONCAT.id: CONCAT, ops.SETSLICE.id: SETSLICE}


def kind(step) -> str:
    """``"concat"`` or ``"setslice"``: what an opaque step does."""
    try:
        return _BY_OP[step.op.id]
    except KeyError:
        raise NotImplementedError(f"lazyrt internal: no host implementation for opaque op "
                                  f"{step.op.name!r}; known: {KINDS}") from None


def concat_axis(step) -> int:
    """The axis a ``concat`` step joins along."""
    return step.attrs[0]


def run(step, inputs) -> np.ndarray:
    """The step's result from its operands (NumPy arrays, in step order): the
    op table's reference implementation, so the semantics live in one place."""
    kind(step)  # an opaque op without a host implementation fails by name
    return step.op.ref(*inputs, step.attrs)
