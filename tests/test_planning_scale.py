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
from lazyrt.planner import schedule


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
