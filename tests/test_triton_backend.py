"""The ``triton`` backend: generated kernels against NumPy, and fusion goldens.

Runs on a GPU when there is one, else through Triton's interpreter
(``TRITON_INTERPRET=1``, set by conftest before triton is imported). Shapes
stay small: the interpreter runs every program instance in Python.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

if not os.path.exists("/dev/nvidiactl"):  # before triton is imported (conftest does it too)
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
pytest.importorskip("torch")

import lazyrt as lr  # noqa: E402
from lazyrt import runtime  # noqa: E402
from conftest import assert_matches  # noqa: E402

if "triton" not in lr.available_backends():
    pytest.skip("triton backend unavailable: " + lr.backends._REGISTRY["triton"].why_unavailable(),
                allow_module_level=True)

RNG = np.random.default_rng(0)


@pytest.fixture
def triton_be():
    with lr.backend("triton"):
        yield lr.backends.get("triton")


def launches(fn, backend="triton"):
    """Kernel launches of one fresh compile-and-run of ``fn()`` on ``backend``."""
    lr.sync()
    runtime.program_cache.clear()
    with lr.backend(backend):
        lr.metrics.reset()
        out = fn()
        value = out.numpy()
        count = lr.metrics.snapshot()["kernel_launches"]
    return count, value


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# --- pointwise -----------------------------------------------------------------

def test_pointwise_chain_is_one_kernel_and_matches_numpy():
    x, y = rand(7, 33), rand(7, 33)
    n, value = launches(lambda: lr.maximum(lr.tensor(x) * 2.0 + lr.tensor(y), 0.0) - 1.5)
    assert n == 1
    assert_matches(value, np.maximum(x * 2.0 + y, 0.0) - 1.5)


def test_broadcasting_and_transposed_input(triton_be):
    a, b = rand(5, 1, 4), rand(3, 1)
    assert_matches(lr.tensor(a) + lr.tensor(b), a + b)
    m = rand(6, 9)
    t = lr.tensor(np.ascontiguousarray(m.T)).T  # a transposed view feeding a pointwise op
    assert_matches(lr.exp(t) * 2, np.exp(m) * 2)


def arr(shape, dtype):
    """Random values of ``dtype``: normal floats, small ints (products stay in range)."""
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(0, 10, shape).astype(dtype)
    return rand(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32", "int32", "uint8"])
@pytest.mark.parametrize("shape", [(37, 50), (33, 32), (1, 50), (37, 1), (1, 1), (0, 5), (4, 0)])
def test_transposed_input_pointwise_matches_numpy(triton_be, shape, dtype):
    x, z = arr(shape, dtype), arr(shape[::-1], dtype)
    assert_matches(lr.tensor(x).T * lr.tensor(z) + 1, x.T * z + 1)
    assert_matches(lr.tensor(x).T - 2, x.T - 2)


@pytest.mark.parametrize("dtype", ["float16", "float32", "int64"])
@pytest.mark.parametrize("shape", [(3, 37, 50), (1, 37, 50), (2, 1, 5), (2, 5, 1), (0, 4, 5)])
def test_batched_transpose_pointwise_matches_numpy(triton_be, shape, dtype):
    y = arr(shape, dtype)
    x = arr(shape[1:], dtype)            # broadcast over the batch
    v = arr((shape[0], 1, 1), dtype)     # one value per batch entry
    t = lr.tensor(y).transpose(0, 2, 1)
    assert_matches(t + lr.tensor(x).T * lr.tensor(v), y.transpose(0, 2, 1) + x.T * v)
    assert_matches(lr.tensor(y).transpose(2, 0, 1) * 3, y.transpose(2, 0, 1) * 3)


def test_transpose_broadcast_with_rows_columns_and_scalars(triton_be):
    x = rand(37, 50)
    row, col, one = rand(37), rand(50, 1), rand(1, 1)
    t = lr.tensor(x).T
    assert_matches(t + lr.tensor(row), x.T + row)
    assert_matches(t * lr.tensor(col) - lr.tensor(one), x.T * col - one)
    assert_matches(lr.maximum(t, lr.tensor(row)) * lr.tensor(col), np.maximum(x.T, row) * col)
    assert_matches(lr.where(t > 0, lr.tensor(col), lr.tensor(row)),
                   np.where(x.T > 0, col, row))
    assert_matches(lr.tensor(x[:, ::-1]).T + 1, x[:, ::-1].T + 1)  # a reversed axis too


def test_transpose_feeding_pointwise_uses_2d_tiles():
    """``x.T + 1``: in0 walks axis 0 contiguously, out0 axis 1, so the kernel
    is tiled over (0, 1); a contiguous chain keeps the 1-D walk."""
    from lazyrt._capture import capture
    from lazyrt.codegen.triton import emit_triton, tile_axes
    from lazyrt.graph import Graph
    from lazyrt.planner import plan

    def kernel(out):
        (spec,) = plan(Graph.from_capture(capture([out._node]))).kernels
        return spec, emit_triton(spec)

    x = lr.tensor(rand(37, 50))
    spec, tk = kernel(x.T + 1)
    assert tile_axes(spec) == (0, 1) and tk.kind == "tiled"
    assert "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr" in tk.source
    assert "tl.arange(0, BLOCK_M)[:, None]" in tk.source
    assert "tl.arange(0, BLOCK_N)[None, :]" in tk.source
    assert "lzm.TILE_CONFIGS" in tk.source
    assert tk.grid()({"BLOCK_M": 32, "BLOCK_N": 32}) == (2 * 2,)  # 50 x 37 in 32 x 32 tiles

    spec, tk = kernel(lr.tensor(rand(3, 37, 50)).transpose(0, 2, 1) * 2)
    assert tile_axes(spec) == (1, 2) and tk.kind == "tiled"
    assert tk.grid()({"BLOCK_M": 32, "BLOCK_N": 32}) == (2 * 2 * 3,)

    for contiguous in (lr.exp(x) * 2 + 1, x + lr.tensor(rand(50)),
                       lr.tensor(rand(4, 37, 50)).transpose(1, 0, 2) + 1):
        spec, tk = kernel(contiguous)
        assert tile_axes(spec) is None and tk.kind == "pointwise"
        assert "BLOCK_M" not in tk.source and "lzm.POINTWISE_CONFIGS" in tk.source


def test_transcendentals(triton_be):
    x = np.linspace(-4, 4, 101).astype(np.float32)
    t = lr.tensor(x)
    import scipy.special
    for lazy, ref in ((lr.tanh, np.tanh), (lr.sigmoid, scipy.special.expit),
                      (lr.log1p, lambda v: np.log1p(np.abs(v))),
                      (lr.expm1, np.expm1), (lr.erf, scipy.special.erf), (lr.round, np.round)):
        arg = lr.abs(t) if ref is not np.tanh and lazy is lr.log1p else t
        assert_matches(lazy(arg), ref(x).astype(np.float32))
    assert_matches(lr.tensor(np.abs(x)) ** 1.7, np.abs(x) ** np.float32(1.7))


def test_nan_propagating_maximum_minimum(triton_be):
    a = np.array([1.0, np.nan, 3.0, -np.inf], np.float32)
    b = np.array([np.nan, 2.0, 1.0, 0.0], np.float32)
    assert_matches(lr.maximum(lr.tensor(a), lr.tensor(b)), np.maximum(a, b))
    assert_matches(lr.minimum(lr.tensor(a), lr.tensor(b)), np.minimum(a, b))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integer_floor_division_and_modulo(triton_be, dtype):
    info = np.iinfo(dtype)
    a = np.array([7, -7, 7, -7, 0, 5, info.min, info.max, 3] if info.min < 0 else
                 [7, 9, 7, 250, 0, 5, 0, 255, 3], dtype)
    b = np.array([2, 2, -2, -2, 3, 0, -1, 0, -1] if info.min < 0 else
                 [2, 2, 3, 3, 3, 0, 1, 0, 1], dtype)
    with np.errstate(all="ignore"):
        assert_matches(lr.tensor(a) // lr.tensor(b), a // b)
        assert_matches(lr.tensor(a) % lr.tensor(b), a % b)


def test_float_floor_division_and_modulo(triton_be):
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.0, 1.0, -0.0], np.float64)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 2.0], np.float64)
    with np.errstate(all="ignore"):
        assert_matches(lr.tensor(a) // lr.tensor(b), a // b)
        assert_matches(lr.tensor(a) % lr.tensor(b), a % b)


def test_float16_computes_in_float32_and_stores_float16(triton_be):
    x, y = rand(4, 20, dtype=np.float16), rand(4, 20, dtype=np.float16)
    out = lr.tensor(x) * lr.tensor(y) + 1
    assert out.numpy().dtype == np.float16
    assert_matches(out, x * y + np.float16(1))
    assert_matches(lr.tensor(x).sum(axis=1), x.sum(axis=1))


def test_float16_rounds_after_every_op_on_both_walks(triton_be):
    """float16 loads widen to float32 and every op rounds back to float16, as
    NumPy's float16 loops do: the same bits, on the 1-D walk and on 2-D tiles."""
    x, y = rand(37, 50, dtype=np.float16), rand(37, 50, dtype=np.float16)
    for a, b, ta, tb in ((x, y, lr.tensor(x), lr.tensor(y)),
                         (x.T, y.T, lr.tensor(x).T, lr.tensor(y).T)):
        out = lr.exp((ta * tb + 1) / 3) - ta
        assert out.numpy().dtype == np.float16
        assert_matches(out, np.exp((a * b + np.float16(1)) / np.float16(3)) - a, rtol=0, atol=0)


@pytest.mark.parametrize("persistent_max", [64, 16384])
def test_float16_sums_accumulate_in_float32(triton_be, monkeypatch, persistent_max):
    """2048 + 1 rounds back to 2048 in float16: a float16 accumulator would
    drop the ones that follow 2048 in its lane (the looped kernel's lane 0
    adds every 64th element); NumPy and lazyrt sum float16 in float32."""
    monkeypatch.setattr(triton_be, "persistent_max", persistent_max)
    runtime.program_cache.clear()
    x = np.ones((2, 3000), np.float16)
    x[:, 0] = 2048
    assert_matches(lr.tensor(x).sum(axis=1), x.sum(axis=1), rtol=0, atol=0)
    assert x.sum(axis=1)[0] == 5048  # 5047 in float32, rounded once
    assert_matches(lr.tensor(x).mean(axis=1), x.mean(axis=1), rtol=0, atol=0)
    big = np.full((2, 300), 60000, np.float16)  # the sum overflows float16, the mean does not
    assert_matches(lr.tensor(big).mean(axis=1), big.mean(axis=1), rtol=0, atol=0)
    runtime.program_cache.clear()


def test_bool_ops(triton_be):
    a = RNG.random((3, 10)) > 0.5
    b = RNG.random((3, 10)) > 0.3
    ta, tb = lr.tensor(a), lr.tensor(b)
    assert_matches(lr.logical_and(ta, tb) | ~ta, np.logical_and(a, b) | ~a)
    assert_matches(lr.where(ta, lr.tensor(rand(3, 10)), 0.0).numpy() != 0, a & True)
    assert_matches(ta.any(axis=1), a.any(axis=1))
    assert_matches(ta.all(axis=0), a.all(axis=0))
    assert_matches(ta.sum(), a.sum())


# --- reductions ------------------------------------------------------------------

def softmax_np(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_softmax_is_one_kernel():
    x = rand(6, 50)
    n, value = launches(lambda: lr.nn.softmax(lr.tensor(x), axis=-1))
    assert n == 1
    assert_matches(value, softmax_np(x))


def test_log_softmax(triton_be):
    x = rand(5, 40)
    assert_matches(lr.nn.log_softmax(lr.tensor(x), axis=-1),
                   x - x.max(1, keepdims=True) -
                   np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)))


def layer_norm_np(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def test_layer_norm_is_one_kernel():
    x, w, b = rand(4, 64), rand(64), rand(64)
    n, value = launches(lambda: lr.nn.layer_norm(lr.tensor(x), (64,), lr.tensor(w),
                                                 lr.tensor(b)))
    assert n == 1
    assert_matches(value, layer_norm_np(x, w, b), rtol=1e-4, atol=1e-5)


def test_mean_var(triton_be):
    x = rand(3, 4, 5)
    assert_matches(lr.tensor(x).mean(axis=(0, 2)), x.mean(axis=(0, 2)))
    assert_matches(lr.tensor(x).var(axis=1), x.var(axis=1), rtol=1e-4)


@pytest.mark.parametrize("axis", [0, 1, (0, 2), None])
def test_sum_max_argmax(triton_be, axis):
    x = rand(4, 6, 3)
    t = lr.tensor(x)
    assert_matches(t.sum(axis=axis), x.sum(axis=axis), rtol=1e-5)
    assert_matches(t.max(axis=axis), x.max(axis=axis))
    if not isinstance(axis, tuple):
        assert_matches(lr.argmax(t, axis=axis), np.argmax(x, axis=axis))
        assert_matches(lr.argmin(t, axis=axis), np.argmin(x, axis=axis))


def test_reductions_with_nan_and_ints(triton_be):
    x = rand(3, 8)
    x[1, 3] = np.nan
    assert_matches(lr.tensor(x).max(axis=1), x.max(axis=1))
    assert_matches(lr.argmax(lr.tensor(x), axis=1), np.argmax(x, axis=1))
    i = RNG.integers(-100, 100, (5, 7)).astype(np.int32)
    assert_matches(lr.tensor(i).sum(axis=0), i.sum(axis=0))
    assert_matches(lr.tensor(i).min(axis=1), i.min(axis=1))
    assert_matches(lr.argmin(lr.tensor(i), axis=1), np.argmin(i, axis=1))
    assert_matches(lr.tensor(i[:2, :3]).prod(axis=1), i[:2, :3].prod(axis=1))
    ties = np.array([[1, 0, 1], [1, 1, 0]], np.int8)  # the first of equal values wins
    assert_matches(lr.argmin(lr.tensor(ties), axis=0), np.argmin(ties, axis=0))
    assert_matches(lr.argmax(lr.tensor(ties), axis=1), np.argmax(ties, axis=1))


def test_long_rows_loop_over_chunks(triton_be, monkeypatch):
    """Rows longer than the persistent limit run the looped kernel (same results)."""
    monkeypatch.setattr(triton_be, "persistent_max", 64)
    runtime.program_cache.clear()
    x = rand(3, 300)
    x[2, 123] = np.nan
    assert_matches(lr.nn.softmax(lr.tensor(x[:2]), axis=-1), softmax_np(x[:2]))
    assert_matches(lr.tensor(x).sum(axis=1), x.sum(axis=1), rtol=1e-5)
    assert_matches(lr.argmax(lr.tensor(x), axis=1), np.argmax(x, axis=1))
    w, b = rand(300), rand(300)
    assert_matches(lr.nn.layer_norm(lr.tensor(x[:2]), (300,), lr.tensor(w), lr.tensor(b)),
                   layer_norm_np(x[:2], w, b), rtol=1e-4, atol=1e-5)
    runtime.program_cache.clear()


# --- matmul ------------------------------------------------------------------------

def gelu_np(x):
    import scipy.special
    return 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2)))


def test_matmul_bias_gelu_is_one_kernel():
    x, w, b = rand(9, 20), rand(20, 11), rand(11)
    n, value = launches(lambda: lr.nn.gelu(lr.tensor(x) @ lr.tensor(w) + lr.tensor(b)))
    assert n == 1
    assert_matches(value, gelu_np(x @ w + b), rtol=1e-4, atol=1e-5)


def test_batched_matmul_with_broadcast_and_residual(triton_be):
    a, b, r = rand(3, 5, 7), rand(7, 4), rand(3, 5, 4)
    assert_matches(lr.tensor(a) @ lr.tensor(b) + lr.tensor(r), a @ b + r, rtol=1e-4, atol=1e-5)
    a2, b2 = rand(2, 1, 6, 40), rand(3, 40, 5)
    assert_matches(lr.tensor(a2) @ lr.tensor(b2), a2 @ b2, rtol=1e-4, atol=1e-5)
    bt = rand(4, 7)  # transposed operand
    assert_matches(lr.tensor(a) @ lr.tensor(bt).T, a @ bt.T, rtol=1e-4, atol=1e-5)


def test_kernel_counts_match_the_c_backend():
    if "c" not in lr.available_backends():
        pytest.skip("no C compiler")
    x, y = rand(4, 16), rand(4, 16)
    cases = [lambda: lr.exp(lr.tensor(x)) * lr.tensor(y) + 1,
             lambda: lr.nn.softmax(lr.tensor(x), axis=-1),
             lambda: lr.nn.layer_norm(lr.tensor(x), (16,))]
    for case in cases:
        assert launches(case, "triton")[0] == launches(case, "c")[0] == 1


# --- the backend itself ------------------------------------------------------------

def test_kernel_is_named_after_its_fused_ops_with_a_header_comment():
    from lazyrt.codegen.triton import emit_triton
    from lazyrt.graph import Graph  # noqa: F401 - the plan comes from a real run
    from lazyrt.planner import Capabilities, plan
    lr.sync()
    runtime.program_cache.clear()
    seen = {}
    be = lr.backends.get("triton")
    original = be.compile

    def spy(graph):
        seen["plan"] = plan(graph, Capabilities(matmul_epilogue=True,
                                                matmul_engine="a Triton matmul kernel"))
        return original(graph)

    be.compile = spy
    try:
        with lr.backend("triton"):
            lr.nn.relu(lr.tensor(rand(3, 3)) * 2 + 1).numpy()
    finally:
        del be.compile
    spec = seen["plan"].kernels[0]
    src = emit_triton(spec).source
    assert f"def {spec.name}(" in src and "@triton.jit" in src
    assert f"# {spec.name}: " in src
    assert spec.name.startswith("k") and "_fused_" in spec.name


def test_new_batch_size_reuses_compiled_kernels(triton_be):
    runtime.program_cache.clear()
    (lr.exp(lr.tensor(rand(4, 8))) + 1).numpy()
    before = lr.metrics.snapshot()["compiles"]
    (lr.exp(lr.tensor(rand(9, 8))) + 1).numpy()
    assert lr.metrics.snapshot()["compiles"] == before


def test_clear_error_without_gpu_or_interpreter(monkeypatch):
    from lazyrt.backends import triton as T
    import torch
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "no GPU and TRITON_INTERPRET is not set" in T.unavailable_reason()
