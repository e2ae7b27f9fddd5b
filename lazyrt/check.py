"""Differential checking: every graph on a backend against the ``numpy`` oracle,
and a wrong result bisected to its kernel and op (``lazyrt check``).

Under a :class:`Checker`, each barrier's outputs are compared with what the
``numpy`` backend computes from the same parameters. The first graph that
disagrees is bisected on the backend under test, through public contracts
only (graphs, plans, compiled programs):

1. every value the plan keeps in a buffer is made a graph output too, so one
   run gives each step's result; the first step (in run order) whose result
   differs from the oracle's is the wrong kernel;
2. every node that kernel fuses is made an output, and the first node (in
   graph order) that differs is the wrong op. When every op is right on its
   own, only the fused kernel is wrong, and the report says so.

:func:`write_repro` saves a folder that reproduces the mismatch without the
user's program: the inputs as ``.npy``, the graph, the kernel's source and a
``repro.py``.

``$LAZYRT_TEST_BREAK_LOWERING=OP`` (tests only) makes ``OP``'s lowering on
every target wrong by one (:func:`install_test_fault`), so the test suite can
prove the bisection finds it; ``lazyrt check`` and ``repro.py`` honour it.
"""
from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass

import numpy as np

from . import dtypes as D
from . import ops
from .graph import GNode, Graph

FAULT_VARIABLE = "LAZYRT_TEST_BREAK_LOWERING"

#: default tolerances per dtype: (rtol, atol); integers and bools compare exactly
TOLERANCES = {"float16": (1e-2, 1e-3), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12),
              "bfloat16": (2e-2, 1e-2)}


def install_test_fault() -> str | None:
    """Break the lowering named by ``$LAZYRT_TEST_BREAK_LOWERING`` (every
    target's expression gets ``+ 1``): a test-only hook that gives ``lazyrt
    check`` a known wrong kernel to find. Returns the op's name, or None."""
    name = os.environ.get(FAULT_VARIABLE)
    if not name:
        return None
    by_name = {op.name: op for op in ops.OPS}
    if name not in by_name or not by_name[name].lower:
        raise ValueError(f"lazyrt: ${FAULT_VARIABLE}={name!r} names no op with a lowering")
    op = by_name[name]
    for target, lower in list(op.lower.items()):
        if getattr(lower, "broken_by_test", False):
            continue

        def broken(*args, _lower=lower):
            return f"(({_lower(*args)}) + 1)"
        broken.broken_by_test = True
        op.lower[target] = broken
    return name


# --- comparing ---------------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    """How far one computed value is from the oracle's."""
    max_abs: float
    max_rel: float
    wrong: int            # elements outside the tolerance
    size: int
    shape_note: str = ""  # set when shapes or dtypes already differ

    def __str__(self):
        if self.shape_note:
            return self.shape_note
        return (f"max abs error {self.max_abs:.4g}, max rel error {self.max_rel:.4g}, "
                f"{self.wrong} of {self.size} elements differ")


def compare(got, want, rtol=None, atol=None) -> Difference | None:
    """None when ``got`` matches ``want`` (NaN equals NaN; integers exactly;
    floats within ``rtol``/``atol``, by default :data:`TOLERANCES`)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return Difference(np.inf, np.inf, want.size, want.size,
                          f"{got.dtype}{list(got.shape)} where the oracle has "
                          f"{want.dtype}{list(want.shape)}")
    if want.dtype.kind not in "fc" and want.dtype.name not in TOLERANCES:  # bfloat16 is "V"
        wrong = got != want
        n = int(np.count_nonzero(wrong))
        if not n:
            return None
        err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))[wrong]))
        return Difference(err, np.inf, n, want.size)
    r, a = TOLERANCES.get(str(want.dtype), (1e-4, 1e-5))
    rtol = r if rtol is None else rtol
    atol = a if atol is None else atol
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(g - w)
        ok = (g == w) | (np.isnan(g) & np.isnan(w)) | (diff <= atol + rtol * np.abs(w))
        n = int(np.count_nonzero(~ok))
        if not n:
            return None
        bad = np.where(np.isnan(diff), np.inf, diff)[~ok]
        rel = bad / np.maximum(np.abs(w[~ok]), np.finfo(np.float64).tiny)
    return Difference(float(bad.max()), float(rel.max()), n, want.size)


# --- bisecting ----------------------------------------------------------------------

@dataclass
class Mismatch:
    """The first graph that disagrees with the oracle, bisected."""
    backend: str
    graph: object                 # lazyrt.graph.Graph
    params: list
    record: object                # the backend's CompileRecord
    output: int                   # first wrong output
    error: Difference
    graph_no: int | None = None
    site: str | None = None
    cause: str = ""
    kernel: object = None         # KernelRecord of the first wrong step, or None
    step: int | None = None
    op_node: int | None = None    # first wrong node, or None (only the fused kernel is wrong)
    op_error: Difference | None = None
    note: str = ""
    repro: str | None = None

    def lines(self) -> list:
        from .explain import short
        g = self.graph
        out_node = g.nodes[g.outputs[self.output]]
        where = f" at {short(self.site)} ({self.cause})" if self.site else ""
        lines = [f"graph {self.graph_no or '?'} ({g.key:016x}){where} disagrees with the "
                 f"numpy oracle on {self.backend}",
                 f"  output {self.output} {out_node.dtype_name}{list(out_node.shape)}: "
                 f"{self.error}"]
        if self.kernel is not None:
            what = self.kernel.comment or ", ".join(self.kernel.ops)
            lines.append(f"  first kernel that differs: {self.kernel.name} (step {self.step} "
                         f"of {len(self.record.kernels)}): {what}")
        if self.op_node is not None:
            n = g.nodes[self.op_node]
            args = ", ".join(f"%{j}" for j in n.inputs)
            lines.append(f"  first op that differs: %{self.op_node} = {n.op.name}({args}) : "
                         f"{n.dtype_name}{list(n.shape)} at {short(n.source)}: {self.op_error}")
        if self.note:
            lines.append(f"  {self.note}")
        if self.repro:
            lines.append(f"  repro: {self.repro} (python {os.path.join(self.repro, 'repro.py')})")
        return lines

    def __str__(self):
        return "\n".join(self.lines())


class CheckFailed(BaseException):
    """Stops the user's program at the first wrong graph (a BaseException, so
    the program's own ``except Exception`` does not swallow it)."""

    def __init__(self, mismatch: Mismatch):
        super().__init__(str(mismatch))
        self.mismatch = mismatch


def _with_outputs(graph, outputs) -> Graph:
    outputs = tuple(outputs)
    return Graph(graph.nodes, graph.params, outputs,
                 (graph.key ^ (hash(outputs) * 0x9E3779B97F4A7C15)) & (2 ** 64 - 1))


def _run(backend, graph, params):
    from . import backends
    return backends.get(backend).compile(graph).run(params)


def _written(step) -> list:
    """The buffers a plan step writes."""
    spec = getattr(step, "spec", None)
    if spec is not None:
        return [o.buffer for o in spec.outputs]
    bufs = [step.out] if hasattr(step, "out") else []
    epilogue = getattr(step, "epilogue", None)
    if epilogue is not None:
        bufs += [o.buffer for o in epilogue.outputs]
    return bufs


def step_nodes(graph, plan) -> list | None:
    """Per plan step: (the nodes it writes, the nodes it computes) — None for
    a plan that is not a list of kernel steps over buffers."""
    steps, buffers = getattr(plan, "steps", None), getattr(plan, "buffers", None)
    if steps is None or buffers is None or not steps or isinstance(steps[0], int):
        return None
    stored = {b.node for b in buffers}
    out = []
    for step in steps:
        written = sorted({buffers[b].node for b in _written(step)})
        fused, stack = set(), list(written)
        while stack:
            i = stack.pop()
            if i in fused or graph.nodes[i].op.kind == ops.LEAF:
                continue
            fused.add(i)
            stack.extend(j for j in graph.nodes[i].inputs if j not in stored)
        out.append((written, sorted(fused)))
    return out


def bisect(backend, graph, params, record, output, error, rtol=None, atol=None) -> Mismatch:
    """Find the first wrong kernel and op of ``graph`` on ``backend`` (see the
    module docstring)."""
    m = Mismatch(backend, graph, params, record, output, error)
    computed = [i for i, n in enumerate(graph.nodes) if n.op.kind != ops.LEAF]
    want = dict(zip(computed, _run("numpy", _with_outputs(graph, computed), params)))
    per_step = step_nodes(graph, record.plan)
    candidates = computed
    if per_step is not None:
        stored = sorted({i for written, _ in per_step for i in written if i in want})
        got = dict(zip(stored, _run(backend, _with_outputs(graph, stored), params)))
        for k, (written, fused) in enumerate(per_step):
            if any(compare(got[i], want[i], rtol, atol) for i in written if i in got):
                m.step, m.kernel = k, record.kernels[k]
                candidates = fused
                break
        else:  # each step alone is right: blame the step that writes the wrong output
            target = graph.outputs[output]
            for k, (written, fused) in enumerate(per_step):
                if target in written or target in fused:
                    m.step, m.kernel, candidates = k, record.kernels[k], fused
                    break
            m.note = ("with every buffered value also read out, each kernel agrees: the "
                      "difference comes from how this plan combines them")
    if candidates:
        got = dict(zip(candidates, _run(backend, _with_outputs(graph, candidates), params)))
        for i in candidates:
            d = compare(got[i], want[i], rtol, atol)
            if d is not None and graph.nodes[i].op.kind != ops.VIEW:
                m.op_node, m.op_error = i, d
                break
        else:
            m.note = (m.note or "each op agrees when its value is read out on its own: only "
                      "the fused kernel is wrong (look at its loop and index code)")
    return m


class Checker:
    """Compares every barrier with the ``numpy`` oracle (an Observer's checker)."""

    def __init__(self, rtol=None, atol=None):
        self.rtol, self.atol = rtol, atol
        self.oracles = {}       # graph key -> numpy program
        self.graphs_checked = set()
        self.runs_checked = 0

    def compare(self, event, program, params, results):
        record = program.record
        if record.backend == "numpy":
            return
        graph = record.graph
        oracle = self.oracles.get(graph.key)
        if oracle is None:
            from . import backends
            oracle = self.oracles[graph.key] = backends.get("numpy").compile(graph)
        expected = oracle.run(params)
        self.runs_checked += 1
        self.graphs_checked.add(graph.key)
        for k, (got, want) in enumerate(zip(results, expected)):
            d = compare(got, want, self.rtol, self.atol)
            if d is not None:
                m = bisect(record.backend, graph, list(params), record, k, d,
                           self.rtol, self.atol)
                if event is not None and event.graph is not None:
                    m.graph_no = event.graph.no
                if event is not None:
                    m.site, m.cause = event.site, event.cause
                raise CheckFailed(m)


# --- a standalone reproduction --------------------------------------------------------

def _plain(x):
    """Op-table entries as ``("__op__", name)``: what a pickle can hold."""
    if isinstance(x, ops.OpDef):
        return ("__op__", x.name)
    if isinstance(x, tuple):
        return tuple(_plain(v) for v in x)
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _unplain(x, by_name):
    if isinstance(x, tuple):
        if len(x) == 2 and x[0] == "__op__":
            return by_name[x[1]]
        return tuple(_unplain(v, by_name) for v in x)
    if isinstance(x, list):
        return [_unplain(v, by_name) for v in x]
    return x


def save_graph(graph, params, folder: str):
    """``graph.pkl`` (structure only: op names, dtypes, shapes, attributes),
    ``input_<k>.npy`` per tensor input and ``scalars.json``."""
    nodes = [(n.op.name, n.dtype, n.shape, n.inputs, _plain(n.attrs), n.value)
             for n in graph.nodes]
    with open(os.path.join(folder, "graph.pkl"), "wb") as f:
        pickle.dump({"nodes": nodes, "params": graph.params, "outputs": graph.outputs,
                     "key": graph.key}, f)
    scalars = {}
    for k, (i, v) in enumerate(zip(graph.params, params)):
        if graph.nodes[i].op is ops.SCALAR:
            scalars[str(k)] = v
        else:
            np.save(os.path.join(folder, f"input_{k}.npy"), np.asarray(v))
    with open(os.path.join(folder, "scalars.json"), "w") as f:
        json.dump(scalars, f)


def load_graph(folder: str) -> tuple:
    """``(graph, params)`` as :func:`save_graph` wrote them."""
    by_name = {op.name: op for op in ops.OPS}
    with open(os.path.join(folder, "graph.pkl"), "rb") as f:
        data = pickle.load(f)
    nodes = tuple(GNode(by_name[op], dtype, tuple(shape), tuple(inputs),
                        _unplain(attrs, by_name), value)
                  for op, dtype, shape, inputs, attrs, value in data["nodes"])
    graph = Graph(nodes, tuple(data["params"]), tuple(data["outputs"]), data["key"])
    with open(os.path.join(folder, "scalars.json")) as f:
        scalars = json.load(f)
    params = []
    for k, i in enumerate(graph.params):
        if str(k) in scalars:
            params.append(scalars[str(k)])
        else:
            a = np.load(os.path.join(folder, f"input_{k}.npy"))
            params.append(a.astype(D.DTYPES[nodes[i].dtype], copy=False))
    return graph, params


_REPRO = '''"""Reproduces a wrong result lazyrt check found, without the user's program.

    python repro.py [BACKEND]     (default: {backend})

Runs the saved graph (graph.txt, graph.pkl) on the saved inputs (input_*.npy,
scalars.json) on BACKEND and on the numpy oracle and prints how far each
output is off; exits 1 while they disagree. The kernel check blamed is
{kernel_file}.
"""
import os
import sys

import lazyrt as lr
from lazyrt import check

here = os.path.dirname(os.path.abspath(__file__))
check.install_test_fault()  # the test suite's injected fault, when it set one
graph, params = check.load_graph(here)
backend = sys.argv[1] if len(sys.argv) > 1 else {backend!r}
got = lr.backends.get(backend).compile(graph).run(params)
want = lr.backends.get("numpy").compile(graph).run(params)
wrong = 0
for k, (g, w) in enumerate(zip(got, want)):
    d = check.compare(g, w, {rtol!r}, {atol!r})
    print(f"output {{k}}: {{d or 'agrees with numpy'}}")
    wrong += d is not None
sys.exit(1 if wrong else 0)
'''


def write_repro(m: Mismatch, folder: str, rtol=None, atol=None) -> str:
    """Write the standalone reproduction of ``m`` into ``folder``; returns it."""
    os.makedirs(folder, exist_ok=True)
    save_graph(m.graph, m.params, folder)
    with open(os.path.join(folder, "graph.txt"), "w") as f:
        f.write(m.graph.describe() + "\n")
    kernel_file = "(none: the backend runs library code)"
    k = m.kernel
    if k is not None and k.source:
        ext = {"c": ".c", "triton": ".py"}.get(k.language, ".txt")
        kernel_file = k.name + ext
        with open(os.path.join(folder, kernel_file), "w") as f:
            f.write(k.source)
    with open(os.path.join(folder, "repro.py"), "w") as f:
        f.write(_REPRO.format(backend=m.backend, kernel_file=kernel_file, rtol=rtol, atol=atol))
    m.repro = folder
    with open(os.path.join(folder, "report.txt"), "w") as f:
        f.write(str(m) + "\n")
    return folder
