"""cumulative_sum and cumulative_prod: scans on every backend, against NumPy.

The oracle is NumPy's ``cumulative_sum`` / ``cumulative_prod`` accumulated as
lazyrt accumulates (the op table's policy, as for ``sum``): floats in float64
and each element rounded once to the result dtype, ints and bool in int64.
On the compiled backends a scan is one kernel (pointwise producers fused
into it), whose rows run in parallel; the Triton kernel walks a row in
blocks carrying the running total, so rows longer than one block are tested.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazyrt as lr
from lazyrt import ops
from lazyrt._capture import capture
from lazyrt.errors import AxisError
from lazyrt.graph import Graph
from lazyrt.planner import KernelStep, plan
from lazyrt.planner.kernel_ir import is_scan

from conftest import DTYPE_NAMES, arrays, assert_matches, lazy_inputs, shapes

SCANS = {"cumulative_sum": (lr.cumulative_sum, np.cumulative_sum),
         "cumulative_prod": (lr.cumulative_prod, np.cumulative_prod)}


def expected_scan(name, a, axis=None, dtype=None, include_initial=False):
    """NumPy's scan with lazyrt's accumulation: ``dtype`` (default sum's rule:
    ints and bool int64, floats their own), accumulated wide, rounded once."""
    a = np.asarray(a)
    if a.ndim == 0:
        a = a.reshape(1)
    out = np.dtype(dtype) if dtype is not None else (
        a.dtype if a.dtype.kind == "f" else np.dtype("int64"))
    a = a.astype(out)  # the array API: cast first
    wide = np.float64 if out.kind == "f" else np.int64
    fn = SCANS[name][1]
    with np.errstate(all="ignore"):
        got = fn(a.astype(wide), axis=axis, include_initial=include_initial)
        return got.astype(out)


def float_tolerance(result_dtype, a, axis):
    """Accumulated in float64 then rounded: the result is within one rounding of
    the exact value, plus float64 reassociation (Triton scans a block in a tree)."""
    dt = np.dtype(result_dtype)
    if dt.kind != "f":
        return {}
    rtol = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-12}[dt.type]
    return {"rtol": rtol, "atol": rtol * 4}


@pytest.mark.parametrize("name", sorted(SCANS))
@given(data=st.data())
def test_scan_matches_numpy(backend, name, data):
    dt = np.dtype(data.draw(st.sampled_from(DTYPE_NAMES)))
    a = data.draw(arrays(dt, shapes(min_dims=1), small=name == "cumulative_prod"))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    include_initial = data.draw(st.booleans())
    t, a = data.draw(lazy_inputs(a))
    got = SCANS[name][0](t, axis=axis, include_initial=include_initial)
    want = expected_scan(name, a, axis, include_initial=include_initial)
    assert_matches(got, want, dtype=want.dtype, **float_tolerance(want.dtype, a, axis))


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_cumulative_sum_of_every_dtype(backend, dtype):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((5, 37)) * 40).astype(dtype)
    for axis in (0, 1, -1):
        want = expected_scan("cumulative_sum", a, axis)
        assert_matches(lr.cumulative_sum(lr.tensor(a), axis=axis), want, dtype=want.dtype,
                       **float_tolerance(want.dtype, a, axis))


def test_ints_and_bool_scan_to_int64_and_floats_keep_their_dtype(backend):
    for dtype, want in [("bool", "int64"), ("int8", "int64"), ("uint8", "int64"),
                        ("int32", "int64"), ("int64", "int64"), ("float16", "float16"),
                        ("float32", "float32"), ("float64", "float64")]:
        t = lr.ones((3,), dtype)
        assert lr.cumulative_sum(t).dtype == np.dtype(want)
        assert lr.cumulative_prod(t).dtype == np.dtype(want)


def test_uint8_cumulative_sum_does_not_wrap_at_256(backend):
    a = np.full(300, 200, np.uint8)
    assert_matches(lr.cumulative_sum(lr.tensor(a)), np.cumsum(a.astype(np.int64)))


@pytest.mark.parametrize("name", sorted(SCANS))
@pytest.mark.parametrize("include_initial", [False, True])
def test_rows_longer_than_one_block(backend, name, include_initial):
    rng = np.random.default_rng(1)
    a = rng.uniform(0.999, 1.001, (3, 5000)).astype(np.float32)
    got = SCANS[name][0](lr.tensor(a), axis=1, include_initial=include_initial)
    want = expected_scan(name, a, 1, include_initial=include_initial)
    assert_matches(got, want, rtol=1e-6, atol=1e-6)
    ints = rng.integers(-50, 50, 5000).astype(np.int32)
    assert_matches(lr.cumulative_sum(lr.tensor(ints), include_initial=include_initial),
                   expected_scan("cumulative_sum", ints, include_initial=include_initial))


def test_long_columns_scan_along_the_first_axis(backend):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3000, 70)).astype(np.float32)
    assert_matches(lr.cumulative_sum(lr.tensor(a), axis=0),
                   expected_scan("cumulative_sum", a, 0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape,axis", [((0,), 0), ((3, 0), 1), ((0, 4), 1), ((0, 4), 0),
                                        ((2, 0, 3), 1)])
@pytest.mark.parametrize("include_initial", [False, True])
def test_size_zero_axes(backend, shape, axis, include_initial):
    a = np.zeros(shape, np.float32)
    for name, (fn, _) in SCANS.items():
        got = fn(lr.tensor(a), axis=axis, include_initial=include_initial)
        assert_matches(got, expected_scan(name, a, axis, include_initial=include_initial))


def test_zero_dim_input_is_one_element(backend):
    assert_matches(lr.cumulative_sum(lr.asarray(np.float32(2.5))), np.array([2.5], np.float32))
    assert_matches(lr.cumulative_sum(lr.asarray(np.int8(7)), include_initial=True),
                   np.array([0, 7], np.int64))
    assert_matches(lr.cumulative_prod(lr.asarray(np.float64(3.0)), include_initial=True),
                   np.array([1.0, 3.0]))


def test_nan_and_inf_propagate_as_in_numpy(backend):
    a = np.array([[1, np.inf, 2, -np.inf, 3], [np.nan, 1, 2, 3, 4], [1, 2, np.inf, 4, 5]],
                 np.float32)
    assert_matches(lr.cumulative_sum(lr.tensor(a), axis=1), expected_scan("cumulative_sum", a, 1))
    assert_matches(lr.cumulative_prod(lr.tensor(a), axis=1),
                   expected_scan("cumulative_prod", a, 1))


def test_strided_and_broadcast_inputs(backend):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 10)).astype(np.float32)
    t = lr.tensor(a)
    for view, ref in [(t[::2, ::-1], a[::2, ::-1]), (t.T, a.T), (t[1:, 3:7], a[1:, 3:7])]:
        for axis in (0, 1):
            assert_matches(lr.cumulative_sum(view, axis=axis),
                           expected_scan("cumulative_sum", ref, axis), rtol=1e-6, atol=1e-6)
    row = rng.standard_normal(10).astype(np.float32)
    wide = lr.broadcast_to(lr.tensor(row), (4, 10))
    for axis in (0, 1):
        assert_matches(lr.cumulative_sum(wide, axis=axis),
                       expected_scan("cumulative_sum", np.broadcast_to(row, (4, 10)), axis),
                       rtol=1e-6, atol=1e-6)


def test_dtype_casts_the_input_first(backend):
    a = np.array([[100, 100, 100], [1, 2, 3]], np.int8)
    for dtype in ("int8", "int32", "float32", "float16", "bool", "float64"):
        got = lr.cumulative_sum(lr.tensor(a), axis=1, dtype=dtype)
        want = expected_scan("cumulative_sum", a, 1, dtype=dtype)
        assert got.dtype == np.dtype(dtype)
        assert_matches(got, want, dtype=dtype)
    f = np.array([0.1, 0.2, 0.3], np.float32)
    assert_matches(lr.cumulative_sum(lr.tensor(f), dtype="float64"),
                   np.cumsum(f.astype(np.float64)))


def test_fused_producer_and_consumer(backend):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 33)).astype(np.float32)
    x = lr.tensor(a)
    assert_matches(lr.cumulative_sum(x * 2 + 1, axis=1),
                   expected_scan("cumulative_sum", a * np.float32(2) + np.float32(1), 1),
                   rtol=1e-6, atol=1e-5)
    got = lr.cumulative_sum(x, axis=-1) / x.sum()
    want = expected_scan("cumulative_sum", a, 1) / np.sum(a.astype(np.float64)).astype(np.float32)
    assert_matches(got, want, rtol=1e-5, atol=1e-5)


def test_scan_of_a_reduction_result_and_a_scan_of_a_scan(backend):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((5, 8)).astype(np.float64)
    x = lr.tensor(a)
    got = lr.cumulative_sum(x - x.mean(axis=1, keepdims=True), axis=1)
    assert_matches(got, np.cumsum(a - a.mean(axis=1, keepdims=True), axis=1))
    assert_matches(lr.cumulative_sum(lr.cumulative_sum(x, axis=0), axis=1),
                   np.cumsum(np.cumsum(a, axis=0), axis=1))


def test_producer_that_is_also_an_output(backend):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = lr.tensor(a)
    y = x * 3
    z = lr.cumulative_prod(y, axis=0, include_initial=True)
    lr.sync(y, z)
    assert_matches(y, a * 3)
    assert_matches(z, expected_scan("cumulative_prod", a * 3, 0, include_initial=True),
                   rtol=1e-6)


def test_axis_is_required_above_one_dimension():
    x = lr.ones((2, 3))
    with pytest.raises(AxisError, match="cumulative_sum: axis is required"):
        lr.cumulative_sum(x)
    with pytest.raises(AxisError, match="out of range"):
        lr.cumulative_prod(x, axis=2)
    with pytest.raises(TypeError, match="one int"):
        lr.cumulative_sum(x, axis=(0, 1))
    with pytest.raises(TypeError, match="dtype"):
        lr.cumulative_sum(x, axis=0, dtype="complex64")


# --- the plan -------------------------------------------------------------------

def plan_of(*outs):
    return plan(Graph.from_capture(capture([t._node for t in outs])))


def test_pointwise_producer_fuses_into_the_scan_kernel():
    x = lr.tensor(np.ones((8, 16), np.float32))
    p = plan_of(lr.cumulative_sum(x * 2 + 1, axis=1))
    assert len(p.kernels) == 1, p.describe()
    spec = p.kernels[0]
    assert is_scan(spec)
    names = [getattr(s.op, "name", s.op) for s in spec.body]
    assert "mul" in names and "add" in names and "scan" in names, p.describe()
    assert len(spec.inputs) == 1 and spec.name.endswith("mul_add_cumsum")
    assert "scan=" in p.describe()


def test_consumer_reads_the_scan_buffer_and_the_refusal_says_why():
    x = lr.tensor(np.ones((8, 16), np.float32))
    p = plan_of(lr.cumulative_sum(x, axis=1) / x.sum())
    scans = [k for k in p.kernels if is_scan(k)]
    assert len(scans) == 1 and len(p.kernels) == 2, p.describe()  # sum and divide fuse
    (other,) = [k for k in p.kernels if not is_scan(k)]
    assert p.kernels[0].outputs[0].buffer in {i.buffer for i in other.inputs}
    assert any("scan" in r.reason for r in p.refusals), p.refusals


def test_scan_and_reduction_of_one_buffer_stay_separate_kernels():
    x = lr.tensor(np.ones((8, 16), np.float32))
    p = plan_of(lr.cumulative_sum(x, axis=1), lr.sum(x, axis=1))
    assert len(p.kernels) == 2, p.describe()
    assert sum(is_scan(k) for k in p.kernels) == 1
    assert any("one scans an axis" in r.reason for r in p.refusals), p.refusals


def test_scan_is_the_op_tables_scan_kind():
    for op in (ops.CUMSUM, ops.CUMPROD):
        assert op.kind == ops.SCAN and op.accumulator is not None and op.identity is not None
        assert "jax" in op.lower
    assert ops.CUMSUM.identity(0) == 0 and ops.CUMPROD.identity(0) == 1


def test_compiled_scan_kernel_is_named_and_recorded(backend):
    if backend == "numpy":
        pytest.skip("the numpy backend runs the reference, no kernel")
    x = lr.tensor(np.ones((4, 5), np.float32))
    lr.cumulative_sum(x + 1, axis=0).numpy()
    record = lr.debug.last_record()
    if backend == "jax":
        return
    (kernel,) = record.kernels
    assert "cumsum" in kernel.name and "cumsum" in kernel.ops
    assert ("tl.cumsum" if backend == "triton" else "scan along axis") in kernel.source


def test_a_strided_scan_axis_scans_contiguous_lanes_in_c_and_triton():
    """cumsum(x, axis=0) of a row-major matrix: neighbouring rows of the last
    axis scan together, so loads and stores run along contiguous memory."""
    from lazyrt.codegen.c import emit_c
    x = lr.tensor(np.ones((300, 70), np.float32))
    columns = plan_of(lr.cumulative_sum(x, axis=0)).kernels[0]
    rows = plan_of(lr.cumulative_sum(x, axis=1)).kernels[0]
    assert "rows of axis 1 at a time" in emit_c(columns).source
    assert "one row per iteration" in emit_c(rows).source
    triton = pytest.importorskip("lazyrt.codegen.triton")
    assert triton.emit_triton(columns).kind == "scan_lanes"
    assert triton.emit_triton(rows).kind == "scan"


@pytest.mark.parametrize("op", [op for op in ops.OPS if op.kind == ops.SCAN], ids=str)
@pytest.mark.parametrize("dtype", ["bool", "int8", "int64", "float16", "float32", "float64"])
def test_every_scan_op_is_emitted_by_c_and_triton(op, dtype):
    """The emitters lay scans out by the op table's ``combine``: each scan op
    of every dtype emits on both (a combine they lack would be refused by name)."""
    from lazyrt.codegen.c import emit_c
    x = lr.tensor(np.ones((4, 6), dtype))
    fn = {ops.CUMSUM: lr.cumulative_sum, ops.CUMPROD: lr.cumulative_prod}[op]
    for axis in (0, 1):
        (spec,) = plan_of(fn(x, axis=axis, include_initial=True)).kernels
        assert any(st.op == "scan" and st.attr[0] is op for st in spec.body)
        assert op.name in emit_c(spec).source.split("\n", 1)[0] + spec.name
        try:
            from lazyrt.codegen.triton import emit_triton
        except ImportError:
            continue
        assert emit_triton(spec).kind in ("scan", "scan_lanes")


def test_bytes_moved_counts_the_initial_element_of_each_row():
    x = lr.tensor(np.ones((8, 16), np.float32))
    plain = plan_of(lr.cumulative_sum(x, axis=1)).kernels[0]
    initial = plan_of(lr.cumulative_sum(x, axis=1, include_initial=True)).kernels[0]
    assert plain.bytes_moved() == 2 * 8 * 16 * 4
    assert initial.bytes_moved() == (8 * 16 + 8 * 17) * 4


def test_two_scans_of_one_buffer_share_a_loop(backend):
    a = np.random.default_rng(7).uniform(0.5, 1.5, (5, 300)).astype(np.float32)
    x = lr.tensor(a)
    s = lr.cumulative_sum(x, axis=1)
    p = lr.cumulative_prod(x, axis=1, include_initial=True)
    t = lr.cumulative_sum(x, axis=0).T
    lr.sync(s, p, t)
    assert_matches(s, expected_scan("cumulative_sum", a, 1), rtol=1e-6, atol=1e-5)
    assert_matches(p, expected_scan("cumulative_prod", a, 1, include_initial=True), rtol=1e-5)
    assert_matches(t, expected_scan("cumulative_sum", a, 0).T, rtol=1e-6, atol=1e-5)
    if backend in ("c", "triton"):
        assert len(lr.debug.last_record().kernels) == 2  # the two row scans merged
