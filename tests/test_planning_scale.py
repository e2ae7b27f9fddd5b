"""Planning time grows with the graph, not faster: each planner pass looks at
each kernel a bounded number of times, however many merges and replans a plan
takes. The tests count the work (calls of the per-kernel scans) rather than
time it, so they hold on a loaded machine and fail on a quadratic pass."""
from __future__ import annotations

import numpy as np

import lazyrt as lr
from lazyrt import planner
from lazyrt._capture import capture
from lazyrt.graph import Graph
from lazyrt.planner import fusion, kernel_builder, schedule


def _graph(*tensors) -> Graph:
    return Graph.from_capture(capture([t._node for t in tensors]))


def _siblings(n):
    """``n`` kernels over one domain, each reading x and a buffer of its own:
    they merge into one loop, one pair at a time."""
    x = lr.tensor(np.ones((4, 8), np.float32))
    outs = []
    for k in range(n):
        w = lr.tensor(np.full((4, 8), k, np.float32))
        outs.append((x * w + k).sum(axis=1))
    return _graph(*outs)


def test_sibling_merges_scan_each_kernel_body_once(monkeypatch):
    calls = []
    is_scan = schedule.is_scan
    monkeypatch.setattr(schedule, "is_scan", lambda spec: calls.append(1) or is_scan(spec))
    n = 60
    the_plan = planner.plan(_siblings(n))
    assert len(the_plan.kernels) == 1  # every sibling merged
    # a search from step 0 after each merge scanned every kernel again: n * n / 2
    assert len(calls) <= 2 * n


def test_sibling_merges_build_the_dependency_closure_once(monkeypatch):
    calls = []
    closures = schedule._closures
    monkeypatch.setattr(schedule, "_closures", lambda steps: calls.append(1) or closures(steps))
    assert len(planner.plan(_siblings(40)).kernels) == 1
    assert len(calls) == 1


def _row_softmax_chain(x, layers):
    """``layers`` row softmaxes, each of the previous one's transpose: each
    layer's kernel finds a reduction it cannot fuse and asks for it stored."""
    for _ in range(layers):
        y = x.T
        e = lr.exp(y - y.max(axis=1, keepdims=True))
        x = e / e.sum(axis=1, keepdims=True)
    return x


def test_the_attempt_after_the_probe_reuses_its_kernels(monkeypatch):
    builds, per_attempt = [], []
    build = kernel_builder.KernelBuilder.build
    monkeypatch.setattr(kernel_builder.KernelBuilder, "build",
                        lambda self: builds.append(self.root) or build(self))
    attempt = fusion._Planner._attempt

    def counted(self):
        before = len(builds)
        try:
            return attempt(self)
        finally:
            per_attempt.append(len(builds) - before)

    monkeypatch.setattr(fusion._Planner, "_attempt", counted)
    x = _row_softmax_chain(lr.tensor(np.ones((4, 4), np.float32)), 50)
    the_plan = planner.plan(_graph(x))
    del x
    assert len(per_attempt) == 2 and len(the_plan.kernels) == 101
    # the probe built every kernel with the replans known: the last attempt
    # built them all again (101), where it now takes the probe's
    assert per_attempt[-1] == 0


def test_a_kernel_with_nothing_to_rewrite_is_not_rebuilt(monkeypatch):
    from lazyrt.planner import passes
    added = []
    add = passes._Body.add
    monkeypatch.setattr(passes._Body, "add", lambda self, *a, **k: added.append(1) or
                        add(self, *a, **k))
    x = lr.tensor(np.ones((4, 8), np.float32))
    (spec,) = planner.plan(_graph(lr.exp(x * 2 + 1).sum(axis=1))).kernels
    assert added == []  # no power, no float16: each pass only looked
    assert passes.run(spec) is spec
    h = lr.tensor(np.ones(8, np.float16))
    (half,) = planner.plan(_graph(h * h)).kernels
    assert added and any(st.op is lr.ops.CAST for st in half.body)  # float16 is rounded


def test_a_merge_in_a_deep_graph_updates_only_what_it_changes(monkeypatch):
    # each block's two reductions are siblings that merge; everything before
    # them is a dependency of both, so nothing there gains a new dependent
    walked = []
    bits = schedule._bits
    monkeypatch.setattr(schedule, "_bits", lambda mask: (walked.append(k) or k
                                                         for k in bits(mask)))
    x = lr.tensor(np.ones((4, 8), np.float32))
    w = lr.tensor(np.ones((8, 8), np.float32))
    outs = []
    for _ in range(100):
        outs += [x.sum(axis=1), x.max(axis=1)]
        x = lr.tanh(x @ w)
    the_plan = planner.plan(_graph(x, *outs))
    assert sum(len(k.outputs) == 2 for k in the_plan.kernels) == 100  # the pairs merged
    # walking every dependency of the merged pair: ~100 * 300 / 2 steps
    assert len(walked) <= 4 * len(the_plan.steps)


def test_the_cycle_collector_rests_while_planning_and_only_then():
    import gc
    seen = []

    class Watching(planner.FusionPolicy):
        def merge_siblings(self, first, second):
            seen.append(gc.isenabled())
            return True

    x = lr.tensor(np.ones((4, 8), np.float32))
    assert gc.isenabled()
    planner.plan(_graph(x.sum(axis=1), x.max(axis=1)), policy=Watching())
    assert seen == [False] and gc.isenabled()
    gc.disable()  # a caller's choice is left as it was
    try:
        planner.plan(_graph(x.sum(axis=1), x.max(axis=1)), policy=Watching())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_planning_benchmark_graphs_plan():
    # bench/planning.py's graphs, at their smallest: the rows the suite times
    from bench import planning as bench
    for make in (bench.chain_graph, bench.mixed_graph):
        graph = make(lr, 300)
        assert graph.n_ops >= 300
        assert planner.plan(graph).kernels
