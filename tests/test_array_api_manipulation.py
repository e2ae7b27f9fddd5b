"""Array-API creation and manipulation against NumPy, on every backend:
``tril triu meshgrid broadcast_arrays flip moveaxis permute_dims repeat roll
tile unstack take matrix_transpose tensordot vecdot`` and ``Tensor.mT``.

Random shapes (0-d and size-0 included), every dtype, inputs reached through
strided and broadcast views; bad axes and shapes fail naming the function;
building any of them runs nothing (only ``repeat`` by a pending tensor of
counts is a barrier, and it is counted).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import lazyrt as lr
from conftest import DTYPES, arrays, assert_exact, assert_matches, lazy_inputs, shapes


@st.composite
def inputs(draw, min_dims=0, max_dims=4, dtype=None):
    dt = dtype or draw(st.sampled_from(DTYPES))
    a = draw(arrays(dt, shapes(min_dims=min_dims, max_dims=max_dims)))
    return draw(lazy_inputs(a))


def _axis_of(draw, ndim):
    return draw(st.integers(-ndim, ndim - 1))


# --- triangles --------------------------------------------------------------------

@given(data=st.data())
def test_tril_and_triu_match_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=2))
    k = data.draw(st.integers(-4, 4))
    assert_exact(lr.tril(t, k=k), np.tril(a, k))
    assert_exact(lr.triu(t, k=k), np.triu(a, k))


def test_tril_is_one_kernel_and_k_does_not_recompile(backend, fresh_metrics):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for k in (0, 1, -1):
        out = lr.tril(lr.asarray(a), k=k)
        assert_exact(out, np.tril(a, k))
    if backend in ("c", "triton"):
        assert len(lr.debug.last_record().kernels) == 1
    assert lr.metrics.snapshot()["cache_misses"] <= 1


@pytest.mark.parametrize("fn", [lr.tril, lr.triu])
def test_triangles_need_a_matrix(fn):
    with pytest.raises(lr.ShapeError, match=fn.__name__):
        fn(lr.zeros((3,)))


# --- reordering -------------------------------------------------------------------

@given(data=st.data())
def test_flip_matches_numpy(backend, data):
    t, a = data.draw(inputs())
    if a.ndim and data.draw(st.booleans()):
        axis = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=a.ndim,
                                  unique_by=lambda v: v % a.ndim).map(tuple))
        if len(axis) == 1:
            axis = axis[0]
    else:
        axis = None
    assert_exact(lr.flip(t, axis=axis), np.flip(a, axis))


@given(data=st.data())
def test_roll_matches_numpy(backend, data):
    t, a = data.draw(inputs())
    shift = data.draw(st.integers(-9, 9))
    if a.ndim and data.draw(st.booleans()):
        axis = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=3))
        shift = tuple(data.draw(st.integers(-9, 9)) for _ in axis)
        axis = tuple(axis)
    else:
        axis = None
    assert_exact(lr.roll(t, shift, axis=axis), np.roll(a, shift, axis))


@given(data=st.data())
def test_moveaxis_and_permute_dims_match_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=1))
    src = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=a.ndim,
                             unique_by=lambda v: v % a.ndim))
    dst = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=len(src),
                             max_size=len(src), unique_by=lambda v: v % a.ndim))
    assert_exact(lr.moveaxis(t, tuple(src), tuple(dst)), np.moveaxis(a, src, dst))
    perm = data.draw(st.permutations(range(a.ndim)))
    assert_exact(lr.permute_dims(t, tuple(perm)), np.permute_dims(a, perm))


def test_permute_dims_of_a_0d_tensor():
    assert_exact(lr.permute_dims(lr.asarray(2.5), ()), np.float64(2.5))


@given(data=st.data())
def test_matrix_transpose_and_mT_match_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=2))
    assert_exact(lr.matrix_transpose(t), np.matrix_transpose(a))
    assert_exact(t.mT, a.mT)


# --- broadcasting and grids -----------------------------------------------------------

@given(data=st.data())
def test_broadcast_arrays_matches_numpy(backend, data):
    from conftest import broadcast_pairs
    shapes_ = data.draw(broadcast_pairs()).input_shapes
    dts = [data.draw(st.sampled_from(DTYPES)) for _ in shapes_]
    pairs = [data.draw(lazy_inputs(data.draw(arrays(dt, s)))) for dt, s in zip(dts, shapes_)]
    outs = lr.broadcast_arrays(*(t for t, _ in pairs))
    for got, want in zip(outs, np.broadcast_arrays(*(a for _, a in pairs))):
        assert_exact(got, want)


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sizes", [(), (3,), (3, 2), (2, 0, 4), (1, 3, 2)])
def test_meshgrid_matches_numpy(backend, sizes, indexing):
    rng = np.random.default_rng(len(sizes))
    dts = [np.dtype(d) for d in ("float32", "int8", "bool")]
    arrs = [rng.integers(0, 5, n).astype(dts[i % 3]) for i, n in enumerate(sizes)]
    outs = lr.meshgrid(*(lr.asarray(a) for a in arrs), indexing=indexing)
    want = np.meshgrid(*arrs, indexing=indexing)
    assert isinstance(outs, list) and len(outs) == len(want)
    for got, w in zip(outs, want):
        assert_exact(got, w)


def test_broadcast_and_meshgrid_errors_name_the_function():
    with pytest.raises(lr.ShapeError, match="broadcast_arrays"):
        lr.broadcast_arrays(lr.zeros((2,)), lr.zeros((3,)))
    with pytest.raises(lr.ShapeError, match="meshgrid"):
        lr.meshgrid(lr.zeros((2, 2)))
    with pytest.raises(ValueError, match="meshgrid"):
        lr.meshgrid(lr.zeros(2), indexing="xz")


# --- repetition -------------------------------------------------------------------------

@given(data=st.data())
def test_tile_matches_numpy(backend, data):
    t, a = data.draw(inputs(max_dims=3))
    reps = tuple(data.draw(st.lists(st.integers(0, 3), max_size=4)))
    assert_exact(lr.tile(t, reps), np.tile(a, reps))


@given(data=st.data())
def test_repeat_by_an_int_matches_numpy(backend, data):
    t, a = data.draw(inputs())
    r = data.draw(st.integers(0, 3))
    axis = _axis_of(data.draw, a.ndim) if a.ndim and data.draw(st.booleans()) else None
    assert_exact(lr.repeat(t, r, axis=axis), np.repeat(a, r, axis))


@given(data=st.data())
def test_repeat_by_a_tensor_matches_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=1, max_dims=3))
    axis = _axis_of(data.draw, a.ndim)
    n = a.shape[axis]
    counts = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                        np.int64)
    assert_exact(lr.repeat(t, lr.asarray(counts), axis=axis), np.repeat(a, counts, axis))


def test_repeat_by_a_pending_tensor_is_one_counted_barrier(backend, fresh_metrics):
    a = np.arange(6.0).reshape(2, 3)
    x = lr.asarray(a) * 2
    counts = lr.asarray(np.array([1, 0, 2])) + 0
    out = lr.repeat(x, counts, axis=1)
    snap = lr.metrics.snapshot()
    assert snap["materializations"] == 1 and out.is_pending and x.is_pending
    assert_exact(out, np.repeat(a * 2, [1, 0, 2], axis=1))


def test_repeat_errors_name_the_function():
    x = lr.zeros((2, 3))
    with pytest.raises(lr.ShapeError, match="repeat"):
        lr.repeat(x, lr.asarray([1, 2]), axis=1)
    with pytest.raises(ValueError, match="repeat"):
        lr.repeat(x, -1)
    with pytest.raises(lr.DTypeError, match="repeat"):
        lr.repeat(x, lr.asarray([1.0, 2.0, 3.0]), axis=1)
    with pytest.raises(lr.AxisError, match="repeat"):
        lr.repeat(x, 2, axis=2)


# --- splitting and indexed reads ---------------------------------------------------------

@given(data=st.data())
def test_unstack_matches_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=1, max_dims=3))
    axis = _axis_of(data.draw, a.ndim)
    got = lr.unstack(t, axis=axis)
    want = np.unstack(a, axis=axis)
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(got, want):
        assert_exact(g, w)


@given(data=st.data())
def test_take_matches_numpy(backend, data):
    t, a = data.draw(inputs(min_dims=1))
    axis = _axis_of(data.draw, a.ndim)
    n = a.shape[axis]
    dt = data.draw(st.sampled_from(["int8", "uint8", "int32", "int64"]))
    lo = 0 if dt == "uint8" else -n
    hi = min(n - 1, np.iinfo(dt).max)
    values = data.draw(st.lists(st.integers(lo, hi), max_size=6)) if n else []
    idx = np.asarray(values, dtype=dt)
    got = lr.take(t, lr.asarray(idx), axis=axis)
    assert_exact(got, np.take(a, idx, axis=axis))


def test_take_along_the_only_axis_needs_no_axis(backend):
    a = np.array([5, 6, 7], np.int32)
    assert_exact(lr.take(lr.asarray(a), lr.asarray([2, -3, 2])), np.take(a, [2, 0, 2]))


def test_take_out_of_range_raises_when_computed_never_reads_out_of_bounds(backend):
    x = lr.asarray(np.arange(5.0))
    for bad in ([5], [-6], [0, 100]):
        out = lr.take(x, lr.asarray(bad))
        with pytest.raises(Exception, match="take") as err:
            out.numpy()
        assert isinstance(err.value, IndexError) or backend == "jax"
        out._node = lr.asarray(np.zeros(len(bad)))._node  # leave nothing failing pending


def test_take_errors_name_the_function():
    x = lr.zeros((2, 3))
    with pytest.raises(ValueError, match="take.*axis"):
        lr.take(x, lr.asarray([0]))
    with pytest.raises(lr.ShapeError, match="take"):
        lr.take(x, lr.asarray([[0]]), axis=0)
    with pytest.raises(lr.DTypeError, match="take"):
        lr.take(x, lr.asarray([0.0]), axis=0)
    with pytest.raises(lr.AxisError, match="take"):
        lr.take(x, lr.asarray([0]), axis=2)
    with pytest.raises(IndexError, match="take"):
        lr.take(lr.zeros((0, 3)), lr.asarray([0]), axis=0)


# --- contractions ----------------------------------------------------------------------------

NUMERIC = [d for d in DTYPES]


@given(data=st.data())
def test_tensordot_matches_numpy(backend, data):
    dt = data.draw(st.sampled_from(NUMERIC))
    s1 = data.draw(shapes(max_dims=3, max_side=4))
    n = data.draw(st.integers(0, len(s1)))
    contracted = s1[len(s1) - n:]
    rest = data.draw(shapes(max_dims=2, max_side=4))
    t1, a1 = data.draw(lazy_inputs(data.draw(arrays(dt, s1, special=False, small=True))))
    t2, a2 = data.draw(lazy_inputs(data.draw(arrays(dt, contracted + rest, special=False, small=True))))
    assert_matches(lr.tensordot(t1, t2, axes=n), np.tensordot(a1, a2, axes=n))


def test_tensordot_with_axis_pairs_and_negative_axes(backend):
    rng = np.random.default_rng(0)
    a1, a2 = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 2, 3))
    got = lr.tensordot(lr.asarray(a1), lr.asarray(a2), axes=([0, -1], [-1, 0]))
    assert_matches(got, np.tensordot(a1, a2, axes=([0, 2], [2, 0])))
    b = rng.integers(0, 3, (4, 1)).astype(np.int8)
    c = rng.integers(0, 3, (4, 6)).astype(np.uint8)
    assert_matches(lr.tensordot(lr.asarray(b), lr.asarray(c), axes=([0], [0])),
                   np.tensordot(b, c, axes=([0], [0])).astype(np.int32))


def test_tensordot_errors_name_the_function():
    with pytest.raises(lr.ShapeError, match="tensordot"):
        lr.tensordot(lr.zeros((2, 3)), lr.zeros((4, 2)), axes=1)
    with pytest.raises(ValueError, match="tensordot"):
        lr.tensordot(lr.zeros((2, 3)), lr.zeros((3,)), axes=3)


@given(data=st.data())
def test_vecdot_matches_numpy(backend, data):
    from conftest import broadcast_pairs
    pair = data.draw(broadcast_pairs(min_dims=1, max_side=4))
    s1, s2 = pair.input_shapes
    assume(len(s1) >= 1 and len(s2) >= 1)
    k = data.draw(st.integers(0, 4))
    s1, s2 = s1[:-1] + (k,), s2[:-1] + (k,)
    dt1, dt2 = data.draw(st.sampled_from(NUMERIC)), data.draw(st.sampled_from(NUMERIC))
    t1, a1 = data.draw(lazy_inputs(data.draw(arrays(dt1, s1, special=False, small=True))))
    t2, a2 = data.draw(lazy_inputs(data.draw(arrays(dt2, s2, special=False, small=True))))
    want = np.vecdot(a1, a2)
    if want.dtype == np.int16:
        want = np.vecdot(a1.astype(np.int32), a2.astype(np.int32))  # lazyrt's int8 x uint8
    atol = None
    if want.dtype == np.float16:  # cancellation: the error bound scales with sum |a*b|
        terms = np.abs(a1.astype(np.float64) * a2.astype(np.float64)).sum(-1)
        atol = max(5e-2, float(np.max(terms, initial=0.0)) * (k + 1) * 2.0 ** -11)
    assert_matches(lr.vecdot(t1, t2), want, rtol=1e-2 if want.dtype == np.float16 else None,
                   atol=atol)


def test_vecdot_along_another_axis(backend):
    rng = np.random.default_rng(1)
    a1, a2 = rng.standard_normal((3, 4)), rng.standard_normal((2, 3, 1))
    assert_matches(lr.vecdot(lr.asarray(a1), lr.asarray(np.broadcast_to(a2, (2, 3, 4))),
                             axis=-2),
                   np.vecdot(a1, np.broadcast_to(a2, (2, 3, 4)), axis=-2))


def test_vecdot_errors_name_the_function():
    with pytest.raises(lr.ShapeError, match="vecdot"):
        lr.vecdot(lr.zeros((2, 3)), lr.zeros((2, 1)))
    with pytest.raises(lr.ShapeError, match="vecdot"):
        lr.vecdot(lr.zeros(()), lr.zeros((2,)))
    with pytest.raises(lr.AxisError, match="vecdot"):
        lr.vecdot(lr.zeros((2, 3)), lr.zeros((2, 3)), axis=2)


# --- errors and laziness ------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda x: lr.flip(x, axis=3), lambda x: lr.roll(x, 1, axis=-4),
    lambda x: lr.moveaxis(x, 0, 3), lambda x: lr.unstack(x, axis=3),
    lambda x: lr.flip(x, axis=(0, -3)),
], ids=["flip", "roll", "moveaxis", "unstack", "flip"])
def test_bad_axes_name_the_function(call):
    x = lr.zeros((2, 3, 4))
    name = call.__code__.co_names[-1]
    with pytest.raises(lr.AxisError, match=name):
        call(x)


def test_errors_on_bad_shapes_name_the_function():
    with pytest.raises(lr.ShapeError, match="matrix_transpose"):
        lr.matrix_transpose(lr.zeros((3,)))
    with pytest.raises(lr.AxisError, match="permute_dims"):
        lr.permute_dims(lr.zeros((2, 3)), (0,))
    with pytest.raises(lr.ShapeError, match="unstack"):
        lr.unstack(lr.zeros(()))
    with pytest.raises(ValueError, match="tile"):
        lr.tile(lr.zeros(2), (-1,))


def test_building_them_runs_nothing(backend, fresh_metrics):
    x = lr.asarray(np.arange(24.0).reshape(2, 3, 4)) + 1
    v = lr.asarray(np.arange(4.0))
    built = [lr.tril(x), lr.triu(x, k=1), lr.flip(x), lr.roll(x, 2, axis=1),
             lr.moveaxis(x, 0, -1), lr.permute_dims(x, (2, 0, 1)), lr.repeat(x, 2, axis=1),
             lr.tile(x, (2, 1, 1)), lr.take(x, lr.asarray([1, 0]), axis=2),
             lr.matrix_transpose(x), x.mT, lr.tensordot(x, v, axes=1), lr.vecdot(x, v),
             *lr.unstack(x), *lr.meshgrid(v, v), *lr.broadcast_arrays(x, v)]
    snap = lr.metrics.snapshot()
    assert snap["materializations"] == 0 and snap["graphs_executed"] == 0
    assert all(t.is_pending for t in built[:13])
    lr.sync(*built)
    assert_exact(built[5], np.transpose(np.arange(24.0).reshape(2, 3, 4) + 1, (2, 0, 1)))
