"""``lr.metrics``: the counters every stage reports to, the text report, and
where materializations came from (the user's file and line).
"""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import lazyrt as lr

KEYS = {"ops_recorded", "graphs_executed", "cache_hits", "cache_misses", "compiles",
        "kernel_launches", "materializations", "fallbacks", "materialized_at", "graph_cuts"}


def _line_here() -> int:
    return inspect.currentframe().f_back.f_lineno


def test_snapshot_has_every_counter(fresh_metrics):
    snap = lr.metrics.snapshot()
    assert KEYS <= set(snap)
    assert isinstance(snap["fallbacks"], dict) and isinstance(snap["materialized_at"], dict)
    for k in KEYS - {"fallbacks", "materialized_at"}:
        assert snap[k] == 0, k


def test_snapshot_is_a_copy(fresh_metrics):
    snap = lr.metrics.snapshot()
    (lr.tensor([1.0]) + 1).numpy()
    assert snap["graphs_executed"] == 0
    assert lr.metrics.snapshot()["graphs_executed"] == 1


def test_counters_count_what_happened(backend, fresh_metrics):
    x = lr.tensor(np.arange(4.0))
    y = lr.exp(x * 2) + 1          # 3 ops recorded
    assert lr.metrics.snapshot()["ops_recorded"] == 3
    y.numpy()
    (lr.exp(lr.tensor(np.ones(4)) * 2) + 1).numpy()
    snap = lr.metrics.snapshot()
    assert snap["graphs_executed"] == 2
    assert snap["materializations"] == 2
    assert snap["cache_hits"] + snap["cache_misses"] == 2
    assert snap["cache_hits"] >= 1
    assert snap["kernel_launches"] >= 2
    if backend == "numpy":
        assert snap["kernel_launches"] == 6  # one launch per op on the reference backend


def test_reset_zeroes_every_counter(backend):
    (lr.tensor([1.0]) * 3).numpy()
    lr.tensor(np.arange(3))[[0, 2]]
    lr.metrics.reset()
    snap = lr.metrics.snapshot()
    assert snap["fallbacks"] == {} and snap["materialized_at"] == {}
    assert all(v == 0 for k, v in snap.items() if not isinstance(v, dict))


def test_materialized_at_records_the_callers_line(backend, fresh_metrics):
    t = lr.tensor([1.0, 2.0]) * 2
    line = _line_here() + 1
    t.numpy()
    where = lr.metrics.snapshot()["materialized_at"]
    assert where == {f"{__file__}:{line}": 1}


def test_materialized_at_counts_each_barrier_site(backend, fresh_metrics):
    for _ in range(3):
        float((lr.tensor([1.0]) + 1)[0])
    line = _line_here() - 1
    (lr.tensor([2.0]) + 1).item()
    where = lr.metrics.snapshot()["materialized_at"]
    assert where[f"{__file__}:{line}"] == 3
    assert where[f"{__file__}:{line + 2}"] == 1
    assert sum(where.values()) == lr.metrics.snapshot()["materializations"] == 4


def test_fallbacks_are_counted_per_op(backend, fresh_metrics):
    t = lr.tensor(np.arange(6.0).reshape(2, 3))
    t[[0, 1], [1, 2]]
    t[np.array([1, 0]), np.array([2, 0])]
    t[[0, 1]]                                   # one index array: a lazy gather, no fallback
    assert lr.metrics.snapshot()["fallbacks"] == {"getitem[advanced]": 2}


def test_report_is_text_with_every_counter(backend, fresh_metrics):
    t = lr.tensor(np.arange(3.0)) + 1
    line = _line_here() + 1
    t.numpy()
    lr.tensor(np.ones((2, 2)))[[0], [1]]
    text = lr.metrics.report()
    assert isinstance(text, str)
    for key in KEYS - {"fallbacks", "materialized_at"}:
        assert key in text
    assert "graphs_executed" in text and any(
        ln.split()[-1] == "1" for ln in text.splitlines() if ln.startswith("graphs_executed"))
    assert f"test_metrics.py:{line}" in text
    assert "getitem[advanced]" in text


def test_graph_cuts_are_counted(backend, fresh_metrics):
    lr.set_max_graph_nodes(20)
    try:
        x = lr.tensor(np.zeros(2))
        for _ in range(50):
            x = x + 1
        assert lr.metrics.snapshot()["graph_cuts"] >= 2
        assert x.tolist() == [50.0, 50.0]
    finally:
        lr.sync()
        from test_memory import DEFAULT_MAX_GRAPH_NODES
        lr.set_max_graph_nodes(DEFAULT_MAX_GRAPH_NODES)


def test_materialized_at_names_the_demo_not_the_console_script(fresh_metrics, capsys,
                                                               monkeypatch):
    from lazyrt.cli import main
    # the demo, run in this process, sets the process's backend: put it back after,
    # or later tests on this worker run on the numpy interpreter
    monkeypatch.setattr(lr.runtime, "_default_backend", lr.runtime._default_backend)
    assert main(["demo", "--backend", "numpy"]) == 0
    lines = lr.metrics.snapshot()["materialized_at"]
    assert lines and all("demo.py:" in where for where in lines), lines


@pytest.mark.skipif("c" not in lr.available_backends(), reason="needs the c backend")
def test_demo_says_a_disk_cache_hit_is_not_a_compile(tmp_path):
    import subprocess
    import sys
    env = {**os.environ, "LAZYRT_CACHE_DIR": str(tmp_path), "COLUMNS": "200"}
    runs = [subprocess.run([sys.executable, "-m", "lazyrt.cli", "demo", "--backend", "c"],
                           env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    first, second = ([line for line in r.stdout.splitlines() if "first run" in line][0]
                     for r in runs)
    assert "compiled" in first and "disk cache" not in first
    assert "loaded from the disk cache" in second and "compiled" not in second
