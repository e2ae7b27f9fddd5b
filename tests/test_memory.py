"""Memory stays bounded in long loops: computed tensors release their graphs,
and a loop that never reaches a barrier is cut automatically.

``LAZYRT_MEMORY_STEPS`` (default 100000) sets the long loops' length.
"""
from __future__ import annotations

import gc
import os
import tracemalloc

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import _recorder, runtime
from conftest import assert_matches, skip_deep_graph_on_jax

STEPS = int(os.environ.get("LAZYRT_MEMORY_STEPS", 100_000))


def _steps(backend, n):
    """Loop length for ``backend``: the interpreted Triton backend runs each
    kernel in Python (~ms), so it gets a fiftieth of the steps; the numpy and
    c backends run the full 10^5-step loops."""
    if backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1":
        return max(200, n // 50)
    return n
DEFAULT_MAX_GRAPH_NODES = int(os.environ.get("LAZYRT_MAX_GRAPH_NODES", 100_000))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _expected_after(steps, start=1.0):
    # x -> x * 0.5 + 1 converges to 2; float32, step by step as lazyrt computes it
    x = np.full(16, start, np.float32)
    for _ in range(min(steps, 200)):
        x = x * np.float32(0.5) + np.float32(1)
    return x


@pytest.fixture
def max_graph_nodes():
    """Set the cut threshold for one test; the default is restored afterwards."""
    def set_to(n):
        lr.set_max_graph_nodes(n)
    yield set_to
    lr.sync()
    lr.set_max_graph_nodes(DEFAULT_MAX_GRAPH_NODES)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_long_loop_with_a_barrier_each_step_does_not_grow_memory(backend):
    x = lr.tensor(np.ones(16, np.float32))

    def step(i):
        nonlocal x
        x = x * 0.5 + 1
        if i % 2:
            x.numpy()
        else:
            lr.sync()

    steps = _steps(backend, STEPS)
    warmup = min(2000, steps // 10)
    for i in range(warmup):
        step(i)
    gc.collect()
    before, cached = _rss_bytes(), len(runtime.program_cache)
    for i in range(warmup, steps):
        step(i)
    gc.collect()
    grown = _rss_bytes() - before
    assert grown < 16 * 2 ** 20, f"RSS grew by {grown / 2 ** 20:.1f} MiB over {steps} steps"
    assert len(runtime.program_cache) == cached     # one program, reused every step
    assert not x.is_pending and x._node.inputs == ()
    assert_matches(x, _expected_after(steps))


def test_loop_with_barriers_keeps_no_python_objects_alive(backend):
    x = lr.tensor(np.ones(16, np.float32))
    for _ in range(500):
        x = x * 0.5 + 1
        x.numpy()
    gc.collect()
    tracemalloc.start()
    try:
        first = tracemalloc.take_snapshot()
        for _ in range(_steps(backend, 3000)):
            x = x * 0.5 + 1
            x.numpy()
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(first,
                                                                               "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes retained over 3000 steps"


def test_loop_that_materializes_every_step_is_never_cut(backend, fresh_metrics,
                                                         max_graph_nodes):
    max_graph_nodes(50)
    x = lr.tensor(np.ones(16, np.float32))
    for _ in range(100):
        x = x * 0.5 + 1
        x.numpy()
    assert_matches(x, _expected_after(100))
    assert lr.metrics.snapshot()["graph_cuts"] == 0


def test_loop_that_never_syncs_is_cut_automatically(backend, fresh_metrics, max_graph_nodes):
    max_graph_nodes(64)
    x = lr.tensor(np.ones(16, np.float32))
    for _ in range(1000):
        x = x * 0.5 + 1
    snap = lr.metrics.snapshot()
    assert snap["graph_cuts"] > 0
    assert snap["graph_cuts"] >= 2000 // 64 - 1
    assert_matches(x, _expected_after(1000))


def test_cut_computes_every_live_tensor_correctly(backend, fresh_metrics, max_graph_nodes):
    max_graph_nodes(10)
    a = lr.tensor(np.arange(4.0))
    history = []
    for i in range(30):
        a = a + i
        history.append(a)
    assert lr.metrics.snapshot()["graph_cuts"] > 0
    expected = np.arange(4.0)
    for i, t in enumerate(history):
        expected = expected + i
        assert_matches(t, expected)


def test_pending_tensors_are_released_when_dropped(backend):
    lr.sync()
    before = len(_recorder.live_pending())
    xs = [lr.tensor(np.ones(2)) + i for i in range(50)]
    assert len(_recorder.live_pending()) == before + 50
    del xs
    gc.collect()
    assert len(_recorder.live_pending()) == before


def test_very_long_unsynced_chain_computes_without_recursion_error(backend, max_graph_nodes):
    skip_deep_graph_on_jax(backend)
    max_graph_nodes(10 ** 7)
    x = lr.tensor(np.ones(16, np.float32))
    chain = max(2_000, _steps(backend, 10_000))  # deeper than Python's recursion limit
    for _ in range(chain):
        x = x * 0.5 + 1
    assert_matches(x, _expected_after(chain))
    y = lr.tensor(np.ones(4))
    for _ in range(20_000):
        y = y + 1
    del y  # dropping a deep pending chain must not overflow the C stack
    gc.collect()


def test_materialized_at_stays_bounded_in_a_loop(backend, fresh_metrics):
    x = lr.tensor(np.ones(3))
    for _ in range(300):
        x = x + 1
        x.numpy()
    where = lr.metrics.snapshot()["materialized_at"]
    assert sum(where.values()) == 300 and len(where) == 1


def test_recorded_nodes_are_outside_the_cyclic_collector():
    """Graph nodes are freed by reference counting alone (a DAG of numbers, arrays
    and older nodes: no cycle): Python's collector does not track them, so a
    thousand-op step does not start its collections (a tracked node count made the
    benchmark transformer's step run a young-generation pass each step, and a
    full pass over torch's ~300k objects, 130 ms, every few hundred steps)."""
    x = lr.tensor(np.ones(4))
    ys = [x * float(i) + 1.0 for i in range(20)]
    nodes = [y._node for y in ys] + [y._node.inputs[0] for y in ys]
    assert nodes and not any(gc.is_tracked(n) for n in nodes)
    before = gc.get_count()[0]
    chain = x
    for i in range(2_000):
        chain = chain + 1.0
    # the tensors in the chain die as they are replaced: only nodes (untracked) and
    # their small tuples stay alive, far fewer tracked objects than ops recorded
    assert gc.get_count()[0] - before < 1_000
    lr.sync(chain)


def test_a_dropped_graph_is_freed_without_the_cyclic_collector():
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        def record_and_drop():
            y = lr.tensor(np.ones(64))
            for i in range(1_000):
                y = y * 1.0001 + 1.0
            del y
        record_and_drop()
        first = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            record_and_drop()
        grown = tracemalloc.get_traced_memory()[0] - first
    finally:
        tracemalloc.stop()
        gc.enable()
    assert grown < 200_000, f"{grown} bytes kept by 20 dropped 2000-op graphs"
