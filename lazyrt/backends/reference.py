"""The ``numpy`` backend: runs a graph op by op with each op's NumPy reference.

It is the oracle every other backend is tested against, and needs no
compiler. One op is one kernel launch.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops


class ReferenceProgram:
    def __init__(self, graph):
        self.graph = graph
        self.kernels = graph.n_ops

    def run(self, params):
        # NaN, inf and division by zero are values here, as in every compiled
        # backend: NumPy's RuntimeWarnings from inside lazyrt must not reach users
        with np.errstate(all="ignore"):
            return self._run(params)

    def _run(self, params):
        nodes = self.graph.nodes
        values = [None] * len(nodes)
        for i, v in zip(self.graph.params, params):
            values[i] = np.asarray(v, dtype=D.DTYPES[nodes[i].dtype])
        for i, n in enumerate(nodes):
            if n.op.kind == ops.LEAF:
                if n.op is ops.CONST:
                    values[i] = np.asarray(n.value, dtype=D.DTYPES[n.dtype])
                continue
            out = n.op.ref(*(values[j] for j in n.inputs), n.attrs)
            out = np.asarray(out)
            if out.dtype != D.DTYPES[n.dtype]:
                out = out.astype(D.DTYPES[n.dtype])
            if out.shape != n.shape:
                raise AssertionError(f"lazyrt internal: {n.op.name} made shape {out.shape}, "
                                     f"recorded {n.shape}")
            values[i] = out
        return [values[i] for i in self.graph.outputs]


class ReferenceBackend:
    name = "numpy"
    device = "cpu"

    def compile(self, graph):
        return ReferenceProgram(graph)
