"""Golden fusion tests: kernel COUNT and minimal BYTES MOVED per pattern.

A fusion regression (an extra kernel, an intermediate written to memory, a
copy for a view) fails here, before any benchmark notices. Each pattern is
planned straight from its captured graph (no backend involved), then run on
``c`` and compared with NumPy.

Shapes are (64, 128) float32: N = 8192 elements, 4 bytes each.

Documented behaviour asserted here (not obvious from the issue):

* ``(x.T + 1).reshape(-1)``: the reshape of a transposed (non-contiguous)
  result cannot be folded into an index map, so the planner realizes the
  ``add`` itself as a contiguous buffer — its reason says "reshape of a
  non-contiguous view needs a copy" — and the flat result is then a free view
  of that buffer. No separate copy kernel exists: still ONE kernel, reading x
  once (transposed) and writing once, bytes == 2 * 4 * N.
* matmul + bias + gelu on ``c``: one BLAS MatmulStep, then one kernel that
  reads the product, the bias and writes the result; the product buffer is
  listed in ``unfused`` with the reason "matmul runs in BLAS...".
"""
from __future__ import annotations

import math
import os
import shutil

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import _recorder as R
from lazyrt._capture import capture
from lazyrt.graph import Graph
from lazyrt.planner import KernelStep, MatmulStep, plan

from conftest import assert_matches

SHAPE = (64, 128)
N = SHAPE[0] * SHAPE[1]
F32 = 4

HAVE_C = "c" in lr.available_backends()
needs_c = pytest.mark.skipif(not HAVE_C, reason="no C compiler: the c backend is unavailable")


def plan_of(*outs):
    """The fusion plan of ``outs`` captured together (they stay pending)."""
    return plan(Graph.from_capture(capture([t._node for t in outs])))


def kernel_steps(p):
    return [s for s in p.steps if isinstance(s, KernelStep)]


def total_bytes(p):
    return sum(k.bytes_moved() for k in p.kernels)


def rng_arrays(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    w = rng.standard_normal(SHAPE[1]).astype(np.float32)
    b = rng.standard_normal(SHAPE[1]).astype(np.float32)
    return x, w, b


def erf_np(a):
    return np.vectorize(math.erf, otypes=[np.float64])(a)


# --- patterns ----------------------------------------------------------------
# Each pattern: fn(lazy inputs) -> tuple of lazy outputs, ref(numpy inputs) ->
# tuple of expected arrays (float64 math, compared in float32 tolerance).

def chain(x):
    return (lr.maximum(x * 2 + 1, 0) * 0.5 - x,)


def chain_ref(x):
    return (np.maximum(x * 2 + 1, 0) * 0.5 - x,)


def gelu_ref(x):
    x = x.astype(np.float64)
    return (0.5 * x * (1 + erf_np(x / math.sqrt(2))),)


def softmax_ref(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True),)


def log_softmax_ref(x):
    s = x - x.max(1, keepdims=True)
    return (s - np.log(np.exp(s).sum(1, keepdims=True)),)


def layer_norm_ref(x, w, b):
    x = x.astype(np.float64)
    mu = x.mean(1, keepdims=True)
    var = x.var(1, keepdims=True)
    return ((x - mu) / np.sqrt(var + 1e-5) * w + b,)


PATTERNS = {
    "chain": (chain, chain_ref),
    "tanh": (lambda x: (lr.tanh(x),), lambda x: (np.tanh(x),)),
    "gelu": (lambda x: (lr.nn.gelu(x),), gelu_ref),
    "softmax": (lambda x: (lr.nn.softmax(x, axis=1),), softmax_ref),
    "log_softmax": (lambda x: (lr.nn.log_softmax(x, axis=1),), log_softmax_ref),
    "layer_norm": (lambda x, w, b: (lr.nn.layer_norm(x, SHAPE[1], w, b),), layer_norm_ref),
    "mean_var": (lambda x: (x.mean(1), x.var(1)), lambda x: (x.mean(1), x.var(1))),
    "sum_max": (lambda x: (x.sum(), x.max()), lambda x: (x.sum(), x.max())),
    "center": (lambda x: (x - x.mean(axis=1, keepdims=True),),
               lambda x: (x - x.mean(axis=1, keepdims=True),)),
    "transpose_add": (lambda x: (x.T + 1,), lambda x: (x.T + 1,)),
    "transpose_add_flat": (lambda x: ((x.T + 1).reshape(-1),),
                           lambda x: ((x.T + 1).reshape(-1),)),
    "slice_mul": (lambda x: (x[::2, ::-1] * 2,), lambda x: (x[::2, ::-1] * 2,)),
}


def _n_args(fn):
    return fn.__code__.co_argcount


def build(name, seed=0):
    fn, ref = PATTERNS[name]
    arrays = rng_arrays(seed)[:_n_args(fn)]
    lazy = fn(*(lr.tensor(a) for a in arrays))
    return lazy, ref(*arrays)


# --- golden counts and bytes -----------------------------------------------------


def assert_one_kernel(p, nbytes):
    assert len(p.kernels) == 1, p.describe()
    assert len(p.steps) == 1, p.describe()
    assert p.kernels[0].bytes_moved() == nbytes, p.describe()


def test_five_op_chain_is_one_kernel_reading_x_once():
    (y,), _ = build("chain")
    p = plan_of(y)
    assert_one_kernel(p, 2 * F32 * N)
    spec = p.kernels[0]
    assert len(spec.inputs) == 1 and len(spec.outputs) == 1
    assert spec.name.startswith("k0_fused_")
    for op in ("mul", "add", "maximum", "sub"):
        assert op in spec.name
    assert p.unfused == ()


def test_tanh_is_one_kernel():
    (y,), _ = build("tanh")
    assert_one_kernel(plan_of(y), 2 * F32 * N)


def test_exact_gelu_is_one_kernel():
    (y,), _ = build("gelu")
    p = plan_of(y)
    assert_one_kernel(p, 2 * F32 * N)
    assert "erf" in p.kernels[0].name


def test_tanh_gelu_is_one_kernel():
    x = lr.tensor(rng_arrays()[0])
    assert_one_kernel(plan_of(lr.nn.gelu(x, approximate="tanh")), 2 * F32 * N)


def test_softmax_is_one_kernel():
    (y,), _ = build("softmax")
    p = plan_of(y)
    assert_one_kernel(p, 2 * F32 * N)
    assert p.kernels[0].reduce_axes, "softmax's reductions run inside the kernel"


def test_log_softmax_is_one_kernel():
    (y,), _ = build("log_softmax")
    assert_one_kernel(plan_of(y), 2 * F32 * N)


def test_layer_norm_with_weight_and_bias_is_one_kernel():
    (y,), _ = build("layer_norm")
    p = plan_of(y)
    # x, weight, bias read once each; the result written once
    assert_one_kernel(p, F32 * (N + SHAPE[1] + SHAPE[1] + N))
    assert p.unfused == ()


def test_mean_and_var_share_one_loop():
    (m, v), _ = build("mean_var")
    p = plan_of(m, v)
    assert_one_kernel(p, F32 * (N + SHAPE[0] + SHAPE[0]))
    assert len(p.kernels[0].outputs) == 2


def test_sum_and_max_share_one_loop():
    (s, mx), _ = build("sum_max")
    p = plan_of(s, mx)
    assert_one_kernel(p, F32 * (N + 1 + 1))
    assert len(p.kernels[0].outputs) == 2


def test_subtract_row_mean_is_one_kernel():
    (y,), _ = build("center")
    assert_one_kernel(plan_of(y), 2 * F32 * N)


def test_transpose_feeding_pointwise_makes_no_copy():
    (y,), _ = build("transpose_add")
    p = plan_of(y)
    assert_one_kernel(p, 2 * F32 * N)
    assert p.unfused == ()
    assert not any("copy" in reason for _, reason in p.unfused)
    (inp,) = p.kernels[0].inputs
    # x is read in place through transposed strides, not through a copy
    assert p.buffers[inp.buffer].kind == "param"
    assert inp.index.strides == (1, SHAPE[1])


def test_reshape_of_transposed_result_realizes_the_add_not_a_copy():
    """See the module docstring: the add's own output is the realized buffer."""
    (y,), _ = build("transpose_add_flat")
    p = plan_of(y)
    assert_one_kernel(p, 2 * F32 * N)
    assert len(p.unfused) == 1, p.describe()
    node, reason = p.unfused[0]
    assert p.graph.nodes[node].op.name == "add"
    assert "copy" in reason and "non-contiguous" in reason
    assert "reshape" in p.describe()  # the reason is shown in the plan


def test_matmul_bias_gelu_is_one_blas_step_and_one_kernel():
    rng = np.random.default_rng(1)
    x = lr.tensor(rng.standard_normal(SHAPE).astype(np.float32))
    w = lr.tensor(rng.standard_normal((SHAPE[1], 32)).astype(np.float32))
    b = lr.tensor(rng.standard_normal(32).astype(np.float32))
    p = plan_of(lr.nn.gelu(x @ w + b))
    kinds = [type(s).__name__ for s in p.steps]
    assert kinds == ["MatmulStep", "KernelStep"], p.describe()
    assert isinstance(p.steps[0], MatmulStep) and p.steps[0].epilogue is None
    # epilogue reads the product and the bias once, writes once
    assert p.kernels[0].bytes_moved() == F32 * (SHAPE[0] * 32 * 2 + 32)
    (node, reason), = p.unfused
    assert p.graph.nodes[node].op.name == "matmul" and "BLAS" in reason
    (refusal,) = p.refusals  # the one fusion not taken: BLAS has no epilogue
    assert refusal.kind == "epilogue" and refusal.steps == (0, 1) and "BLAS" in refusal.reason


def test_negative_step_slice_folds_into_the_index_map():
    (y,), _ = build("slice_mul")
    p = plan_of(y)
    half = (SHAPE[0] // 2) * SHAPE[1]
    assert_one_kernel(p, 2 * F32 * half)
    assert p.unfused == ()
    (inp,) = p.kernels[0].inputs
    assert any(s < 0 for s in inp.index.strides), "the reversed axis walks backwards"
    assert inp.index.offset == SHAPE[1] - 1


def test_independent_pointwise_results_of_one_input_share_a_loop():
    x = lr.tensor(rng_arrays()[0])
    p = plan_of(x + 1, x * 2)
    assert_one_kernel(p, 3 * F32 * N)


def test_pointwise_result_used_by_two_outputs_is_stored_by_the_same_loop():
    x = lr.tensor(rng_arrays()[0])
    h = lr.exp(x) * 2
    p = plan_of(h, h + 1)
    assert_one_kernel(p, 3 * F32 * N)
    assert len(p.kernels[0].outputs) == 2


def test_kernel_names_say_what_they_fuse():
    for name in ("chain", "softmax", "layer_norm"):
        lazy, _ = build(name)
        spec = plan_of(*lazy).kernels[0]
        assert spec.name.startswith("k0_fused_"), spec.name
        assert spec.comment.startswith("fuses "), spec.comment


# --- reasons -----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_unfused_buffer_has_a_reason(name):
    lazy, _ = build(name)
    p = plan_of(*lazy)
    for node, reason in p.unfused:
        assert isinstance(reason, str) and reason.strip(), (node, p.describe())
        assert reason in p.describe()


def test_every_unfused_buffer_has_a_reason_with_boundaries():
    x = lr.tensor(rng_arrays()[0])
    w = lr.tensor(np.ones((SHAPE[1], 16), np.float32))
    cat = lr.concat([x, x * 2], axis=0)
    y = lr.nn.softmax((x.T + 1).reshape(SHAPE) @ w, axis=1)
    p = plan_of(cat.sum(0), y, x.sum(0) + x.sum(1).sum())
    assert p.unfused, p.describe()
    for node, reason in p.unfused:
        assert reason.strip(), (node, p.describe())
    # every realized non-parameter, non-output buffer is explained
    explained = {node for node, _ in p.unfused}
    for b in p.buffers:
        if b.kind == "scratch":
            assert b.node in explained, (b, p.describe())


# --- numerics on the c backend -----------------------------------------------------


@needs_c
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern_matches_numpy_on_c(name):
    with lr.backend("c"):
        lazy, expected = build(name, seed=3)
        lr.sync(*lazy)
        for got, want in zip(lazy, expected):
            assert_matches(got, np.asarray(want).astype(np.float32), rtol=2e-5, atol=2e-6)


@needs_c
def test_tanh_gelu_matches_numpy_on_c():
    x = rng_arrays(4)[0]
    with lr.backend("c"):
        got = lr.nn.gelu(lr.tensor(x), approximate="tanh").numpy()
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    assert_matches(got, want.astype(np.float32), rtol=2e-5, atol=2e-6)


@needs_c
def test_matmul_bias_gelu_matches_numpy_on_c(fresh_metrics):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    w = rng.standard_normal((SHAPE[1], 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    with lr.backend("c"):
        y = lr.nn.gelu(lr.tensor(x) @ lr.tensor(w) + lr.tensor(b))
        got = y.numpy()
    z = x.astype(np.float64) @ w.astype(np.float64) + b
    want = 0.5 * z * (1 + erf_np(z / math.sqrt(2)))
    assert_matches(got, want.astype(np.float32), rtol=1e-4, atol=1e-4)
    assert lr.metrics.snapshot()["kernel_launches"] == 2  # BLAS + the fused epilogue


@needs_c
@pytest.mark.parametrize("name", ["chain", "softmax", "layer_norm", "mean_var", "sum_max"])
def test_pattern_runs_as_one_launch_on_c(name, fresh_metrics):
    with lr.backend("c"):
        lazy, _ = build(name, seed=6)
        lr.sync(*lazy)
    snap = lr.metrics.snapshot()
    assert snap["graphs_executed"] == 1
    assert snap["kernel_launches"] == 1


# --- known bugs ----------------------------------------------------------------


def test_reduction_output_broadcast_into_a_larger_kernel_is_computed():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    z = np.ones((2, 4, 1), np.float32)
    m = lr.tensor(x).sum(1, keepdims=True)
    y = m + lr.tensor(z)
    p = plan_of(y, m)
    reduces = [s for k in p.kernels for s in k.body if s.op == "reduce"]
    assert reduces, p.describe()
    for k in p.kernels:  # no kernel stores a buffer it only loaded
        for o in k.outputs:
            src = k.body[o.value]
            assert not (src.op == "load" and k.inputs[src.attr].buffer == o.buffer), k.describe()


@needs_c
def test_reduction_output_broadcast_into_a_larger_kernel_matches_numpy_on_c():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    z = np.ones((2, 4, 1), np.float32)
    with lr.backend("c"):
        m = lr.tensor(x).sum(1, keepdims=True)
        y = m + lr.tensor(z)
        lr.sync(y, m)
        assert_matches(m, x.sum(1, keepdims=True))
        assert_matches(y, x.sum(1, keepdims=True) + z)


@needs_c
@pytest.mark.parametrize("pattern", ["softmax", "bias_gelu"])
def test_batch_of_one_reuses_the_compiled_kernel(pattern, fresh_metrics):
    """Size-1 axes keep their loops: batch 1 runs the binary built for batch 32."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(128).astype(np.float32)

    def run(batch):
        x = lr.tensor(rng.standard_normal((batch, 128)).astype(np.float32))
        y = lr.nn.softmax(x) if pattern == "softmax" else lr.nn.gelu(x + lr.tensor(w))
        return y.numpy()

    with lr.backend("c"):
        run(32)
        before = lr.metrics.snapshot()
        out = run(1)
        after = lr.metrics.snapshot()
    assert after["cache_misses"] == before["cache_misses"] + 1  # a new plan...
    assert after["compiles"] == before["compiles"]              # ...but no new binary
    assert after["disk_cache_hits"] == before["disk_cache_hits"]
    assert out.shape == (1, 128) and np.isfinite(out).all()
