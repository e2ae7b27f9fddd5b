"""Type promotion is NumPy 2's (NEP 50), checked exhaustively: every binary op
for every pair of dtypes and for every Python scalar kind on either side,
every unary op, reductions and casts. The result dtype is known when the op is
recorded (no barrier), and NumPy's rejections are rejected at record time.

Documented deviations (``conftest.DEVIATIONS``): int8 with uint8 computes in
int32 where NumPy uses int16; sum/prod of uint8 give int64, not uint64.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import lazyrt as lr
from conftest import (ALL_DTYPES, DTYPES, assert_matches, lazyrt_dtype, numpy_raises, numpy_ref,
                      same_error_kind)
from test_pointwise import BINARY, UNARY

SCALARS = (True, 2, 2.5)


def _operand(dt):
    return np.array([1, 2, 3]).astype(dt)


def _check_recorded(lazy_fn, np_fn, args, targs):
    """One table cell: a description of the mismatch, or None."""
    rejected = numpy_raises(np_fn, *args)
    executed = lr.metrics.snapshot()["graphs_executed"]
    try:
        out = lazy_fn(*targs)
    except Exception as exc:  # noqa: BLE001
        if rejected is None:
            return f"raised {exc!r}; NumPy gives {numpy_ref(np_fn, *args).dtype}"
        if not same_error_kind(exc, rejected):
            return f"raised {exc!r}; NumPy raises {rejected.__name__}"
        if lr.metrics.snapshot()["graphs_executed"] != executed:
            return "rejected only after computing something"
        return None
    if rejected is not None:
        return f"gave {out.dtype}; NumPy raises {rejected.__name__}"
    expected = numpy_ref(np_fn, *args)
    if out.dtype != lazyrt_dtype(expected.dtype):
        return f"recorded dtype {out.dtype}; NumPy gives {expected.dtype}"
    if lr.metrics.snapshot()["graphs_executed"] != executed:
        return "recording computed something"
    try:
        assert_matches(out, expected)
    except AssertionError as exc:
        return f"value: {exc}"
    return None


@pytest.mark.parametrize("name", sorted(BINARY))
def test_array_array_promotion_table_matches_numpy(backend, name):
    lazy_fn, np_fn = BINARY[name]
    failures = []
    for da, db in itertools.product(ALL_DTYPES, ALL_DTYPES):
        a, b = _operand(da), _operand(db)
        problem = _check_recorded(lazy_fn, np_fn, (a, b), (lr.tensor(a), lr.tensor(b)))
        if problem:
            failures.append(f"{da} {name} {db}: {problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_array_scalar_promotion_table_matches_numpy(backend, name):
    lazy_fn, np_fn = BINARY[name]
    failures = []
    for dt, scalar, reflected in itertools.product(ALL_DTYPES, SCALARS, (False, True)):
        a = _operand(dt)
        args = (scalar, a) if reflected else (a, scalar)
        targs = (scalar, lr.tensor(a)) if reflected else (lr.tensor(a), scalar)
        problem = _check_recorded(lazy_fn, np_fn, args, targs)
        if problem:
            side = f"{scalar!r} {name} {dt}" if reflected else f"{dt} {name} {scalar!r}"
            failures.append(f"{side}: {problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_dtype_table_matches_numpy(backend, name):
    lazy_fn, np_fn = UNARY[name]
    failures = []
    for dt in ALL_DTYPES:
        if name == "round" and dt == np.bool_:
            continue  # xfail in test_pointwise: lazyrt keeps bool
        a = _operand(dt)
        problem = _check_recorded(lazy_fn, np_fn, (a,), (lr.tensor(a),))
        if problem:
            failures.append(f"{name}({dt}): {problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("expr", "dtype"), [
    (lambda: lr.tensor(np.int8([1])) + 1, "int8"),
    (lambda: lr.tensor(np.uint8([1])) * 2, "uint8"),
    (lambda: lr.tensor(np.float32([1])) * 2.5, "float32"),
    (lambda: lr.tensor(np.float16([1])) - 1e3, "float16"),
    (lambda: lr.tensor(np.int32([1])) * 0.5, "float64"),
    (lambda: lr.tensor(np.int8([1])) / 2, "float64"),
    (lambda: lr.tensor(np.bool_([1])) + 1, "int64"),
    (lambda: lr.tensor(np.bool_([1])) * 1.5, "float64"),
    (lambda: 1 + lr.tensor(np.int8([1])), "int8"),
    (lambda: lr.tensor(np.int8([1])) + np.int64(1), "int64"),   # NumPy scalars are not weak
    (lambda: lr.tensor(np.float16([1])) + np.float32(1), "float32"),
    (lambda: lr.tensor(np.int8([1])) + np.array([1], np.int32), "int32"),
    (lambda: lr.tensor(np.int8([1])) > 1.5, "bool"),
    (lambda: lr.tensor(np.uint8([1])) == -1, "bool"),
])
def test_python_scalars_are_weak(backend, expr, dtype):
    assert expr().dtype == np.dtype(dtype)


@pytest.mark.parametrize(("dt", "value"), [("int8", 128), ("int8", -129), ("uint8", -1),
                                           ("uint8", 256), ("int32", 2 ** 31)])
def test_out_of_range_python_int_raises_overflow_at_record_time(backend, fresh_metrics, dt,
                                                                value):
    t = lr.tensor(np.array([1, 2], dt))
    with pytest.raises(OverflowError, match=str(value)):
        t + value
    with pytest.raises(OverflowError):
        value * t
    assert lr.metrics.snapshot()["graphs_executed"] == 0


@pytest.mark.parametrize("value", [2 ** 53 + 1, 2 ** 62 + 3, -(2 ** 63), 2 ** 63 - 1])
def test_int64_python_scalars_stay_exact_beyond_double_precision(backend, value):
    """Runtime scalars travel to kernels as 64-bit words: ints as int64 bits,
    never through a double (which would round 2**53 + 1)."""
    a = np.array([0, 1, -1], np.int64)
    t = lr.tensor(a)
    with np.errstate(over="ignore"):
        assert_matches(t + value, a + value)
        assert_matches(t ^ value, a ^ value)
        assert_matches(t == value, a == value)
        assert_matches(lr.where(t > 0, value, t), np.where(a > 0, value, a))
        assert_matches(lr.full((2,), value, dtype="int64"), np.full((2,), value, np.int64))


def test_changing_an_int_scalar_reuses_the_program_and_stays_exact(backend, fresh_metrics):
    t = lr.tensor(np.array([1, 2], np.int64))
    for value in (3, 2 ** 60 + 1, -(2 ** 60) - 7):
        assert (t * value).tolist() == [value, 2 * value]
    assert lr.metrics.snapshot()["cache_misses"] == 1


def test_out_of_range_python_int_compares_by_value(backend):
    t = lr.tensor(np.array([0, 200], np.uint8))
    assert (t == -1).tolist() == [False, False]
    assert (t > -1).tolist() == [True, True]
    assert (lr.tensor(np.int8([5])) < 1000).tolist() == [True]


@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_astype_between_every_pair(backend, src):
    a = np.array([0, 1, 2, 5, 100]).astype(src)
    for dst in ALL_DTYPES:
        out = lr.tensor(a).astype(dst)
        assert out.dtype == dst
        assert_matches(out, a.astype(dst))
        assert_matches(lr.astype(lr.tensor(a) + 0, dst), (a + 0).astype(dst))


def test_astype_wraps_ints_and_truncates_floats_like_numpy(backend):
    a = np.array([300, -1, 127, 128], np.int32)
    assert_matches(lr.tensor(a).astype("int8"), a.astype(np.int8))
    assert_matches(lr.tensor(a).astype("uint8"), a.astype(np.uint8))
    f = np.array([1.9, -1.9, 0.5, -0.5, 70000.0, np.inf, np.nan])
    assert_matches(lr.tensor(f).astype("float16"), f.astype(np.float16))
    assert_matches(lr.tensor(f[:4]).astype("int32"), f[:4].astype(np.int32))
    assert_matches(lr.tensor(f).astype("bool"), f.astype(bool))


def test_astype_accepts_every_dtype_spelling(backend):
    t = lr.tensor([1, 2])
    for spelling in ("float32", np.float32, np.dtype("float32"), lr.float32, "f4"):
        assert t.astype(spelling).dtype == np.float32
    assert lr.bool is lr.bool_ and t.astype(lr.bool).dtype == np.bool_


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_reduction_result_dtypes(backend, dt):
    a = np.array([[1, 0, 1], [1, 1, 0]]).astype(dt)
    t = lr.tensor(a)
    expect = {
        "sum": lazyrt_dtype(np.sum(a).dtype), "prod": lazyrt_dtype(np.prod(a).dtype),
        "max": np.max(a).dtype, "min": np.min(a).dtype,
        "argmax": np.dtype("int64"), "argmin": np.dtype("int64"),
        "any": np.dtype("bool"), "all": np.dtype("bool"),
    }
    if dt != np.bool_:
        expect.update(mean=np.mean(a).dtype, var=np.var(a).dtype, std=np.std(a).dtype)
    for name, want in expect.items():
        out = getattr(lr, name)(t, axis=0)
        assert out.dtype == want, name
        assert_matches(out, numpy_ref(getattr(np, name), a, axis=0), dtype=want)


def test_input_dtypes_lazyrt_lacks_are_widened_exactly(backend):
    a16 = np.array([-30000, 2, 3], np.int16)
    assert lr.tensor(a16).dtype == np.int32
    assert_matches(lr.tensor(a16), a16.astype(np.int32))
    u32 = np.array([4_000_000_000], np.uint32)
    assert_matches(lr.tensor(u32), u32.astype(np.int64))
    with pytest.raises(TypeError, match="complex"):
        lr.tensor(np.array([1j]))


def test_default_dtypes_of_python_data(backend):
    assert lr.tensor(3).dtype == np.int64
    assert lr.tensor(3.0).dtype == np.float64
    assert lr.tensor(True).dtype == np.bool_
    assert lr.tensor([1, 2.5]).dtype == np.float64
    assert lr.asarray([[True, False]]).dtype == np.bool_
    assert lr.zeros(3).dtype == np.float64
    assert lr.full((2,), 7).dtype == np.int64
    assert lr.full((2,), 7.0).dtype == np.float64


# --- float16: computed in float32, rounded after every op ---------------------

def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


def test_float16_chain_rounds_after_every_op_bit_for_bit(backend):
    """NumPy's float16 loops round every op's result to float16; so does every
    backend (the planner's cast after each op), to the bit. Rounding only at the
    store would differ: the data is chosen so it does."""
    rng = np.random.default_rng(16)
    x = rng.uniform(-4, 4, 4096).astype(np.float16)
    y = rng.uniform(-4, 4, 4096).astype(np.float16)
    expected = (x * y + np.float16(1)) / np.float16(3)
    once = ((x.astype(np.float32) * y + 1) / 3).astype(np.float16)
    assert np.any(_bits(once) != _bits(expected))
    got = ((lr.tensor(x) * lr.tensor(y) + 1) / 3).numpy()
    assert got.dtype == np.float16
    np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_float16_row_sum_is_rounded_before_the_kernel_uses_it(backend):
    """A float16 sum is a float16 value to the ops after it in the same kernel
    (the C emitter used the unrounded float sum). Row sums of multiples of 1/256
    are exact in float32, so NumPy's one rounding is the only one."""
    rng = np.random.default_rng(17)
    x = (rng.integers(0, 1024, (64, 300)) / 256).astype(np.float16)
    expected = x - x.sum(axis=1, keepdims=True) * np.float16(0.01)
    t = lr.tensor(x)
    got = (t - t.sum(axis=1, keepdims=True) * 0.01).numpy()
    assert got.dtype == np.float16
    np.testing.assert_array_equal(_bits(got), _bits(expected))
