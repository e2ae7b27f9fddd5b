"""Reductions against eager NumPy: axis (None, int, negative, tuple), keepdims,
every dtype, size-0 axes, NaN/inf, non-contiguous inputs.

Documented deviation: ``sum``/``prod`` of uint8 give int64 where NumPy gives
uint64 (values compared; see ``conftest.DEVIATIONS``).
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special
from hypothesis import assume, given
from hypothesis import strategies as st

import lazyrt as lr
from conftest import (DTYPES, FLOAT_DTYPES, arrays, assert_matches, lazy_inputs,
                      numpy_raises, numpy_ref, same_error_kind, shapes)


@st.composite
def axis_args(draw, ndim):
    """axis=None, one axis (maybe negative) or a tuple of distinct axes."""
    kind = draw(st.sampled_from(["none", "int", "tuple"] if ndim else ["none", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        ax = draw(st.integers(0, ndim - 1))
        return ax - ndim if draw(st.booleans()) else ax
    axes = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)) if ndim else []
    return tuple(a - ndim if draw(st.booleans()) else a for a in axes)


def _reduced_count(shape, axis):
    if axis is None:
        axis = tuple(range(len(shape)))
    axis = (axis,) if isinstance(axis, int) else axis
    return int(np.prod([shape[a] for a in axis], dtype=np.int64))


def _float_tolerance(dtype, a, axis):
    """Summation error grows with the count and the magnitude of the terms."""
    n = max(_reduced_count(a.shape, axis), 1)
    finite = np.abs(a[np.isfinite(a)].astype(np.float64)) if a.size else np.zeros(1)
    scale = float(finite.max()) if finite.size else 1.0
    eps = float(np.finfo(dtype).eps)
    return dict(atol=4 * n * eps * max(scale, 1.0))


REDUCTIONS = {
    "sum": (lr.sum, np.sum),
    "prod": (lr.prod, np.prod),
    "max": (lr.max, np.max),
    "min": (lr.min, np.min),
    "any": (lr.any, np.any),
    "all": (lr.all, np.all),
    "mean": (lr.mean, np.mean),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@given(data=st.data())
def test_reduction_matches_numpy(backend, name, data):
    lazy_fn, np_fn = REDUCTIONS[name]
    dt = data.draw(st.sampled_from(DTYPES))
    a = data.draw(arrays(dt, shapes(), small=name in ("prod", "mean", "sum")))
    axis = data.draw(axis_args(a.ndim))
    keepdims = data.draw(st.booleans())
    rejected = numpy_raises(np_fn, a, axis=axis, keepdims=keepdims)
    t, a = data.draw(lazy_inputs(a))
    if rejected is not None:  # max/min over an empty axis
        with pytest.raises(Exception) as info:
            lazy_fn(t, axis=axis, keepdims=keepdims)
        assert same_error_kind(info.value, rejected)
        return
    if name in ("sum", "prod") and dt.kind == "f":
        # the op table's accumulator: floats in float64 on every backend (NumPy's
        # float16 product overflows where lazyrt's does not: 8**44 * 0 is 0, not NaN)
        expected = numpy_ref(np_fn, a.astype(np.float64), axis=axis,
                             keepdims=keepdims).astype(dt)
    else:
        expected = numpy_ref(np_fn, a, axis=axis, keepdims=keepdims)
    out = lazy_fn(t, axis=axis, keepdims=keepdims)
    assert out.shape == np.shape(expected)
    tol = _float_tolerance(dt, a, axis) if dt.kind == "f" and name in ("sum", "mean") else {}
    assert_matches(out, expected, **tol)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "mean"])
def test_tensor_method_equals_function(backend, name):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    t = lr.tensor(a)
    assert_matches(getattr(t, name)(axis=(0, 2), keepdims=True),
                   getattr(np, name)(a, axis=(0, 2), keepdims=True))


@pytest.mark.parametrize("name", ["var", "std"])
@given(data=st.data())
def test_var_and_std_match_numpy_with_correction(backend, name, data):
    dt = data.draw(st.sampled_from(DTYPES[1:]))
    a = data.draw(arrays(dt, shapes(max_dims=3), small=True))
    axis = data.draw(axis_args(a.ndim))
    keepdims = data.draw(st.booleans())
    correction = data.draw(st.integers(0, 2))
    t, a = data.draw(lazy_inputs(a))
    expected = numpy_ref(getattr(np, name), a, axis=axis, keepdims=keepdims, ddof=correction)
    if data.draw(st.booleans()):
        out = getattr(lr, name)(t, axis=axis, keepdims=keepdims, correction=correction)
    else:
        out = getattr(t, name)(axis=axis, keepdims=keepdims, ddof=correction)
    tol = _float_tolerance(np.float64 if dt.kind != "f" else dt, a, axis)
    assert_matches(out, expected, atol=tol["atol"] * 40, rtol=1e-2 if dt == np.float16 else None)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(data=st.data())
def test_argmax_argmin_match_numpy(backend, name, data):
    dt = data.draw(st.sampled_from(DTYPES))
    a = data.draw(arrays(dt, shapes(min_side=1)))
    axis = None if a.ndim == 0 or data.draw(st.booleans()) else \
        data.draw(st.integers(-a.ndim, a.ndim - 1))
    keepdims = data.draw(st.booleans())
    t, a = data.draw(lazy_inputs(a))
    expected = getattr(np, name)(a, axis=axis, keepdims=keepdims)
    assert_matches(getattr(lr, name)(t, axis=axis, keepdims=keepdims), expected)


def test_argmax_returns_first_index_and_nan_wins(backend):
    a = np.array([[1.0, 3.0, 3.0, np.nan], [2.0, 2.0, 0.0, 0.0]], np.float32)
    assert_matches(lr.argmax(lr.tensor(a), axis=1), np.array([3, 0]))
    assert_matches(lr.argmin(lr.tensor(a), axis=1), np.array([3, 2]))
    assert lr.argmax(lr.tensor(a[1])).item() == 0


@given(data=st.data())
def test_logsumexp_matches_numpy_formula(backend, data):
    dt = data.draw(st.sampled_from(DTYPES[1:]))
    a = data.draw(arrays(dt, shapes(max_dims=3), small=True))
    axis = data.draw(axis_args(a.ndim))
    keepdims = data.draw(st.booleans())
    t, a = data.draw(lazy_inputs(a))
    out_dtype = a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)
    with np.errstate(all="ignore"):  # |x| <= 20: the naive float64 formula is exact enough
        expected = np.log(np.sum(np.exp(a.astype(np.float64)), axis=axis, keepdims=keepdims))
    expected = np.asarray(expected).astype(out_dtype)
    tol = {"rtol": 1e-2, "atol": 1e-2} if out_dtype == np.float16 else {}
    assert_matches(lr.logsumexp(t, axis=axis, keepdims=keepdims), expected, **tol)


def test_logsumexp_handles_infinite_rows(backend):
    a = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 0.0], [1000.0, 1000.0]])
    assert_matches(lr.logsumexp(lr.tensor(a), axis=1),
                   np.array([-np.inf, np.inf, np.nan, 1000.0 + np.log(2.0)]))


@pytest.mark.parametrize("dt", ["bool", "int8", "uint8", "int32", "int64"])
def test_sum_and_prod_of_ints_and_bools_are_int64(backend, dt):
    a = np.array([[1, 1, 0], [1, 1, 1]]).astype(dt)
    if dt != "bool":
        a = np.array([[100, 100, 100], [2, 3, 4]]).astype(dt)
    t = lr.tensor(a)
    assert lr.sum(t).dtype == np.int64 and lr.prod(t, axis=0).dtype == np.int64
    assert_matches(lr.sum(t), np.sum(a.astype(np.int64)))
    assert_matches(lr.sum(t, axis=1), np.sum(a.astype(np.int64), axis=1))
    assert_matches(lr.prod(t, axis=0), np.prod(a.astype(np.int64), axis=0))


def test_uint8_sum_does_not_wrap_at_256(backend):
    a = np.full(10, 200, np.uint8)
    assert lr.sum(lr.tensor(a)).item() == 2000


@pytest.mark.parametrize("dt", ["int8", "int32", "bool"])
def test_mean_var_std_of_ints_are_float64(backend, dt):
    a = np.array([[1, 0, 1], [0, 1, 1]]).astype(dt)
    t = lr.tensor(a)
    for name in ("mean", "var", "std"):
        assert_matches(getattr(lr, name)(t, axis=0), getattr(np, name)(a, axis=0))


def test_float16_mean_accumulates_in_float32(backend):
    a = np.full(4096, 1.0, np.float16) + np.float16(0.001)
    out = lr.mean(lr.tensor(a))
    assert out.dtype == np.float16
    assert_matches(out, np.mean(a))  # a float16 accumulator would stall at 2048


def test_reductions_over_empty_axes(backend):
    a = np.zeros((0, 3), np.float32)
    t = lr.tensor(a)
    assert_matches(lr.sum(t, axis=0), np.zeros(3, np.float32))
    assert_matches(lr.prod(t, axis=0), np.ones(3, np.float32))
    assert_matches(lr.any(t, axis=0), np.zeros(3, bool))
    assert_matches(lr.all(t, axis=0), np.ones(3, bool))
    assert_matches(lr.sum(t, axis=1), np.zeros(0, np.float32))
    assert_matches(lr.mean(t, axis=0), np.full(3, np.nan, np.float32))
    with pytest.raises(ValueError, match="max"):
        lr.max(t, axis=0)
    assert_matches(lr.max(t, axis=1), np.zeros(0, np.float32))


def test_reduction_of_zero_dim_tensor(backend):
    t = lr.tensor(np.float64(2.5))
    assert_matches(lr.sum(t), np.float64(2.5))
    assert_matches(lr.max(t, axis=()), np.float64(2.5))
    assert_matches(lr.mean(t, keepdims=True), np.float64(2.5))
    assert_matches(lr.argmax(t), np.int64(0))


def test_nan_propagates_through_max_min_sum(backend):
    a = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]])
    t = lr.tensor(a)
    for name in ("max", "min", "sum", "mean", "prod"):
        assert_matches(getattr(lr, name)(t, axis=1), getattr(np, name)(a, axis=1))


@given(data=st.data())
def test_reduction_of_pending_expression(backend, data):
    dt = data.draw(st.sampled_from(FLOAT_DTYPES))
    a = data.draw(arrays(dt, shapes(min_dims=1, max_dims=3), special=False, small=True))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    assume(a.shape[axis] > 0)
    t, a = data.draw(lazy_inputs(a))
    out = lr.max(t * 2 + 1, axis=axis) - lr.min(lr.abs(t), axis=axis)
    with np.errstate(all="ignore"):
        expected = np.max(a * 2 + 1, axis=axis) - np.min(np.abs(a), axis=axis)
    assert_matches(out, expected)


def test_logsumexp_matches_scipy_on_large_values(backend):
    a = np.array([[1000.0, 1000.0, -5.0], [-1000.0, -1001.0, -999.0]])
    assert_matches(lr.logsumexp(lr.tensor(a), axis=1), scipy.special.logsumexp(a, axis=1))


def test_logsumexp_of_empty_axis_is_minus_inf(backend):
    out = lr.logsumexp(lr.zeros((3, 0), "float32"), axis=1)
    assert_matches(out, np.full(3, -np.inf, np.float32))


@pytest.mark.parametrize("shape, axis", [((0, 1), None), ((3, 0), 1), ((1, 4), 0)])
def test_row_results_are_stored_even_when_rows_are_empty_or_single(backend, shape, axis):
    """mean/var of an empty row is NaN and of a single-element axis is exact, on every backend."""
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    with np.errstate(all="ignore"):
        assert_matches(lr.tensor(x).var(axis=axis), np.var(x, axis=axis))
        assert_matches(lr.tensor(x).mean(axis=axis), np.mean(x, axis=axis))


def test_a_value_beside_its_own_one_element_reduction(backend):
    """A 0-d value, unsqueezed and reduced over its one element, combined with the
    value itself (the DAG fuzzer's find on Triton): one kernel reads the input both
    per element and per row through one slot, and its 0-d output is stored from the
    row's one lane."""
    v0 = lr.tensor(np.float32(3.0))
    v2 = 0.1 * v0
    row = lr.expand_dims(v2, axis=-1)
    out = lr.maximum(v0.astype("int64"), lr.min(row, axis=0))
    lr.sync(out, row)
    x = np.float32(3.0)
    assert_matches(out, np.maximum(np.int64(x), np.min(np.expand_dims(np.float32(0.1) * x, -1),
                                                        axis=0)))
    assert_matches(row, np.expand_dims(np.float32(0.1) * x, -1))
