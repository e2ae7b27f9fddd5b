"""Planning time against graph size: ``python -m bench --suite planning``.

A barrier on a new graph plans it before anything compiles; the planner's
passes must grow with the graph, not faster. Each row captures a synthetic
graph of a given number of ops (recorded through the native API, never run)
and times ``lazyrt.planner.plan`` on it, for the C backend's capabilities and
for Triton's (matmul epilogues), so every pass runs: fusion with its replans
and the probe, sibling merges, epilogue folding, ordering, refusals.

* ``chain``: ``x = x + 1`` repeated: one long pointwise chain, cut into
  kernels by the policy's fused-depth limit.
* ``mixed``: blocks of a transposed row softmax (a replan per block), two
  sibling reductions over it, a running sum, a matmul with a bias and a GELU
  (an epilogue on Triton) and a residual add; every block's reductions are
  outputs, so the graph is wide as well as deep.

The table gives ops, planning time (wall and this process's CPU time, the
median of a few plans; one for the largest graphs) and CPU ms per 1000 ops:
flat across sizes means linear. With
torch installed, the ``lstm`` rows plan one training step of a two-layer
``nn.LSTM`` language model through ``lazyrt.torch`` at 10, 20 and 35 time
steps (the LSTM is unrolled per time step; its cell state is a pointwise chain
across steps, which the default policy recomputes in every kernel that needs
it until the fused-depth limit stores it, so its plans grow faster than its
graph: ms per 1000 ops rises until that limit is reached).
"""
from __future__ import annotations

import gc
import time

import numpy as np

from bench import report

PLOT_YLABEL = "ms per 1000 ops (lower is better)"
SIZES = (1_000, 3_000, 10_000, 30_000, 100_000)
QUICK_SIZES = (1_000, 3_000, 10_000)


def _capture(lr, *tensors):
    from lazyrt._capture import capture
    from lazyrt.graph import Graph
    return Graph.from_capture(capture([t._node for t in tensors]))


def chain_graph(lr, n_ops: int):
    x = lr.tensor(np.zeros((8, 16), np.float32))
    for _ in range(n_ops):
        x = x + 1
    return _capture(lr, x)


def mixed_graph(lr, n_ops: int):
    """Blocks of about 20 ops each (see the module docstring) up to ``n_ops``."""
    rng = np.random.default_rng(0)
    x = lr.tensor(rng.random((16, 16), dtype=np.float32))
    w = lr.tensor(rng.random((16, 16), dtype=np.float32))
    b = lr.tensor(rng.random(16, dtype=np.float32))
    outs, recorded = [], 0
    while recorded < n_ops:
        before = lr.metrics.snapshot()["ops_recorded"]
        y = x.T
        e = lr.exp(y - y.max(axis=1, keepdims=True))
        s = e / e.sum(axis=1, keepdims=True)
        outs += [s.sum(axis=0), s.max(axis=0), lr.cumulative_sum(s, axis=1)[:, -1]]
        h = s @ w + b
        x = x + 0.5 * h * (1 + lr.tanh(0.8 * h))
        recorded += lr.metrics.snapshot()["ops_recorded"] - before
    return _capture(lr, x, *outs)


def lstm_graph(steps: int):
    """One training step of a two-layer LSTM language model (embedding, nn.LSTM,
    linear decoder, NLL loss, SGD update) through lazyrt.torch, at ``steps``
    time steps: the graph the first barrier plans."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import lazyrt.torch as lt
    from lazyrt import backends

    class LanguageModel(nn.Module):
        def __init__(self, vocab=1000, width=200):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.rnn = nn.LSTM(width, width, 2, dropout=0.2)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens, state):
            out, state = self.rnn(self.embed(tokens), state)
            return F.log_softmax(self.head(out).flatten(0, 1), dim=1), state

    graphs = []
    ref = backends.get("numpy")
    compile_ = ref.compile
    ref.compile = lambda g: graphs.append(g) or compile_(g)
    try:
        import lazyrt as lr
        with lr.backend("numpy"):
            torch.manual_seed(0)
            model = lt.lazy(LanguageModel())
            tokens = torch.randint(0, 1000, (steps + 1, 20))
            state = tuple(torch.zeros(2, 20, 200, device="lazy") for _ in range(2))
            out, state = model(tokens[:-1].to("lazy"), state)
            F.nll_loss(out, tokens[1:].flatten().to("lazy")).backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-1.0)
            lt.mark_step()
    finally:
        ref.compile = compile_
    return graphs[0]


def _plan_ms(graph, caps, repeats: int) -> tuple:
    """Median wall and CPU milliseconds of planning ``graph`` (CPU time is what
    to compare on a machine others are using)."""
    from lazyrt import planner
    wall, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        planner.plan(graph, caps)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return float(np.median(wall)) * 1e3, float(np.median(cpu)) * 1e3


def run(repeats: int = 10, quick: bool = False) -> dict:
    import lazyrt as lr
    from lazyrt.planner import Capabilities
    caps = {"c": Capabilities(matmul_epilogue=False, matmul_engine="BLAS",
                              matmul_transposed_out=True, gather_in_kernels=True),
            "triton": Capabilities(matmul_epilogue=True, matmul_engine="a Triton matmul kernel",
                                   gather_in_kernels=True)}
    limit = lr.runtime._max_graph_nodes
    lr.set_max_graph_nodes(10 ** 7)  # one graph, however large: nothing is computed
    cases = [(kind, n, make) for kind, make in (("chain", chain_graph), ("mixed", mixed_graph))
             for n in (QUICK_SIZES if quick else SIZES)]
    rows, table = [], []
    try:
        graphs = [(kind, n, lambda make=make, n=n: make(lr, n)) for kind, n, make in cases]
        try:
            import torch  # noqa: F401
            graphs += [("lstm", s, lambda s=s: lstm_graph(s)) for s in (10, 20, 35)]
        except ImportError:
            report.console.print("[dim]torch not installed: no lstm rows[/dim]")
        for kind, size, make in graphs:
            graph = make()
            n_ops = graph.n_ops
            reps = 1 if n_ops > 20_000 else min(repeats, 3 if n_ops > 2_000 else repeats)
            for target, cap in caps.items():
                ms, cpu_ms = _plan_ms(graph, cap, reps)
                label = f"{kind} {size} steps" if kind == "lstm" else f"{kind} {size}"
                rows.append({"case": label, "impl": target, "ops": n_ops, "plan_ms": ms,
                             "plan_cpu_ms": cpu_ms, "ms_per_1k_ops": ms / n_ops * 1e3,
                             "cpu_ms_per_1k_ops": cpu_ms / n_ops * 1e3, "repeats": reps})
                table.append([label, target, n_ops, ms, cpu_ms, cpu_ms / n_ops * 1e3])
            del graph
    finally:
        lr.set_max_graph_nodes(limit)
    report.print_table("lazyrt planning time against graph size",
                       ["graph", "capabilities", "ops", "plan ms", "CPU ms",
                        "CPU ms per 1k ops"], table,
                       caption="flat ms per 1k ops across sizes = linear planning. Median of "
                               "up to 3 plans (1 above 20k ops); CPU time is this process's.")
    return {"rows": rows}


def series_for_plot(payload) -> dict:
    """{graph: {capabilities: ms per 1k ops}} for the bar chart."""
    series = {}
    for r in payload["rows"]:
        series.setdefault(r["case"], {})[r["impl"]] = r["cpu_ms_per_1k_ops"]
    return series
