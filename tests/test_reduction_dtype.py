"""sum and prod with ``dtype=``, as the array API (2023.12) specifies them.

Given ``dtype``, the input is cast to it first and the result has it
(NumPy's ``np.sum(x, dtype=...)`` does the same): float32 data summed as
float64, int data summed as float32 roundings of its values, int8 sums that
wrap at 2**8. lazyrt's accumulator policy still holds: floats accumulate in
float64 and round once to ``dtype`` (NumPy would accumulate float16 in
float16), so the oracle is NumPy's reduction of the cast data in float64.
``mean`` takes no ``dtype`` in the standard, and none here.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazyrt as lr

from conftest import DTYPE_NAMES, arrays, assert_matches, shapes

FUNCS = {"sum": (lr.sum, np.sum), "prod": (lr.prod, np.prod)}


def expected(name, a, axis, dtype, keepdims=False):
    """NumPy's reduction of ``a`` cast to ``dtype``, accumulated as lazyrt does."""
    dt = np.dtype(dtype)
    wide = np.float64 if dt.kind == "f" else np.int64
    with np.errstate(all="ignore"):
        a = np.asarray(a).astype(dtype)
        out = FUNCS[name][1](a.astype(wide), axis=axis, keepdims=keepdims)
        return np.asarray(out).astype(dt)


def tolerance(dtype):
    dt = np.dtype(dtype)
    if dt.kind != "f":
        return {}
    rtol = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-12}[dt.type]
    return {"rtol": rtol, "atol": rtol}


@pytest.mark.parametrize("name", sorted(FUNCS))
@given(data=st.data())
def test_dtype_casts_first_and_is_the_result_dtype(backend, name, data):
    src = np.dtype(data.draw(st.sampled_from(DTYPE_NAMES)))
    dtype = data.draw(st.sampled_from(DTYPE_NAMES))
    # NaN and inf only where they stay floats, and floats cast to ints in range:
    # out-of-range casts are the standard's "unspecified" (and XLA saturates them)
    a = data.draw(arrays(src, shapes(), special=np.dtype(dtype).kind == "f", small=True))
    if src.kind == "f" and np.dtype(dtype).kind in "iu":
        a = np.abs(a)
    axis = data.draw(st.sampled_from([None] + list(range(-a.ndim, a.ndim))))
    keepdims = data.draw(st.booleans())
    got = FUNCS[name][0](lr.tensor(a), axis=axis, keepdims=keepdims, dtype=dtype)
    assert got.dtype == np.dtype(dtype)
    assert_matches(got, expected(name, a, axis, dtype, keepdims), dtype=dtype,
                   **tolerance(dtype))


def test_float32_data_summed_as_float64(backend):
    a = np.full(10, 0.1, np.float32)
    got = lr.sum(lr.tensor(a), dtype="float64")
    assert got.dtype == np.float64
    assert got.item() == np.sum(a, dtype=np.float64)   # the float32 values, exactly


def test_int_data_summed_as_float32_roundings(backend):
    # as float32: [2**24, 1], whose sum 2**24 + 1 rounds to 2**24; the int sum,
    # 2**24 + 2, would be exact in float32
    a = np.array([2**24 + 1, 1], np.int64)
    got = lr.sum(lr.tensor(a), dtype="float32")
    assert got.dtype == np.float32
    assert got.item() == float(np.sum(a, dtype=np.float32)) == 2.0**24


def test_int8_sum_and_prod_wrap_as_numpy(backend):
    a = np.array([[100, 100, 100], [3, 5, 7]], np.int8)
    t = lr.tensor(a)
    assert_matches(lr.sum(t, axis=1, dtype="int8"), np.sum(a, axis=1, dtype=np.int8))
    assert_matches(lr.prod(t, axis=1, dtype="int8"), np.prod(a, axis=1, dtype=np.int8))
    assert_matches(lr.sum(t, dtype="uint8"), np.sum(a, dtype=np.uint8))


def test_bool_dtype_is_any_for_sum_and_all_for_prod(backend):
    a = np.array([[0, 2, 0], [0, 0, 0], [1, 1, 3]], np.int32)
    t = lr.tensor(a)
    assert_matches(lr.sum(t, axis=1, dtype="bool"), np.sum(a.astype(bool), axis=1, dtype=bool))
    assert_matches(lr.prod(t, axis=1, dtype="bool"), np.prod(a.astype(bool), axis=1, dtype=bool))


def test_float16_dtype_accumulates_wide_and_rounds_once(backend):
    a = np.full(4096, 1.0, np.float32)   # float16 accumulation would stop at 2048
    got = lr.sum(lr.tensor(a), dtype="float16")
    assert got.dtype == np.float16 and got.item() == 4096.0


def test_dtype_none_keeps_the_sum_rule(backend):
    t = lr.tensor(np.array([1, 2], np.uint8))
    assert lr.sum(t).dtype == np.int64 and lr.sum(t, dtype=None).dtype == np.int64
    assert lr.prod(lr.ones((2,), "float16")).dtype == np.float16


def test_a_bad_dtype_names_the_function():
    with pytest.raises(TypeError, match="lazyrt.sum: dtype"):
        lr.sum(lr.ones((2,)), dtype="complex128")
    with pytest.raises(TypeError, match="lazyrt.prod: dtype"):
        lr.prod(lr.ones((2,)), dtype=object)


def test_signatures_follow_the_standard():
    for fn in (lr.sum, lr.prod, lr.cumulative_sum, lr.cumulative_prod):
        params = inspect.signature(fn).parameters
        assert params["dtype"].kind is inspect.Parameter.KEYWORD_ONLY, fn
    assert "dtype" not in inspect.signature(lr.mean).parameters  # not in the standard
