"""Very long and very deep graphs: every pass over a graph is iterative (or
bounded), so a loop of a million ops computes on every backend, and the
automatic cut that keeps a barrier-free loop bounded fires only when the
pending graph is really that large.

The deep tests use real depth, far past Python's recursion limit, so a
recursive walk cannot pass them by accident. The cheap cut tests lower the
cut limit with ``lr.set_max_graph_nodes`` instead.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import lazyrt as lr
from conftest import skip_deep_graph_on_jax
from lazyrt import _recorder, backends, planner
from lazyrt.planner import fusion
from lazyrt._capture import capture
from lazyrt.graph import Graph

DEFAULT_MAX_GRAPH_NODES = int(os.environ.get("LAZYRT_MAX_GRAPH_NODES", 100_000))
CUT_LIMIT = 100_000       # ops per graph in the deep tests (the default cut limit)
CHAIN_OPS = 10 * CUT_LIMIT
DAG_DEPTH = 100_000


def _interpreted(backend) -> bool:
    return backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1"


def _depth(backend, n: int) -> int:
    """``n``, or a fifth of it on the interpreted Triton backend. Measured there
    at full size: the million-op chain took 225 s, the 100,000-deep DAG 66 s,
    the 99,999-op graph 54 s (the interpreter rewrites each of a graph's ~1000
    kernels' source, ~90 ms each, then runs them in Python). A fifth is still
    20 times Python's recursion limit deep; the compiled backends and the
    planner tests below run the full depth. Not on jax (see the skip's reason)."""
    skip_deep_graph_on_jax(backend)
    return n // 5 if _interpreted(backend) else n


# a recursive pass needs one Python frame per chained node or step: even the
# interpreted Triton backend's depth is far past what the interpreter allows
assert _depth("triton", DAG_DEPTH) >= 20 * sys.getrecursionlimit()


@pytest.fixture
def max_graph_nodes():
    """Set the cut limit for one test; the default is restored afterwards."""
    yield lr.set_max_graph_nodes
    lr.sync()
    lr.set_max_graph_nodes(DEFAULT_MAX_GRAPH_NODES)


def _cuts() -> int:
    return lr.metrics.snapshot()["graph_cuts"]


def _misses() -> int:
    return lr.metrics.snapshot()["cache_misses"]


# --- real depth ----------------------------------------------------------------

def test_a_million_op_chain_computes(backend, fresh_metrics, max_graph_nodes):
    limit, ops = _depth(backend, CUT_LIMIT), _depth(backend, CHAIN_OPS)
    max_graph_nodes(limit)
    x = lr.tensor(np.zeros(4, np.float32))
    for _ in range(ops):
        x = x + 1
    np.testing.assert_array_equal(x.numpy(), np.full(4, ops, np.float32))
    assert _cuts() == ops // limit  # each cut computed a graph `limit` ops deep


def test_a_100k_deep_dag_computes(backend, max_graph_nodes):
    # one graph, DAG_DEPTH deep, each value reading the two before it
    depth = _depth(backend, DAG_DEPTH)
    max_graph_nodes(2 * depth)
    a0, b0 = np.arange(4, dtype=np.int64), np.arange(4, dtype=np.int64) * 3 + 1
    a, b = lr.tensor(a0), lr.tensor(b0)
    for _ in range(depth):
        a, b = b, b - a
    # b_k = b_{k-1} - b_{k-2} repeats every 6 steps
    want_a, want_b = a0, b0
    for _ in range(depth % 6):
        want_a, want_b = want_b, want_b - want_a
    np.testing.assert_array_equal(b.numpy(), want_b)
    np.testing.assert_array_equal(a.numpy(), want_a)


def test_a_barrier_after_99999_ops_and_every_barrier_after_it_work(backend,
                                                                    fresh_metrics,
                                                                    max_graph_nodes):
    limit = _depth(backend, CUT_LIMIT)
    max_graph_nodes(limit)
    x = lr.tensor(np.zeros(4, np.float32))
    for _ in range(limit - 1):  # one op short of a cut
        x = x + 1
    want = np.full(4, limit - 1, np.float32)
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal((x + 1).numpy(), want + 1)
    assert _cuts() == 0


def test_a_million_op_chain_dropped_unsynced_is_freed(max_graph_nodes):
    # freeing the chain releases each node from its consumer's destructor:
    # without the interpreter's nesting guard that overflows the C stack
    max_graph_nodes(2 * CHAIN_OPS)
    x = lr.tensor(np.zeros(2, np.float32))
    for _ in range(CHAIN_OPS):
        x = x + 1
    del x
    gc.collect()
    assert not _recorder.any_live_pending()


def test_planning_a_chain_of_ten_thousand_steps(max_graph_nodes):
    # matmuls are steps of their own (BLAS on the C backend): a plan of 10,000
    # chained steps, ordered, merged and (for Triton) given matmul epilogues
    max_graph_nodes(10 ** 6)
    w = lr.tensor(np.eye(2, dtype=np.float32))
    x = lr.tensor(np.ones((2, 2), np.float32))
    for _ in range(5000):
        x = lr.maximum(x @ w, 0.5)
    graph = Graph.from_capture(capture([x._node]))
    del x  # never computed: released unread
    assert len(planner.plan(graph).steps) == 10_000
    fused = planner.plan(graph, planner.Capabilities(matmul_epilogue=True,
                                                     matmul_engine="a Triton matmul kernel"))
    assert len(fused.steps) == 5000 and all(s.epilogue is not None for s in fused.steps)


def _row_softmax_chain(x, layers):
    """``layers`` row softmaxes, each of the previous one's transpose."""
    for _ in range(layers):
        y = x.T
        e = lr.exp(y - y.max(axis=1, keepdims=True))
        x = e / e.sum(axis=1, keepdims=True)
    return x


def test_a_chain_of_replans_is_planned_in_one_attempt(max_graph_nodes, monkeypatch):
    # each layer's kernel finds a reduction it cannot fuse and asks for it to
    # be stored: the planner must not start the whole plan over each time
    max_graph_nodes(10 ** 6)
    x = _row_softmax_chain(lr.tensor(np.ones((4, 4), np.float32)), 300)
    graph = Graph.from_capture(capture([x._node]))
    del x
    attempts = []
    attempt = fusion._Planner._attempt
    monkeypatch.setattr(fusion._Planner, "_attempt",
                        lambda self: attempts.append(1) or attempt(self))
    the_plan = planner.plan(graph)
    assert len(attempts) == 2  # the first finds a replan; the probe finds the rest
    assert len(the_plan.unfused) >= 600  # two replans a layer


def test_a_replanned_chain_of_row_softmaxes_computes(backend, max_graph_nodes):
    # the planning test above goes deeper: here each layer's kernels compile
    layers = 12
    max_graph_nodes(10 ** 6)
    a = np.arange(24, dtype=np.float32).reshape(4, 6) / 24
    want = a
    for _ in range(layers):
        y = want.T
        e = np.exp(y - y.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
    got = _row_softmax_chain(lr.tensor(a), layers).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --- the automatic cut ---------------------------------------------------------

def test_reading_a_value_each_step_never_cuts(backend, fresh_metrics, empty_cache,
                                              max_graph_nodes):
    max_graph_nodes(30)
    x = lr.tensor(np.ones(1, np.float32))
    for _ in range(300):
        x = x * 0.5 + 1
        x.item()
    assert x.item() == 2.0
    assert _cuts() == 0 and lr.metrics.graph_cuts == 0
    assert _misses() == 1  # one program, reused every step


def test_a_pending_temporary_does_not_force_cuts(backend, fresh_metrics, empty_cache,
                                                 max_graph_nodes):
    # `half` stays pending after each read, but its graph is one op
    max_graph_nodes(30)
    x = lr.tensor(np.ones(1, np.float32))
    for _ in range(300):
        half = x * 0.5
        x = half + 1
        x.item()
    assert half.is_pending and x.item() == 2.0
    assert _cuts() == 0
    assert _misses() == 1


def test_results_dropped_unread_do_not_force_cuts(backend, fresh_metrics, max_graph_nodes):
    max_graph_nodes(100)
    x = lr.tensor(np.ones(4, np.float32))
    for _ in range(1000):
        x + 1
    assert _cuts() == 0


def test_cuts_are_counted_and_reported(backend, fresh_metrics, max_graph_nodes):
    max_graph_nodes(100)
    x = lr.tensor(np.zeros(2, np.float32))
    for _ in range(1000):
        x = x + 1
    assert _cuts() == 10 and lr.metrics.graph_cuts == 10
    assert not x.is_pending  # the tenth cut computed it
    assert x.tolist() == [1000.0, 1000.0]
    rows = [ln.split() for ln in lr.metrics.report().splitlines()]
    assert ["graph_cuts", "10"] in rows


def test_the_cuts_of_a_repeating_loop_reuse_one_program(backend, fresh_metrics,
                                                        empty_cache, max_graph_nodes):
    max_graph_nodes(100)
    x = lr.tensor(np.zeros(2, np.float32))
    for _ in range(1000):
        x = x + 1
    assert _cuts() == 10
    assert _misses() == 1
    assert x.tolist() == [1000.0, 1000.0]


def test_a_failed_cut_leaves_later_barriers_working(backend, fresh_metrics, empty_cache,
                                                    max_graph_nodes, monkeypatch):
    be = backends.get(backend)
    compile_for_real = be.compile
    failures = []

    def compile_failing_once(graph):
        if not failures:
            failures.append(graph)
            raise RuntimeError("injected compile failure")
        return compile_for_real(graph)

    monkeypatch.setattr(be, "compile", compile_failing_once)
    max_graph_nodes(50)
    x = lr.tensor(np.zeros(2, np.float32))
    done = 0
    with pytest.raises(RuntimeError, match="injected") as failure:
        for _ in range(100):
            x = x + 1
            done += 1
    if sys.version_info >= (3, 11):  # exception notes
        assert any("set_max_graph_nodes" in note for note in failure.value.__notes__)
    assert x.is_pending
    assert x.tolist() == [done, done]  # the next barrier computes what the cut could not
    for _ in range(200):
        x = x + 1
    assert x.tolist() == [done + 200, done + 200]
    assert _cuts() >= 4


@pytest.mark.parametrize("n", [0, -1, -(2 ** 70)])
def test_set_max_graph_nodes_rejects_a_limit_below_one(n):
    with pytest.raises(ValueError, match=r"set_max_graph_nodes.*at least 1"):
        lr.set_max_graph_nodes(n)


def test_a_negative_max_graph_nodes_in_the_environment_is_a_clear_error():
    env = dict(os.environ, LAZYRT_MAX_GRAPH_NODES="-5")
    run = subprocess.run([sys.executable, "-c", "import lazyrt"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "ValueError" in run.stderr and "LAZYRT_MAX_GRAPH_NODES" in run.stderr
    assert "OverflowError" not in run.stderr
