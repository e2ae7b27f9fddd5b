"""The ``numpy`` backend: runs a graph op by op with each op's NumPy reference.

It is the oracle every other backend is tested against, and needs no
compiler. One op is one kernel launch; its plan is one step per op, nothing
fused, and it compiles through the same path as every backend
(:func:`lazyrt.backends.base.compile_graph`), so its record reads like theirs.
"""
from __future__ import annotations

from time import perf_counter

import numpy as np

from .. import dtypes as D
from .. import ops
from ..compile_record import NOT_COMPILED
from .base import Built, compile_graph


class ReferencePlan:
    """One step per op (a node index), in graph order: nothing is fused."""

    def __init__(self, graph):
        self.graph = graph
        self.steps = tuple(i for i, n in enumerate(graph.nodes) if n.op.kind != ops.LEAF)
        self.number = {i: k for k, i in enumerate(self.steps)}
        self.nbytes = [_nbytes(n) for n in graph.nodes]
        self.unfused = ()

    def describe(self) -> str:
        nodes = self.graph.nodes
        lines = [f"plan: {len(self.steps)} steps, one per op (the numpy reference runs each "
                 "op's NumPy implementation; nothing is fused)"]
        for k, i in enumerate(self.steps):
            args = ", ".join(f"%{j}" for j in nodes[i].inputs)
            lines.append(f"step {k}: %{i} = {nodes[i].op.name}({args}) (NumPy)")
        return "\n".join(lines)


class ReferenceProgram:
    def __init__(self, graph, record):
        self.graph = graph
        self.record = record
        self.kernels = graph.n_ops

    def run(self, params, report=None):
        # NaN, inf and division by zero are values here, as in every compiled
        # backend: NumPy's RuntimeWarnings from inside lazyrt must not reach users
        with np.errstate(all="ignore"):
            return self._run(params, report)

    def _run(self, params, report):
        nodes = self.graph.nodes
        values = [None] * len(nodes)
        for i, v in zip(self.graph.params, params):
            values[i] = np.asarray(v, dtype=D.DTYPES[nodes[i].dtype])
        k = 0
        for i, n in enumerate(nodes):
            if n.op.kind == ops.LEAF:
                if n.op is ops.CONST:
                    values[i] = np.asarray(n.value, dtype=D.DTYPES[n.dtype])
                continue
            t0 = perf_counter() if report is not None else 0.0
            out = n.op.ref(*(values[j] for j in n.inputs), n.attrs)
            out = np.asarray(out)
            if out.dtype != D.DTYPES[n.dtype]:
                out = out.astype(D.DTYPES[n.dtype])
            if out.shape != n.shape:
                raise AssertionError(f"lazyrt internal: {n.op.name} made shape {out.shape}, "
                                     f"recorded {n.shape}")
            values[i] = out
            if report is not None:
                kernel = self.record.kernels[k]
                report(kernel.name, perf_counter() - t0, kernel.bytes_moved)
            k += 1
        return [values[i] for i in self.graph.outputs]


class ReferenceBackend:
    name = "numpy"
    device = "cpu"

    def compile(self, graph):
        _, _, record = compile_graph(self, graph, ReferencePlan, self._build)
        return ReferenceProgram(graph, record)

    @staticmethod
    def _build(i, the_plan) -> Built:
        node = the_plan.graph.nodes[i]
        sizes = the_plan.nbytes
        nbytes = sizes[i]
        for j in node.inputs:
            nbytes += sizes[j]
        name = node.op.name
        return Built(None, f"k{the_plan.number[i]}_{name}", (name,), f"{name} in NumPy",
                     "", "", NOT_COMPILED, nbytes)


def _nbytes(node) -> int:
    n = D.DTYPES[node.dtype].itemsize
    for d in node.shape:
        n *= d
    return n
