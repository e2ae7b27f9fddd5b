"""take_along_axis (gather), scatter_add and index_add against NumPy
(``np.take_along_axis``, ``np.add.at``) on every backend: every dtype, every
axis, int32 and int64 indices, negative ones, broadcast and strided operands,
size-0 and out-of-range indices, and the kernels the compiled backends run."""
from __future__ import annotations

import gc
import sys
import logging

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazyrt as lr
from conftest import DTYPES, assert_matches

RNG = np.random.default_rng(11)
INDEX_DTYPES = (np.int32, np.int64)


def data(shape, dtype, special=False):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True
                            ).astype(dtype)
    out = (RNG.standard_normal(shape) * 10).astype(dtype)
    if special and out.size >= 3:
        out.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    return out


def indices(shape, n, dtype=np.int64, negative=True):
    low = -n if negative else 0
    return RNG.integers(low, n, shape).astype(dtype) if n else np.zeros(shape, dtype)


def numpy_scatter_add(x, idx, values, axis):
    """x + zeros with values added at idx along axis, np.add.at's order; float16
    summed in float32 (lazyrt's documented accumulator), ints wrapping."""
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    idx, values = np.broadcast_arrays(idx, values.astype(x.dtype))
    total = np.zeros(x.shape, acc)
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    where = tuple(idx if k == axis else
                  np.arange(d).reshape((1,) * k + (d,) + (1,) * (x.ndim - k - 1))
                  for k, d in enumerate(values.shape))
    with np.errstate(all="ignore"):
        np.add.at(total, where, values.astype(acc))
        return x + total.astype(x.dtype)


def kernel_names():
    return [k.name for k in lr.debug.last_record().kernels]


# --- take_along_axis ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_take_along_axis_matches_numpy_for_every_dtype(backend, dtype, index_dtype):
    x = data((5, 7), dtype, special=True)
    for axis in (0, 1, -1):
        idx = indices((9, 7) if axis == 0 else (5, 4), x.shape[axis], index_dtype)
        got = lr.take_along_axis(lr.asarray(x), lr.asarray(idx), axis=axis)
        assert_matches(got, np.take_along_axis(x, idx, axis=axis))


@pytest.mark.parametrize("rank", (1, 2, 3, 4))
def test_take_along_axis_on_every_axis_of_random_shapes(backend, rank):
    for axis in range(rank):
        shape = tuple(RNG.integers(1, 5, rank))
        x = data(shape, np.float32)
        ishape = tuple(int(RNG.integers(1, 6)) if k == axis else d for k, d in enumerate(shape))
        idx = indices(ishape, shape[axis])
        assert_matches(lr.take_along_axis(lr.asarray(x), lr.asarray(idx), axis=axis),
                       np.take_along_axis(x, idx, axis=axis))


def test_take_along_axis_broadcasts_off_the_axis_as_an_embedding_lookup(backend):
    weight = data((10, 6), np.float32)
    tokens = indices((4, 3), 10, negative=False)
    rows = lr.take_along_axis(lr.asarray(weight), lr.asarray(tokens.reshape(-1, 1)), axis=0)
    assert_matches(lr.reshape(rows, (4, 3, 6)), weight[tokens])
    # and the other way round: one index row shared by every row of x
    x = data((3, 8), np.int32)
    pick = np.array([[7, 0, 7, 2]])
    assert_matches(lr.take_along_axis(lr.asarray(x), lr.asarray(pick), axis=1),
                   np.take_along_axis(x, np.broadcast_to(pick, (3, 4)), axis=1))
    # and a source of one row read by several index rows
    row = data((1, 5), np.float64)
    picks = indices((3, 2), 5)
    assert_matches(lr.take_along_axis(lr.asarray(row), lr.asarray(picks), axis=1),
                   np.take_along_axis(np.broadcast_to(row, (3, 5)), picks, axis=1))


def test_take_along_axis_reads_strided_and_flipped_views(backend):
    x = data((6, 8), np.float64)
    idx = indices((6, 5), 8)
    t = lr.asarray(x)
    assert_matches(lr.take_along_axis(t.T, lr.asarray(idx.T.copy()), axis=0),
                   np.take_along_axis(x.T, idx.T, axis=0))
    assert_matches(lr.take_along_axis(lr.flip(t, axis=1)[::2], lr.asarray(idx[:3]), axis=1),
                   np.take_along_axis(np.flip(x, 1)[::2], idx[:3], axis=1))
    it = lr.asarray(idx)
    assert_matches(lr.take_along_axis(t[1:], it[1:, ::2], axis=1),
                   np.take_along_axis(x[1:], idx[1:, ::2], axis=1))


def test_take_along_axis_of_size_zero(backend):
    x = data((4, 5), np.float32)
    empty = np.zeros((0, 5), np.int64)
    assert_matches(lr.take_along_axis(lr.asarray(x), lr.asarray(empty), axis=0),
                   np.take_along_axis(x, empty, axis=0))
    none = np.zeros((0, 3), np.float32)
    assert_matches(lr.take_along_axis(lr.asarray(none), lr.asarray(np.zeros((0, 2), np.int64)),
                                      axis=1), np.zeros((0, 2), np.float32))
    with pytest.raises(IndexError, match="axis 0 of size 0"):
        lr.take_along_axis(lr.asarray(np.zeros((0, 3))), lr.asarray([[0, 0, 0]]), axis=0)


def _raises_out_of_range(backend, fn):
    # the jax backend raises from inside XLA: its own error type around the message
    kind = IndexError if backend != "jax" else Exception
    t = fn()
    # jax logs the callback's error with its traceback, whose frames hold ``t``
    quiet = logging.getLogger("jax._src.debugging")
    was, quiet.disabled = quiet.disabled, True
    try:
        t.numpy()
    except kind as exc:
        assert "out of range" in str(exc), exc
        exc.__traceback__ = None  # its frames hold the pending tensor
    else:
        raise AssertionError("an index out of range did not raise")
    finally:
        quiet.disabled = was
    del t  # it stays pending (it has no value): no later barrier may try it again
    gc.collect()


def test_an_index_out_of_range_raises_instead_of_reading_out_of_bounds(backend):
    x = lr.asarray(data((4, 3), np.float32))
    for bad in ([[4]], [[-5]], [[2**40]]):
        _raises_out_of_range(backend, lambda: lr.take_along_axis(x, lr.asarray(bad), axis=0))


def test_negative_indices_count_from_the_end_unless_refused(backend):
    x = data((4, 3), np.int64)
    idx = np.array([[-1, 0, -4]])
    assert_matches(lr.take_along_axis(lr.asarray(x), lr.asarray(idx), axis=0),
                   np.take_along_axis(x, idx, axis=0))
    _raises_out_of_range(backend, lambda: lr.take_along_axis(
        lr.asarray(x), lr.asarray(idx), axis=0, negative_indices=False))
    ok = np.array([[3, 0, 1]])
    assert_matches(lr.take_along_axis(lr.asarray(x), lr.asarray(ok), axis=0,
                                      negative_indices=False), np.take_along_axis(x, ok, axis=0))


def test_take_along_axis_refuses_bad_arguments_when_recorded():
    x = lr.asarray(np.zeros((3, 4)))
    with pytest.raises(lr.ShapeError, match="0-d"):
        lr.take_along_axis(lr.asarray(1.0), lr.asarray(0), axis=0)
    with pytest.raises(lr.ShapeError, match="rank"):
        lr.take_along_axis(x, lr.asarray([0, 1]), axis=0)
    with pytest.raises(lr.DTypeError, match="integer dtype"):
        lr.take_along_axis(x, lr.asarray([[0.0]]), axis=0)
    with pytest.raises(lr.ShapeError, match="broadcast"):
        lr.take_along_axis(x, lr.asarray(np.zeros((2, 3), np.int64)), axis=0)
    with pytest.raises(lr.AxisError):
        lr.take_along_axis(x, lr.asarray([[0]]), axis=2)


def test_narrow_index_dtypes_are_widened(backend):
    x = data((300,), np.float32)
    idx = np.array([250, 0, 7], np.uint8)
    assert_matches(lr.take_along_axis(lr.asarray(x), lr.asarray(idx), axis=0), x[idx])


# --- scatter_add and index_add --------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_scatter_add_matches_np_add_at_with_duplicates(backend, dtype, index_dtype):
    for axis in (0, 1):
        x = data((4, 5), dtype)
        vshape = (9, 5) if axis == 0 else (4, 11)
        values = data(vshape, dtype)
        idx = indices(vshape, x.shape[axis], index_dtype)  # 9 or 11 into 4 or 5: repeats
        got = lr.scatter_add(lr.asarray(x), lr.asarray(idx), lr.asarray(values), axis=axis)
        want = numpy_scatter_add(x, idx, values, axis)
        if backend == "c" or np.dtype(dtype).kind != "f":
            assert_matches(got, want, rtol=0, atol=0)  # C sums in np.add.at's order
        else:
            assert_matches(got, want)


@pytest.mark.parametrize("rank", (1, 2, 3))
def test_scatter_add_on_every_axis_of_random_shapes(backend, rank):
    for axis in range(rank):
        shape = tuple(int(d) for d in RNG.integers(1, 5, rank))
        vshape = tuple(int(RNG.integers(0, 7)) if k == axis else d for k, d in enumerate(shape))
        x, values = data(shape, np.float64), data(vshape, np.float64)
        idx = indices(vshape, shape[axis])
        assert_matches(lr.scatter_add(lr.asarray(x), lr.asarray(idx), lr.asarray(values),
                                      axis=axis), numpy_scatter_add(x, idx, values, axis))


def test_index_add_is_an_embedding_backward(backend):
    grad = data((12, 5), np.float32)
    tokens = indices((12,), 7, negative=False)
    want = np.zeros((7, 5), np.float32)
    np.add.at(want, tokens, grad)
    got = lr.index_add(lr.zeros((7, 5), dtype=lr.float32), lr.asarray(tokens),
                       lr.asarray(grad), axis=0)
    if backend == "c":
        np.testing.assert_array_equal(got.numpy(), want)
    else:
        assert_matches(got, want)
    # along the last axis, int32 indices, into a nonzero base
    base = data((3, 4), np.int64)
    cols = np.array([3, 3, 0], np.int32)
    vals = data((3, 3), np.int64)
    want = base.copy()
    np.add.at(want, (slice(None), cols), vals)
    assert_matches(lr.index_add(lr.asarray(base), lr.asarray(cols), lr.asarray(vals), axis=1),
                   want)


def test_scatter_add_of_no_values_is_the_base(backend):
    x = data((3, 2), np.float32)
    empty = np.zeros((0, 2))
    assert_matches(lr.scatter_add(lr.asarray(x), lr.asarray(np.zeros((0, 2), np.int64)),
                                  lr.asarray(empty), axis=0), x)
    assert_matches(lr.index_add(lr.asarray(x), lr.asarray(np.zeros(0, np.int64)),
                                lr.asarray(empty)), x)


def test_scatter_add_propagates_nan_and_wraps_ints(backend):
    x = np.zeros(2, np.float32)
    got = lr.scatter_add(lr.asarray(x), lr.asarray([0, 0, 1]),
                         lr.asarray(np.array([np.nan, 1, np.inf], np.float32)))
    assert_matches(got, np.array([np.nan, np.inf], np.float32))
    wrapped = lr.index_add(lr.zeros(1, dtype=lr.int8), lr.asarray([0, 0, 0]),
                           lr.asarray(np.array([100, 100, 100], np.int8)))
    assert wrapped.tolist() == [np.int8(44)]  # 300 - 256


def test_scatter_add_out_of_range_and_refused_negatives_raise(backend):
    x = lr.zeros((3, 2))
    v = lr.ones((1, 2))
    _raises_out_of_range(backend, lambda: lr.scatter_add(x, lr.asarray([[3, 0]]), v))
    _raises_out_of_range(backend, lambda: lr.index_add(x, lr.asarray([-1]), v,
                                                         negative_indices=False))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes are Python 3.11+")
def test_an_index_error_at_the_barrier_names_the_line_that_recorded_the_op(backend):
    """The check raises at the barrier, lines after the call that caused it: a
    note names the user's line of the graph's op of the kind that failed."""
    if backend == "jax":
        pytest.skip("jax raises from inside XLA at the host read, after the barrier")
    x = lr.zeros((3, 2))
    picked = lr.take_along_axis(x, lr.asarray([[3, 0]]), axis=0); gather_at = _here()  # noqa: E702
    added = lr.scatter_add(x, lr.asarray([[0, 1]]), lr.ones((1, 2))); scatter_at = _here()  # noqa: E702,E501
    total = picked.sum() + added.sum()
    with pytest.raises(IndexError, match="out of range") as caught:
        total.numpy()
    notes = getattr(caught.value, "__notes__", [])
    assert notes == [f"lazyrt: this graph's gather ops were recorded at {gather_at}"], notes
    assert scatter_at not in notes[0]  # the scatter's indices were in range: not named
    caught = None
    del total, picked, added  # they stay pending (no value): no later barrier tries again
    gc.collect()


def _here():
    frame = sys._getframe(1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def test_scatter_add_refuses_bad_arguments_when_recorded():
    x = lr.zeros((3, 4))
    with pytest.raises(lr.ShapeError, match="same rank"):
        lr.scatter_add(x, lr.asarray([0]), lr.ones((1, 4)))
    with pytest.raises(lr.ShapeError, match="do not broadcast on axis 1"):
        lr.scatter_add(x, lr.asarray([[0]]), lr.ones((1, 5)))
    with pytest.raises(lr.ShapeError, match="1-D"):
        lr.index_add(x, lr.asarray([[0]]), lr.ones((1, 4)))
    with pytest.raises(lr.ShapeError, match="do not match"):
        lr.index_add(x, lr.asarray([0, 1]), lr.ones((3, 4)))
    with pytest.raises(lr.DTypeError, match="integer dtype"):
        lr.index_add(x, lr.asarray([0.5]), lr.ones((1, 4)))


def test_c_scatter_add_is_deterministic_and_exact_across_threads():
    # large enough for the parallel path: threads split the columns, each sums its
    # elements in np.add.at's order
    values = data((40000, 3), np.float32)
    idx = indices((40000,), 5, negative=False)
    want = np.zeros((5, 3), np.float32)
    np.add.at(want, idx, values)
    with lr.backend("c"):
        got = lr.index_add(lr.zeros((5, 3), dtype=lr.float32), lr.asarray(idx),
                           lr.asarray(values)).numpy()
    np.testing.assert_array_equal(got, want)


# --- kernels ---------------------------------------------------------------------------

def _c_sources():
    return [k.source for k in lr.debug.last_record().kernels]


@pytest.mark.parametrize("rows,dim", [(6, 4), (40, 130), (5, 1), (0, 8), (7, 0), (1, 1)])
def test_c_gathers_whole_rows_from_a_row_base(rows, dim):
    """An embedding lookup (one index per row, broadcast along the row) reads
    each row from an offset computed once per row (``in1[i1 + g3]``), not with
    a clamp per element: the same values as NumPy for negative indices, size-0
    rows and tables, and in a column sum (a LayerNorm weight's gradient) that
    also stores the gathered sum element by element."""
    if "c" not in lr.available_backends():
        pytest.skip("no C compiler")
    w, pos = data((10, dim), np.float32), data((rows, dim), np.float32)
    scale = data((rows, 1), np.float32)
    idx = indices((rows, 1), 10)
    full = np.broadcast_to(idx, (rows, dim))
    want_x = np.take_along_axis(w, full, axis=0) + pos
    want_y = (want_x * scale).sum(axis=0)
    with lr.backend("c"):
        ix = lr.broadcast_to(lr.asarray(idx), (rows, dim))
        x = lr.take_along_axis(lr.asarray(w), ix, axis=0) + lr.asarray(pos)
        assert_matches(x, want_x, rtol=0, atol=0)
        if rows and dim:
            assert any(re.search(r"\+ g\d+\]", src) for src in _c_sources()), _c_sources()
        x = lr.take_along_axis(lr.asarray(w), ix, axis=0) + lr.asarray(pos)
        y = (x * lr.asarray(scale)).sum(axis=0)
        lr.sync(x, y)
        assert_matches(x, want_x, rtol=0, atol=0)
        assert_matches(y, want_y, rtol=1e-5, atol=1e-4)



def test_compiled_backends_run_gather_and_scatter_as_generated_kernels(backend):
    if backend not in ("c", "triton"):
        pytest.skip("the numpy and jax backends have no kernels of their own")
    w = data((10, 4), np.float32)
    idx = indices((6, 1), 10)
    scale, pos = data((1, 4), np.float32), data((6, 4), np.float32)
    out = lr.take_along_axis(lr.asarray(w), lr.asarray(idx), axis=0) * lr.asarray(scale) \
        + lr.asarray(pos)
    assert_matches(out, np.take_along_axis(w, idx, axis=0) * scale + pos)
    record = lr.debug.last_record()
    (kernel,) = record.kernels  # the gather fuses into its consumers: one kernel
    assert kernel.ops == ("gather", "mul", "add") and kernel.language == backend
    assert ("lz_gidx(" if backend == "c" else "tl.store(flag") in kernel.source
    assert kernel.bytes_moved >= (6 * 4 * 3 + 4) * 4 + 6 * 8  # w rows, pos, out; idx
    got = lr.index_add(lr.zeros((10, 4), dtype=lr.float32), lr.asarray(idx.reshape(-1)), out)
    got.numpy()
    assert any(k.ops == ("scatter_add",) and k.language == backend
               for k in lr.debug.last_record().kernels), kernel_names()
    want = np.zeros((10, 4), np.float32)
    np.add.at(want, idx.reshape(-1), np.take_along_axis(w, idx, axis=0) * scale + pos)
    assert_matches(got, want)


# --- a gather fused into the kernels that use it (the c and triton backends) ------------

#: the compiled backends here, whose kernels fuse a gather
COMPILED = [b for b in ("c", "triton") if b in lr.available_backends()]


def _kernels_on(name, out, want):
    """Compute ``out`` on backend ``name``, check it against ``want``; its kernels."""
    with lr.backend(name):
        assert_matches(out, want)
        return lr.debug.last_record().kernels


@pytest.mark.parametrize("compiled", COMPILED)
def test_embedding_plus_position_then_layer_norm_is_one_kernel(compiled):
    table, pos = data((50, 16), np.float32), data((8, 16), np.float32)
    tokens = indices((8, 1), 50, negative=False)
    g = lr.take_along_axis(lr.asarray(table), lr.asarray(tokens), axis=0) + lr.asarray(pos)
    mean = lr.mean(g, axis=-1, keepdims=True)
    var = lr.mean((g - mean) ** 2, axis=-1, keepdims=True)
    out = (g - mean) / lr.sqrt(var + 1e-5)
    h = np.take_along_axis(table, tokens, axis=0) + pos
    m = h.mean(-1, keepdims=True)
    want = (h - m) / np.sqrt(((h - m) ** 2).mean(-1, keepdims=True) + np.float32(1e-5))
    with lr.backend(compiled):
        got = out.numpy()
        (kernel,) = lr.debug.last_record().kernels
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert kernel.ops[0] == "gather" and "sum" in kernel.ops


@pytest.mark.parametrize("compiled", COMPILED)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.bool_], ids=str)
def test_a_fused_gather_reads_any_dtype_at_negative_and_broadcast_indices(dtype, index_dtype,
                                                                          compiled):
    src = data((7, 5), dtype)
    idx = indices((4, 1), 7, index_dtype)          # broadcast along axis 1, negatives too
    got = lr.take_along_axis(lr.asarray(src), lr.asarray(idx), axis=0)
    kernels = _kernels_on(compiled, lr.where(got == got, got, got),
                         np.take_along_axis(src, np.broadcast_to(idx, (4, 5)), axis=0))
    assert [k.ops[0] for k in kernels] == ["gather"]


@pytest.mark.parametrize("compiled", COMPILED)
def test_a_fused_gather_along_a_later_axis_of_a_transposed_source_seen_transposed(compiled):
    src = data((6, 9), np.float32)
    t = lr.asarray(src).T                          # (9, 6), strided
    idx = indices((9, 4), 6)
    g = lr.take_along_axis(t, lr.asarray(idx), axis=1)   # (9, 4)
    want = np.take_along_axis(src.T, idx, axis=1)
    kernels = _kernels_on(compiled, g.T * 2.0 + 1.0, want.T * np.float32(2) + np.float32(1))
    assert len(kernels) == 1 and kernels[0].ops[0] == "gather"
    assert _kernels_on(compiled, lr.sum(lr.take_along_axis(t, lr.asarray(idx), axis=1), axis=0),
                      want.sum(0))[0].ops[0] == "gather"


@pytest.mark.parametrize("compiled", COMPILED)
def test_a_gather_that_two_kernels_use_is_read_in_each(compiled):
    src, idx = data((10, 3), np.float32), indices((5, 3), 10)
    g = lr.take_along_axis(lr.asarray(src), lr.asarray(idx), axis=0)
    a, b = lr.sum(g, axis=0), g * 3.0
    want_g = np.take_along_axis(src, idx, axis=0)
    with lr.backend(compiled):
        lr.sync(a, b)
        assert_matches(a, want_g.sum(0))
        assert_matches(b, want_g * np.float32(3))
        kernels = lr.debug.last_record().kernels
    assert sum(k.ops.count("gather") for k in kernels) == 2 and len(kernels) == 2


@pytest.mark.parametrize("compiled", COMPILED)
def test_a_scan_of_a_gather_stores_the_gather_first(compiled):
    src, idx = data((8, 4), np.float32), indices((6, 4), 8)
    want = np.cumsum(np.take_along_axis(src, idx, axis=0), axis=0)
    kernels = _kernels_on(compiled, lr.cumulative_sum(
        lr.take_along_axis(lr.asarray(src), lr.asarray(idx), axis=0), axis=0), want)
    assert [k.ops[0] for k in kernels] == ["gather", "cumsum"]


@pytest.mark.parametrize("compiled", COMPILED)
def test_a_fused_gathers_bad_index_raises_naming_the_op_and_its_range(compiled):
    src = lr.asarray(data((5, 2), np.float32))
    with lr.backend(compiled):
        good = lr.take_along_axis(src, lr.asarray(np.array([[1], [4]])), axis=0) + 1.0
        good.numpy()
        bad = lr.take_along_axis(src, lr.asarray(np.array([[1], [5]])), axis=0) + 1.0
        with pytest.raises(IndexError, match=r"take_along_axis: index 5 is out of range for "
                                              r"axis 0 of size 5 .* \[-5, 5\)"):
            bad.numpy()
        bad._node = good._node                     # nothing left pending
        neg = lr.take_along_axis(src, lr.asarray(np.array([[-6]])), axis=0) * 2.0
        with pytest.raises(IndexError, match="index -6 is out of range"):
            neg.numpy()
        neg._node = good._node


@pytest.mark.parametrize("compiled", COMPILED)
@settings(deadline=None)
@given(st.data())
def test_random_gathers_fused_with_random_consumers_match_numpy(compiled, draw):
    """A gather along a random axis of a random (possibly transposed) source, by
    int32 or int64 indices (broadcast, negative), then a consumer the compiled
    backends fuse it into: pointwise, a reduction over any axis, a transpose."""
    ndim = draw.draw(st.integers(1, 3))
    shape = tuple(draw.draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    axis = draw.draw(st.integers(0, ndim - 1))
    src = data(shape, draw.draw(st.sampled_from([np.float32, np.float64, np.int64])))
    out_shape = list(shape)
    out_shape[axis] = draw.draw(st.integers(0, 6))
    idx_shape = [d if a == axis or draw.draw(st.booleans()) else 1
                 for a, d in enumerate(out_shape)]
    idx = indices(tuple(idx_shape), shape[axis], draw.draw(st.sampled_from(INDEX_DTYPES)))
    transposed = ndim > 1 and draw.draw(st.booleans())
    s_np = np.ascontiguousarray(src.T).T if transposed else src
    source = lr.asarray(np.ascontiguousarray(src.T)).T if transposed else lr.asarray(src)
    g = lr.take_along_axis(source, lr.asarray(idx), axis=axis)
    want = np.take_along_axis(s_np, np.broadcast_to(idx, out_shape), axis=axis)
    consumer = draw.draw(st.sampled_from(["mul", "sum", "max", "transpose", "none"]))
    red = draw.draw(st.integers(0, ndim - 1))
    if consumer == "mul":
        g, want = g * 3 + 1, want * 3 + 1
    elif consumer == "sum":
        g, want = lr.sum(g, axis=red), want.sum(axis=red)
    elif consumer == "max" and want.shape[red]:
        g, want = lr.max(g, axis=red), want.max(axis=red)
    elif consumer == "transpose":
        g, want = lr.permute_dims(g, tuple(reversed(range(ndim)))) + 0, want.T + 0
    with lr.backend(compiled):
        assert_matches(g, want)


def test_only_a_backend_whose_kernels_gather_fuses_it():
    from lazyrt._capture import capture
    from lazyrt.graph import Graph
    from lazyrt.planner import Capabilities, OpaqueStep, plan
    computed = lr.asarray(indices((4, 3), 6)) % 6   # indices a kernel computes are stored
    g = lr.take_along_axis(lr.asarray(data((6, 3), np.float32)), computed, axis=0) + 1.0
    graph = Graph.from_capture(capture([g._node]))
    opaque = plan(graph)                           # the default capabilities
    assert [s.kind for s in opaque.steps if isinstance(s, OpaqueStep)] == ["gather"]
    fused = plan(graph, Capabilities(gather_in_kernels=True))
    assert not any(isinstance(s, OpaqueStep) for s in fused.steps)
    assert [[st.op for st in k.body].count("gather") for k in fused.kernels] == [0, 1]
    assert any("indices of a gather" in why for _, why in fused.unfused)
    lr.sync()


def test_a_new_batch_size_reuses_the_compiled_gather(backend):
    if backend != "c":
        pytest.skip("C binaries take sizes as runtime arguments")
    w = lr.asarray(data((10, 4), np.float32))
    lr.take_along_axis(w, lr.asarray(indices((3, 1), 10)), axis=0).numpy()
    compiles = lr.metrics.compiles
    got = lr.take_along_axis(w, lr.asarray(indices((17, 1), 10)), axis=0).numpy()
    assert got.shape == (17, 4)
    assert lr.metrics.compiles == compiles


@pytest.mark.parametrize("dtype", ("float16", "float32", "float64", "int8", "int64", "bool"))
def test_triton_gather_and_scatter_compile_for_sm90(dtype, monkeypatch):
    # as tests/test_triton_aot.py: the kernels compile for the H200 (ptxas included)
    # with no GPU here: a fused gather's (its flag stores too), and the scatter's
    # atomics of every accumulator dtype
    pytest.importorskip("triton.backends.nvidia")
    if "triton" not in lr.available_backends():
        pytest.skip("triton backend unavailable")
    from lazyrt import runtime
    from lazyrt.backends import triton_aot
    from lazyrt.backends.triton import TritonBackend
    from lazyrt.graph import Graph
    monkeypatch.setenv(triton_aot.ENV, "cuda:90")
    be = TritonBackend()
    be.salt = lr.backends.get("triton").salt
    x = lr.asarray(data((20, 8), dtype))
    idx = lr.asarray(indices((30, 8), 20))
    for out in (lr.take_along_axis(x, idx, axis=0),
                lr.scatter_add(x, idx, lr.take_along_axis(x, idx, axis=0), axis=0)):
        cap = runtime.capture([out._node], be.salt)
        program = be.compile(Graph.from_capture(cap))
        kernels = program.record.kernels    # the fused gather's kernel, the scatter's own
        assert any(k.ops[:1] == ("gather",) or k.name.startswith("lz_scatter") for k in kernels)
        for k in kernels:
            (sm90,) = [r for r in k.resources if r.target == "sm_90"]
            assert 0 < sm90.regs <= 255 and sm90.spills == 0, sm90
        out.numpy()


def test_the_jax_backend_gathers_and_scatters_as_numpy():
    # the jax backend is opt-in for the shared suite (LAZYRT_TEST_BACKENDS=jax runs
    # all of this file on it); this check runs wherever jax is installed
    if "jax" not in lr.available_backends():
        pytest.skip("jax backend unavailable")
    x = data((6, 4), np.float16)
    idx = indices((9, 4), 6, np.int32)
    values = data((9, 4), np.float16)
    with lr.backend("jax"):
        got = lr.take_along_axis(lr.asarray(x), lr.asarray(idx), axis=0)
        added = lr.scatter_add(lr.asarray(x), lr.asarray(idx), lr.asarray(values), axis=0)
        assert_matches(got, np.take_along_axis(x, idx, axis=0))
        assert_matches(added, numpy_scatter_add(x, idx, values, 0))
        flags = lr.index_add(lr.zeros(3, dtype=lr.bool_), lr.asarray([2, 2]),
                             lr.asarray([True, False]))
        assert flags.tolist() == [False, False, True]
        _raises_out_of_range("jax", lambda: lr.take_along_axis(lr.asarray(x),
                                                               lr.asarray([[6]]), axis=0))


def test_triton_on_a_gpu_raises_after_the_last_launch():
    # as on a GPU: the launches leave their flags and the program reads them once,
    # after its last launch (simulated on the CPU: no GPU here)
    if "triton" not in lr.available_backends():
        pytest.skip("triton backend unavailable")
    from lazyrt import runtime
    from lazyrt.graph import Graph
    be = lr.backends.get("triton")
    x = lr.asarray(data((5, 3), np.float32))
    bad = lr.take_along_axis(x, lr.asarray([[1], [7]]), axis=0) * 2.0
    cap = runtime.capture([bad._node], be.salt)
    program = be.compile(Graph.from_capture(cap))
    program.use_graphs = False
    program.on_cpu = False
    (gather,) = program.checks
    gather.on_cpu = False
    with pytest.raises(IndexError, match="index 7 is out of range for axis 0 of size 5"):
        program.run(cap.values)
    good = lr.take_along_axis(x, lr.asarray([[1], [4]]), axis=0) * 2.0
    cap = runtime.capture([good._node], be.salt)
    (out,) = program.run(cap.values)  # the same program: the flag was cleared
    np.testing.assert_array_equal(out, x.numpy()[[1, 4]] * 2)
    del bad, good, cap
    gc.collect()
