"""Boolean-mask assignment and the functions whose output shape depends on
the data (``nonzero``, ``unique_*``), against NumPy on every backend.

A mask assignment of a value that does not depend on how many elements the
mask selects is a lazy ``where``; the rest are barriers, each counted once in
``lr.metrics`` at the user's line.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazyrt as lr
from conftest import DTYPE_NAMES, arrays, assert_exact, lazy_inputs, shapes


def _line_here() -> int:
    return inspect.currentframe().f_back.f_lineno


# --- x[mask] = value ----------------------------------------------------------------------

@st.composite
def masked(draw, dtype=None):
    """(tensor, array, mask tensor, mask array, mask ndim) of a random dtype and layout."""
    dt = dtype or draw(st.sampled_from(DTYPE_NAMES))
    shape = draw(shapes(max_dims=3))
    t, a = draw(lazy_inputs(draw(arrays(dt, shape, small=True))))
    k = draw(st.integers(0, len(shape)))
    m = draw(arrays("bool", shape[:k]))
    mask = lr.asarray(m) if draw(st.booleans()) else m
    return t, np.array(a), mask, m, k


@given(data=st.data())
def test_mask_assign_of_a_scalar_matches_numpy_and_stays_lazy(backend, data):
    t, a, mask, m, _ = data.draw(masked())
    value = data.draw(st.sampled_from([True, 0, 1, 7]) if a.dtype.kind != "f"
                      else st.sampled_from([0.5, -2.0, float("nan"), float("inf"), 3]))
    if a.dtype.kind == "b":
        value = bool(value)
    lr.metrics.reset()
    t[mask] = value
    assert lr.metrics.materializations == 0 and t.is_pending
    a[m] = value
    assert_exact(t, a)


@given(data=st.data())
def test_mask_assign_of_one_row_broadcast_is_lazy(backend, data):
    t, a, mask, m, k = data.draw(masked())
    rest = a.shape[k:]
    v = data.draw(arrays(a.dtype, data.draw(st.sampled_from([rest, rest[1:], (1,) + rest])),
                         small=True))
    lr.metrics.reset()
    t[mask] = lr.asarray(v)
    assert lr.metrics.materializations == 0
    a[m] = v
    assert_exact(t, a)


@given(data=st.data())
def test_mask_assign_of_one_row_per_true_is_a_barrier(backend, data):
    t, a, mask, m, k = data.draw(masked())
    rows = int(m.sum())
    v = data.draw(arrays(a.dtype, (rows,) + a.shape[k:], small=True))
    lr.metrics.reset()
    t[mask] = lr.asarray(v) * 1 if a.dtype.kind != "b" else lr.asarray(v)
    # one row is one element's value (a lazy where); any other count needs the mask
    assert lr.metrics.materializations == (0 if rows == 1 else 1)
    assert t.is_pending == (rows == 1)
    a[m] = v
    assert_exact(t, a)


def test_mask_assign_has_value_semantics(backend):
    x = lr.asarray([1.0, -2.0, 3.0, -4.0])
    y = x[:]
    x[x < 0] = 0.0
    assert_exact(x, np.array([1.0, 0.0, 3.0, 0.0]))
    assert_exact(y, np.array([1.0, -2.0, 3.0, -4.0]))
    x[lr.asarray([True, False, True, False])] = lr.asarray([10.0, 30.0])
    assert_exact(x, np.array([10.0, 0.0, 30.0, 0.0]))
    assert_exact(y, np.array([1.0, -2.0, 3.0, -4.0]))


def test_a_list_of_python_bools_is_a_mask_as_in_numpy(backend):
    x = lr.asarray([1, 2, 3])
    x[[True, False, True]] = 0
    assert_exact(x, np.array([0, 2, 0]))
    with pytest.raises(IndexError, match="boolean mask alone"):
        x[[0, 2]] = 5


def test_mask_assign_errors_name_the_shapes():
    x = lr.zeros((2, 3))
    with pytest.raises(IndexError, match=r"mask of shape \(3,\).*shape \(2, 3\)"):
        x[lr.asarray([True, False, True])] = 1.0
    with pytest.raises(lr.ShapeError, match=r"value of shape \(2,\).*each of shape \(3,\)"):
        x[lr.asarray([True, False])] = lr.asarray([1.0, 2.0])
    with pytest.raises(lr.ShapeError, match=r"3 selected elements"):
        lr.zeros(4)[lr.asarray([True, True, True, False])] = lr.asarray([1.0, 2.0])
    with pytest.raises(OverflowError, match="300 is out of bounds for int8"):
        lr.zeros(2, dtype="int8")[lr.asarray([True, False])] = 300


def test_mask_assign_of_a_scalar_is_one_where_and_no_barrier(backend, fresh_metrics):
    x = lr.asarray(np.arange(6.0).reshape(2, 3))
    x[x > 2] = -1.0
    x[lr.asarray([True, False])] = 0.5
    assert x.is_pending and lr.metrics.materializations == 0
    assert_exact(x, np.array([[0.5, 0.5, 0.5], [-1.0, -1.0, -1.0]]))


# --- nonzero ---------------------------------------------------------------------------

@given(data=st.data())
def test_nonzero_matches_numpy(backend, data):
    dt = data.draw(st.sampled_from(DTYPE_NAMES))
    t, a = data.draw(lazy_inputs(data.draw(arrays(dt, data.draw(shapes(min_dims=1)),
                                                  small=True))))
    out = lr.nonzero(t)
    expected = np.nonzero(a)
    assert len(out) == a.ndim
    for got, want in zip(out, expected):
        assert_exact(got, want.astype(np.int64))


def test_nonzero_refuses_a_0d_tensor():
    with pytest.raises(lr.ShapeError, match="lazyrt.nonzero: a 0-d tensor"):
        lr.nonzero(lr.asarray(3))


def test_nonzero_counts_one_materialization_at_the_user_s_line(backend, fresh_metrics):
    x = lr.asarray([0.0, 1.0, 2.0]) * 2
    line = _line_here() + 1
    idx, = lr.nonzero(x)
    assert lr.metrics.materializations == 1
    assert lr.metrics.snapshot()["materialized_at"] == {f"{__file__}:{line}": 1}
    assert idx.numpy().tolist() == [1, 2]


# --- unique_* ---------------------------------------------------------------------------

def _numpy_unique(a):
    values, index, inverse, counts = np.unique(a.reshape(-1), return_index=True,
                                               return_inverse=True, return_counts=True,
                                               equal_nan=False)
    return values, index, inverse.reshape(a.shape), counts


@given(data=st.data())
def test_unique_all_matches_numpy_with_each_nan_distinct(backend, data):
    dt = data.draw(st.sampled_from(DTYPE_NAMES))
    t, a = data.draw(lazy_inputs(data.draw(arrays(dt, data.draw(shapes(max_dims=3)),
                                                  small=True))))
    out = lr.unique_all(t)
    assert type(out).__name__ == "UniqueAllResult"
    assert out._fields == ("values", "indices", "inverse_indices", "counts")
    values, index, inverse, counts = _numpy_unique(a)
    assert_exact(out.values, values)
    assert_exact(out.indices, index.astype(np.int64))
    assert_exact(out.inverse_indices, inverse.astype(np.int64))
    assert_exact(out.counts, counts.astype(np.int64))
    # the standard's identities
    flat = a.reshape(-1)
    assert_exact(lr.asarray(flat[out.indices.numpy()]), values)
    assert_exact(lr.asarray(values[out.inverse_indices.numpy()]), a)
    assert int(out.counts.numpy().sum()) == a.size
    if a.dtype.kind == "f":
        assert int(np.isnan(out.values.numpy()).sum()) == int(np.isnan(a).sum())


def test_unique_of_nans_zeros_and_the_other_three(backend):
    a = np.array([[2.0, np.nan, -0.0], [0.0, np.nan, 2.0]], dtype=np.float32)
    x = lr.asarray(a) + 0
    counts = lr.unique_counts(x)
    assert counts._fields == ("values", "counts")
    assert_exact(counts.values, np.array([0.0, 2.0, np.nan, np.nan], np.float32))
    assert_exact(counts.counts, np.array([2, 2, 1, 1]))
    inverse = lr.unique_inverse(x)
    assert inverse._fields == ("values", "inverse_indices")
    assert inverse.inverse_indices.shape == (2, 3)
    assert_exact(lr.asarray(inverse.values.numpy()[inverse.inverse_indices.numpy()]), a)
    assert_exact(lr.unique_values(x), np.array([0.0, 2.0, np.nan, np.nan], np.float32))


@pytest.mark.parametrize("dt", DTYPE_NAMES)
def test_unique_of_0d_and_size_0(backend, dt):
    zero_d = lr.asarray(np.array(1, dtype=dt))
    out = lr.unique_all(zero_d)
    assert_exact(out.values, np.array([1], dtype=dt))
    assert out.inverse_indices.shape == () and out.counts.numpy().tolist() == [1]
    empty = lr.zeros((0, 3), dtype=dt)
    out = lr.unique_all(empty)
    assert out.values.shape == (0,) and out.values.dtype == np.dtype(dt)
    assert out.inverse_indices.shape == (0, 3) and out.counts.dtype == np.int64


def test_each_unique_call_is_one_materialization_at_its_line(backend, fresh_metrics):
    x = lr.asarray([3, 1, 3]) + 1
    first = _line_here() + 1
    lr.unique_values(x)
    lr.unique_counts(x); lr.unique_inverse(x); lr.unique_all(x)  # noqa: E702
    where = lr.metrics.snapshot()["materialized_at"]
    assert lr.metrics.materializations == 4
    assert where == {f"{__file__}:{first}": 1, f"{__file__}:{first + 1}": 3}


def test_data_dependent_docstrings_say_they_are_barriers():
    for fn in (lr.nonzero, lr.unique_all, lr.unique_counts, lr.unique_inverse,
               lr.unique_values):
        assert "barrier" in fn.__doc__
