"""Laziness and the program cache, proved by ``lr.metrics``.

Nothing runs before a barrier; ``lr.sync(a, b, c)`` is one graph with common
subexpressions computed once; a program is compiled once per structure
(shape, dtype, op, baked constants) and reused on new data and new runtime
scalars.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyrt as lr
from conftest import assert_matches


def _snap():
    return lr.metrics.snapshot()


def _program(x, lr_scale=0.5):
    return lr.nn.relu(x * lr_scale + 1.0).sum(axis=-1)


# --- laziness ---------------------------------------------------------------------

def test_nothing_executes_before_a_barrier(backend, fresh_metrics):
    x = lr.tensor(np.arange(12.0).reshape(3, 4))
    y = (x * 2 + 1).T.reshape(-1)[::2]
    z = lr.exp(y).sum() + lr.nn.softmax(x).max()
    assert y.is_pending and z.is_pending
    assert y.shape == (6,) and z.dtype == np.float64 and z.shape == ()
    snap = _snap()
    assert snap["graphs_executed"] == 0
    assert snap["kernel_launches"] == 0
    assert snap["materializations"] == 0
    assert snap["ops_recorded"] > 5


@pytest.mark.parametrize("barrier", ["numpy", "item", "tolist", "asarray", "repr", "str",
                                     "bool", "float", "int", "index", "format"])
def test_each_barrier_computes_once(backend, fresh_metrics, barrier):
    t = lr.tensor(np.int64(3)) * 2
    assert _snap()["graphs_executed"] == 0
    observe = {
        "numpy": lambda: t.numpy(), "item": t.item, "tolist": t.tolist,
        "asarray": lambda: np.asarray(t), "repr": lambda: repr(t), "str": lambda: str(t),
        "bool": lambda: bool(t), "float": lambda: float(t), "int": lambda: int(t),
        "index": lambda: [10, 11, 12, 13, 14, 15, 16][t], "format": lambda: f"{t:d}",
    }[barrier]
    result = observe()
    assert _snap()["graphs_executed"] == 1
    assert not t.is_pending
    expected = {"numpy": np.int64(6), "item": 6, "tolist": 6, "asarray": np.int64(6),
                "repr": None, "str": "6", "bool": True, "float": 6.0, "int": 6, "index": 16,
                "format": "6"}[barrier]
    if barrier == "repr":
        assert "6" in result and "int64" in result
    elif isinstance(expected, np.generic):
        assert_matches(result, expected)
    else:
        assert result == expected and type(result) is type(expected)
    observe()
    assert _snap()["graphs_executed"] == 1  # a computed value is not recomputed


def test_sync_of_several_tensors_is_one_graph(backend, fresh_metrics):
    x = lr.tensor(np.arange(6.0))
    a = x * 2
    b = a + 1
    c = lr.exp(a) - b
    lr.sync(a, b, c)
    snap = _snap()
    assert snap["graphs_executed"] == 1
    assert not (a.is_pending or b.is_pending or c.is_pending)
    v = np.arange(6.0)
    assert_matches(c, np.exp(v * 2) - (v * 2 + 1))
    assert _snap()["graphs_executed"] == 1  # reading computed values runs nothing


def test_common_subexpressions_are_computed_once(fresh_metrics):
    with lr.backend("numpy"):
        x = lr.tensor(np.arange(4.0))
        # built twice, structurally identical: mul, add, exp (3 distinct ops)
        a = lr.exp(x * x + x)
        b = lr.exp(x * x + x)
        lr.sync(a, b)
        assert _snap()["kernel_launches"] == 3
    assert_matches(a, np.exp(np.arange(4.0) ** 2 + np.arange(4.0)))
    assert_matches(b, a.numpy())


def test_shared_subexpression_is_not_recomputed_in_one_graph(fresh_metrics):
    with lr.backend("numpy"):
        x = lr.tensor(np.arange(4.0))
        h = lr.tanh(x * 3)                # 2 ops
        outs = [h + 1, h * 2, h - 3]      # 3 ops
        lr.sync(*outs)
        assert _snap()["kernel_launches"] == 5
        assert _snap()["graphs_executed"] == 1


def test_sync_without_arguments_computes_every_live_pending_tensor(backend, fresh_metrics):
    x = lr.tensor(np.ones(3))
    pending = [x + i for i in range(4)]
    lr.sync()
    assert all(not t.is_pending for t in pending)
    assert _snap()["graphs_executed"] == 1
    for i, t in enumerate(pending):
        assert_matches(t, np.ones(3) + i)


def test_mark_step_is_a_full_barrier(backend, fresh_metrics):
    x = lr.tensor(np.ones(2)) * 5
    lr.mark_step()
    assert not x.is_pending
    lr.mark_step()  # nothing pending: nothing runs
    assert _snap()["graphs_executed"] == 1


def test_already_computed_tensors_are_not_recomputed(backend, fresh_metrics):
    y = lr.tensor(np.arange(3.0)) + 1
    y.numpy()
    y.numpy()
    float(y[0])
    lr.sync(y)
    assert _snap()["materializations"] >= 2
    # y itself computed once; y[0] is a new (one-op) graph on y's stored value
    assert _snap()["graphs_executed"] == 2


def test_materialized_tensor_releases_its_graph(backend):
    x = lr.tensor(np.arange(3.0))
    y = (x + 1) * 2
    y.numpy()
    assert not y.is_pending and y._node.inputs == ()
    assert_matches(y + 1, np.array([3.0, 5.0, 7.0]))


# --- program cache ----------------------------------------------------------------

def test_same_program_on_new_data_compiles_once(backend, fresh_metrics, empty_cache):
    rng = np.random.default_rng(0)
    for step in range(5):
        data = rng.standard_normal((4, 8))
        out = _program(lr.tensor(data))
        assert_matches(out, np.maximum(data * 0.5 + 1.0, 0).sum(axis=-1))
    snap = _snap()
    assert snap["cache_misses"] == 1
    assert snap["cache_hits"] == 4
    assert snap["compiles"] <= 1 or backend == "numpy"


def test_new_shape_is_a_cache_miss(backend, fresh_metrics, empty_cache):
    _program(lr.tensor(np.ones((4, 8)))).numpy()
    _program(lr.tensor(np.ones((4, 9)))).numpy()
    _program(lr.tensor(np.ones((4, 8)))).numpy()
    assert _snap()["cache_misses"] == 2
    assert _snap()["cache_hits"] == 1


def test_changed_python_scalar_hits_cache(backend, fresh_metrics, empty_cache):
    data = np.linspace(-2, 2, 8)
    for scale in (0.5, 0.25, 3.0, -1.0):
        out = _program(lr.tensor(data), scale)
        assert_matches(out, np.maximum(data * scale + 1.0, 0).sum(axis=-1))
    assert _snap()["cache_misses"] == 1
    assert _snap()["cache_hits"] == 3


def test_changed_int_scalar_hits_cache_and_gives_new_result(backend, fresh_metrics,
                                                            empty_cache):
    data = np.arange(5, dtype=np.int32)
    for k in range(1, 5):
        assert_matches(lr.tensor(data) * k + k, data * k + k)
    assert _snap()["cache_misses"] == 1


def test_changed_full_fill_value_hits_cache(backend, fresh_metrics, empty_cache):
    for v in (1.0, 2.5, -3.0):
        assert_matches(lr.full((2, 3), v) + 1, np.full((2, 3), v) + 1)
    assert _snap()["cache_misses"] == 1


def test_dtype_change_is_a_cache_miss(backend, fresh_metrics, empty_cache):
    _program(lr.tensor(np.ones(4, np.float32))).numpy()
    _program(lr.tensor(np.ones(4, np.float64))).numpy()
    assert _snap()["cache_misses"] == 2


def test_exponents_are_baked_into_the_key(backend, fresh_metrics, empty_cache):
    data = np.arange(4.0)
    x = lr.tensor(data)
    assert_matches(x ** 2, data ** 2)
    assert_matches(x ** 3, data ** 3)
    assert_matches(lr.tensor(data) ** 2, data ** 2)
    assert _snap()["cache_misses"] == 2
    assert _snap()["cache_hits"] == 1


def test_different_ops_or_wiring_are_different_programs(backend, fresh_metrics, empty_cache):
    a, b = lr.tensor(np.arange(3.0)), lr.tensor(np.ones(3))
    assert_matches(a + a, np.arange(3.0) * 2)     # one parameter used twice
    assert_matches(a + b, np.arange(3.0) + 1)     # two parameters
    assert_matches(a - b, np.arange(3.0) - 1)
    assert _snap()["cache_misses"] == 3
    # fresh parameters in swapped roles are the same program, fed in another order
    assert_matches(b - a, 1 - np.arange(3.0))
    assert_matches(lr.tensor(np.ones(3)) + lr.tensor(np.ones(3)), np.full(3, 2.0))
    assert _snap()["cache_misses"] == 3


def test_sync_of_same_outputs_in_new_loop_hits_cache(backend, fresh_metrics, empty_cache):
    for step in range(3):
        x = lr.tensor(np.full(3, float(step)))
        a, b = x + 1, x * 2
        lr.sync(a, b)
        assert_matches(a, np.full(3, step + 1.0))
        assert_matches(b, np.full(3, step * 2.0))
    assert _snap()["cache_misses"] == 1 and _snap()["cache_hits"] == 2


def test_program_cache_is_bounded_lru(backend):
    from lazyrt.runtime import ProgramCache
    cache = ProgramCache(2)
    cache.put(1, "a")
    cache.put(2, "b")
    assert cache.get(1) == "a"       # 1 is now the most recent
    cache.put(3, "c")                # evicts 2
    assert cache.get(2) is None and cache.get(1) == "a" and cache.get(3) == "c"
    assert len(cache) == 2


def test_backend_context_restores_previous_backend(backend):
    from lazyrt.runtime import current_backend_name
    assert current_backend_name() == backend
    with lr.backend("numpy"):
        assert current_backend_name() == "numpy"
    assert current_backend_name() == backend


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(lr.BackendError, match="no_such_backend"):
        with lr.backend("no_such_backend"):
            pass


@pytest.mark.parametrize(("gpu", "cc", "expected"), [(True, True, "triton"), (False, True, "c"),
                                                      (False, False, "numpy")])
def test_default_backend_prefers_a_gpu_then_a_c_compiler(monkeypatch, gpu, cc, expected):
    from lazyrt import backends, runtime
    from lazyrt.backends import triton as triton_backend
    monkeypatch.setattr(triton_backend, "cuda_device_present", lambda: gpu)
    monkeypatch.setattr(backends, "available_backends",
                        lambda: ["numpy", "c"] if cc else ["numpy"])
    monkeypatch.delenv("LAZYRT_BACKEND", raising=False)
    monkeypatch.setattr(runtime, "_default_backend", None)
    if expected == "numpy":  # a fallback is never silent (once per process)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", lr.PerformanceWarning)
            assert runtime.default_backend_name() == expected
    else:
        assert runtime.default_backend_name() == expected


def test_lazyrt_backend_variable_overrides_the_default(monkeypatch):
    from lazyrt import runtime
    monkeypatch.setenv("LAZYRT_BACKEND", "numpy")
    monkeypatch.setattr(runtime, "_default_backend", None)
    assert runtime.default_backend_name() == "numpy"


def test_threads_recording_and_syncing_shared_graphs_get_correct_results(backend):
    """Kernels release the GIL: threads running one cached program at once must not
    share its scratch buffers, and concurrent captures must not mix their marks."""
    import threading
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 300)).astype(np.float32)
    shared = lr.tensor(a)
    errors = []

    def work(seed):
        scale = float(seed + 1)
        try:
            for _ in range(20):
                x = shared * scale
                y = lr.nn.softmax(x, axis=-1) + lr.nn.softmax(x + 1.0, axis=-1)  # scratch
                z = (x - x.mean(axis=-1, keepdims=True)).sum(axis=0)
                lr.sync(y, z)
                xs = a * scale
                e = np.exp(xs - xs.max(-1, keepdims=True))
                sm = e / e.sum(-1, keepdims=True)
                np.testing.assert_allclose(y.numpy(), 2 * sm, rtol=1e-4, atol=1e-6)
                np.testing.assert_allclose(z.numpy(), (xs - xs.mean(-1, keepdims=True)).sum(0),
                                           rtol=1e-3, atol=1e-3)
        except Exception as exc:  # reported below, with the thread's seed
            errors.append((seed, exc))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
