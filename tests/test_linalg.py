"""``lazyrt.linalg``, the array API's linear algebra extension, against NumPy
on every backend: ``vector_norm`` (ord 2, 1, inf, -inf, 0 and general p),
``matrix_norm`` ('fro', 1, -1, inf, -inf), ``diagonal``, ``trace``, ``outer``,
``cross``, and the shared ``matmul, matrix_transpose, tensordot, vecdot``.

Norms compute in float64 and return the input's float dtype, so the oracle is
NumPy's norm of the float64 input, rounded to that dtype. What lazyrt does not
implement (decompositions, solvers) is absent, so ``hasattr`` says False, and
reading it says why.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazyrt as lr
from conftest import (DTYPES, arrays, assert_exact, assert_matches,
                      lazy_inputs, shapes)

NUMERIC = tuple(d for d in DTYPES if d != np.dtype("bool"))


def _float_of(dtype):
    return dtype if dtype.kind == "f" else np.dtype("float64")


@st.composite
def inputs(draw, min_dims=0, max_dims=4, dtypes=DTYPES, special=True):
    dt = draw(st.sampled_from(dtypes))
    a = draw(arrays(dt, shapes(min_dims=min_dims, max_dims=max_dims), special=special))
    return draw(lazy_inputs(a))


ORDS = [2, 1, math.inf, -math.inf, 0, 3, 0.5, -1, -2.5]


@given(data=st.data())
def test_vector_norm_matches_numpy(backend, data):
    t, a = data.draw(inputs())
    ord_ = data.draw(st.sampled_from(ORDS))
    keepdims = data.draw(st.booleans())
    axis = None
    if a.ndim and data.draw(st.booleans()):
        axis = tuple(data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1,
                                        max_size=a.ndim, unique_by=lambda v: v % a.ndim)))
    if abs(ord_) == math.inf and 0 in (a.shape if axis is None else
                                       [a.shape[i] for i in axis]):
        with pytest.raises(lr.ShapeError, match="vector_norm"):
            lr.linalg.vector_norm(t, axis=axis, keepdims=keepdims, ord=ord_)
        return
    got = lr.linalg.vector_norm(t, axis=axis, keepdims=keepdims, ord=ord_)
    with np.errstate(all="ignore"):
        want = np.linalg.vector_norm(a.astype(np.float64), axis=axis, keepdims=keepdims,
                                     ord=ord_)
        want = np.asarray(want).astype(_float_of(a.dtype))
    assert_matches(got, want,
                   rtol=1e-9 if a.dtype != np.float16 and a.dtype != np.float32 else None)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_vector_norm_does_not_overflow_where_the_squares_would(backend, dtype):
    """float16/float32 square in float64; float64 overflows as NumPy's does."""
    big = np.finfo(dtype).max / 4
    a = np.array([big, big], dtype)
    got = lr.linalg.vector_norm(lr.asarray(a))
    assert_matches(got, np.array(math.sqrt(2) * float(big)).astype(dtype))


@given(data=st.data())
def test_matrix_norm_matches_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=2))
    ord_ = data.draw(st.sampled_from(["fro", 1, -1, math.inf, -math.inf]))
    keepdims = data.draw(st.booleans())
    # 1/-1 take the max/min over columns, inf/-inf over rows: none of an empty set
    empty = (ord_ in (1, -1) and a.shape[-1] == 0) or (ord_ in (math.inf, -math.inf)
                                                       and a.shape[-2] == 0)
    if empty:
        with pytest.raises(lr.ShapeError, match="matrix_norm"):
            lr.linalg.matrix_norm(t, keepdims=keepdims, ord=ord_)
        return
    got = lr.linalg.matrix_norm(t, keepdims=keepdims, ord=ord_)
    with np.errstate(all="ignore"):
        want = np.linalg.matrix_norm(a.astype(np.float64), keepdims=keepdims, ord=ord_)
        want = np.asarray(want).astype(_float_of(a.dtype))
    assert_matches(got, want,
                   rtol=1e-9 if a.dtype == np.float64 else None)


def test_matrix_norms_needing_singular_values_say_so():
    for ord_ in (2, -2, "nuc"):
        with pytest.raises(NotImplementedError, match="matrix_norm.*svd"):
            lr.linalg.matrix_norm(lr.ones((2, 2)), ord=ord_)
    with pytest.raises(ValueError, match="matrix_norm"):
        lr.linalg.matrix_norm(lr.ones((2, 2)), ord=3)
    with pytest.raises(lr.ShapeError, match="matrix_norm"):
        lr.linalg.matrix_norm(lr.ones(3))


@given(data=st.data())
def test_diagonal_and_trace_match_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=2))
    offset = data.draw(st.integers(-7, 7))
    assert_exact(lr.linalg.diagonal(t, offset=offset),
                 np.linalg.diagonal(a, offset=offset))
    want = np.trace(a, offset=offset, axis1=-2, axis2=-1)
    if a.dtype == np.uint8:
        want = want.astype(np.int64)  # lazyrt's sums of ints are int64
    if a.dtype.kind == "f":
        want = np.trace(a.astype(np.float64), offset=offset, axis1=-2, axis2=-1)
        assert_matches(lr.linalg.trace(t, offset=offset), want.astype(a.dtype))
    else:
        assert_exact(lr.linalg.trace(t, offset=offset), want)


@pytest.mark.parametrize("dtype", ["int8", "float32", "float64"])
def test_trace_with_a_dtype(backend, dtype):
    a = np.arange(-4, 5, dtype=np.int8).reshape(3, 3) * 40
    got = lr.linalg.trace(lr.asarray(a), dtype=dtype)
    assert_matches(got, np.trace(a, dtype=dtype))


@given(data=st.data())
def test_outer_matches_numpy(backend, data):
    t1, a1 = data.draw(inputs(min_dims=1, max_dims=1, special=False))
    t2, a2 = data.draw(inputs(min_dims=1, max_dims=1, special=False))
    if np.result_type(a1, a2) == np.int16:  # lazyrt's int8 x uint8 is int32
        a1, a2 = a1.astype(np.int32), a2.astype(np.int32)
    with np.errstate(all="ignore"):
        want = np.outer(a1, a2)
    assert_matches(lr.linalg.outer(t1, t2), want)


@given(data=st.data())
def test_cross_matches_numpy(backend, data):
    from conftest import broadcast_pairs
    s1, s2 = data.draw(broadcast_pairs(min_dims=1, max_dims=3, max_side=3)).input_shapes
    axis = data.draw(st.integers(-min(len(s1), len(s2)), -1))
    s1 = s1[:len(s1) + axis] + (3,) + (s1[len(s1) + axis + 1:])
    s2 = s2[:len(s2) + axis] + (3,) + (s2[len(s2) + axis + 1:])
    dt = data.draw(st.sampled_from(NUMERIC))
    t1, a1 = data.draw(lazy_inputs(data.draw(arrays(dt, s1, special=False, small=True))))
    t2, a2 = data.draw(lazy_inputs(data.draw(arrays(dt, s2, special=False, small=True))))
    with np.errstate(all="ignore"):
        want = np.linalg.cross(a1, a2, axis=axis)
    assert_matches(lr.linalg.cross(t1, t2, axis=axis), want,
                   rtol=1e-2 if dt == np.float16 else None,
                   atol=5e-2 if dt == np.float16 else None)


def test_cross_errors_name_the_function():
    with pytest.raises(lr.ShapeError, match="cross"):
        lr.linalg.cross(lr.ones((2, 2)), lr.ones((2, 2)))
    with pytest.raises(lr.DTypeError, match="cross"):
        lr.linalg.cross(lr.ones(3, dtype="bool"), lr.ones(3, dtype="bool"))


def test_shared_functions_are_the_top_level_ones(backend):
    a = np.arange(6.0).reshape(2, 3)
    x = lr.asarray(a)
    assert_matches(lr.linalg.matmul(x, lr.linalg.matrix_transpose(x)), a @ a.T)
    assert_matches(lr.linalg.tensordot(x, x, axes=2), np.tensordot(a, a, axes=2))
    assert_matches(lr.linalg.vecdot(x, x), np.vecdot(a, a))


def test_the_extension_is_reachable_and_declares_what_it_has():
    assert hasattr(lr, "linalg")
    for name in lr.linalg.__all__:
        assert callable(getattr(lr.linalg, name)), name
    for name in lr.linalg.NOT_IMPLEMENTED:
        assert not hasattr(lr.linalg, name)
        with pytest.raises(AttributeError, match=f"lazyrt.linalg.{name} is not implemented"):
            getattr(lr.linalg, name)


def test_building_them_runs_nothing(backend, fresh_metrics):
    x = lr.asarray(np.arange(12.0).reshape(3, 4)) - 5
    v = lr.asarray(np.arange(3.0))
    built = [lr.linalg.vector_norm(x, ord=3), lr.linalg.matrix_norm(x, ord=1),
             lr.linalg.diagonal(x, offset=1), lr.linalg.trace(x), lr.linalg.outer(v, v),
             lr.linalg.cross(v, v + 1)]
    snap = lr.metrics.snapshot()
    assert snap["materializations"] == 0 and snap["graphs_executed"] == 0
    assert all(t.is_pending for t in built)
    lr.sync(*built)
    assert_exact(built[2], [-4.0, 1.0, 6.0])
