"""Sorting and searching against NumPy, on every backend: ``sort``,
``argsort`` (ascending and descending, stable, NaN last / first) and
``searchsorted`` (both sides, with ``sorter``).

A descending stable sort keeps equal elements in their original order: it is
checked against NumPy's stable sort of the reversed array, reversed back (not
the ascending result reversed, which would swap equal elements).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazyrt as lr
from conftest import DTYPES, arrays, assert_exact, lazy_inputs, shapes


def _np_sort(a, axis, descending, arg=False):
    """NumPy's stable sort; descending keeps equal elements in original order."""
    if not descending:
        return (np.argsort if arg else np.sort)(a, axis=axis, kind="stable")
    n = a.shape[axis]
    flipped = np.flip(a, axis)
    order = np.flip(np.argsort(flipped, axis=axis, kind="stable"), axis)
    return n - 1 - order if arg else np.take_along_axis(a, n - 1 - order, axis)


@st.composite
def sortable(draw, dtype=None):
    dt = dtype or draw(st.sampled_from(DTYPES))
    # few distinct values: ties are what stability is about
    a = draw(arrays(dt, shapes(min_dims=1, max_dims=3), small=True))
    t, a = draw(lazy_inputs(a))
    return t, a, draw(st.integers(-a.ndim, a.ndim - 1)), draw(st.booleans())


@given(case=sortable())
def test_sort_matches_numpy(backend, case):
    t, a, axis, descending = case
    assert_exact(lr.sort(t, axis=axis, descending=descending), _np_sort(a, axis, descending))


@given(case=sortable())
def test_argsort_matches_numpys_stable_order(backend, case):
    t, a, axis, descending = case
    got = lr.argsort(t, axis=axis, descending=descending, stable=False)
    assert_exact(got, _np_sort(a, axis, descending, arg=True).astype(np.int64))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_nan_sorts_last_ascending_and_first_descending(backend, dtype):
    a = np.array([2.0, np.nan, -np.inf, 1.0, np.nan, np.inf, -0.0, 0.0, 1.0], dtype)
    x = lr.asarray(a)
    assert_exact(lr.sort(x), np.sort(a))
    assert_exact(lr.argsort(x), np.argsort(a, kind="stable"))
    down = lr.sort(x, descending=True).numpy()
    assert np.isnan(down[:2]).all() and down[2] == np.inf and down[-1] == -np.inf
    assert lr.argsort(x, descending=True).tolist() == [1, 4, 5, 0, 3, 8, 6, 7, 2]


def test_descending_is_stable_not_the_ascending_order_reversed(backend):
    a = np.array([[1, 3, 1, 2, 3], [0, 0, 0, 0, 0]], np.int8)
    got = lr.argsort(lr.asarray(a), axis=1, descending=True)
    assert got.tolist() == [[1, 4, 3, 0, 2], [0, 1, 2, 3, 4]]
    assert_exact(lr.sort(lr.asarray(a), axis=0, descending=True), np.sort(a, axis=0)[::-1])


def test_sort_of_size_0_and_broadcast_inputs(backend):
    e = np.zeros((0, 3), np.float32)
    assert_exact(lr.sort(lr.asarray(e), axis=0), e)
    assert_exact(lr.argsort(lr.asarray(e), axis=1), np.zeros((0, 3), np.int64))
    row = np.array([3, 1, 2], np.int32)
    b = lr.broadcast_to(lr.asarray(row), (2, 3))
    assert_exact(lr.sort(b), np.sort(np.broadcast_to(row, (2, 3))))


@given(data=st.data())
def test_searchsorted_matches_numpy(backend, data):
    dt = data.draw(st.sampled_from(DTYPES))
    base = np.sort(data.draw(arrays(dt, shapes(min_dims=1, max_dims=1, max_side=8),
                                    small=True)))
    values = data.draw(arrays(data.draw(st.sampled_from(DTYPES)), shapes(max_dims=3),
                              small=True))
    side = data.draw(st.sampled_from(["left", "right"]))
    t2, values = data.draw(lazy_inputs(values))
    got = lr.searchsorted(lr.asarray(base), t2, side=side)
    common = np.result_type(base, values)
    want = np.searchsorted(base.astype(common), values.astype(common), side=side)
    assert_exact(got, want.astype(np.int64))


@given(data=st.data())
def test_searchsorted_with_a_sorter(backend, data):
    dt = data.draw(st.sampled_from(DTYPES))
    base = data.draw(arrays(dt, shapes(min_dims=1, max_dims=1, max_side=8), small=True))
    values = data.draw(arrays(dt, shapes(max_dims=2), small=True))
    order = np.argsort(base, kind="stable")
    side = data.draw(st.sampled_from(["left", "right"]))
    sorter = lr.argsort(lr.asarray(base))  # pending: stays lazy
    got = lr.searchsorted(lr.asarray(base), lr.asarray(values), side=side, sorter=sorter)
    assert_exact(got, np.searchsorted(base, values, side=side, sorter=order).astype(np.int64))


def test_building_them_runs_nothing(backend, fresh_metrics):
    x = lr.asarray(np.array([[3.0, 1.0], [2.0, np.nan]])) * 2
    built = [lr.sort(x), lr.argsort(x, axis=0, descending=True),
             lr.searchsorted(lr.sort(lr.reshape(x, (-1,))), x, side="right")]
    snap = lr.metrics.snapshot()
    assert snap["materializations"] == 0 and snap["graphs_executed"] == 0
    assert all(t.is_pending for t in built)
    lr.sync(*built)
    assert_exact(built[2], [[3, 1], [2, 4]])


def test_errors_name_the_function():
    with pytest.raises(lr.AxisError, match="sort"):
        lr.sort(lr.zeros((2, 3)), axis=2)
    with pytest.raises(lr.ShapeError, match="argsort"):
        lr.argsort(lr.zeros(()))
    with pytest.raises(TypeError, match="sort"):
        lr.sort(lr.zeros(3), descending=None)
    with pytest.raises(lr.ShapeError, match="searchsorted"):
        lr.searchsorted(lr.zeros((2, 2)), lr.zeros(3))
    with pytest.raises(ValueError, match="searchsorted"):
        lr.searchsorted(lr.zeros(2), lr.zeros(3), side="middle")
    with pytest.raises(lr.ShapeError, match="searchsorted"):
        lr.searchsorted(lr.zeros(2), lr.zeros(3), sorter=lr.asarray([0]))
