"""Views and movement against NumPy: reshape, transpose/permute/.T, expand,
squeeze/unsqueeze, flatten, basic indexing (ints, slices with negative steps,
None, Ellipsis), ``__setitem__``, concat and stack.

lazyrt has value semantics: a view never aliases, so writing into ``x`` after
``y = x[1:]`` leaves ``y`` unchanged (NumPy would change it).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazyrt as lr
from conftest import (DTYPES, arrays, assert_exact, assert_matches, lazy_inputs, lazyrt_dtype,
                      shapes)


@st.composite
def array_and_layout(draw, min_dims=0, max_dims=4, min_side=0):
    dt = draw(st.sampled_from(DTYPES))
    a = draw(arrays(dt, shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side)))
    t, a = draw(lazy_inputs(a))
    return t, a


@st.composite
def reshape_targets(draw, shape):
    """A shape of the same size: regrouped factors, maybe with one -1."""
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        dims = list(draw(st.permutations(list(shape)))) if shape else [0]
        return tuple(dims)
    factors = []
    n = size
    for p in (2, 3, 5):
        while n % p == 0:
            factors.append(p)
            n //= p
    factors = draw(st.permutations(factors))
    dims, cur = [], 1
    for f in factors:
        cur *= f
        if draw(st.booleans()):
            dims.append(cur)
            cur = 1
    dims.append(cur)
    dims = [d for d in dims if d != 1 or draw(st.booleans())]
    if dims and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


@given(data=st.data())
def test_reshape_matches_numpy(backend, data):
    t, a = data.draw(array_and_layout())
    target = data.draw(reshape_targets(a.shape))
    assert_exact(t.reshape(target), a.reshape(target))
    assert_exact(lr.reshape(t, *target) if target else lr.reshape(t, ()), a.reshape(target))


@given(data=st.data())
def test_permute_and_transpose_match_numpy(backend, data):
    t, a = data.draw(array_and_layout())
    perm = tuple(data.draw(st.permutations(range(a.ndim))))
    assert_exact(t.permute(*perm) if perm else lr.permute(t, ()), a.transpose(perm))
    assert_exact(lr.transpose(t, perm), np.transpose(a, perm))
    assert_exact(t.T, a.T)
    assert_exact(t.transpose(), a.transpose())
    if a.ndim >= 2:
        assert_exact(lr.swapaxes(t, 0, -1), np.swapaxes(a, 0, -1))


@given(data=st.data())
def test_broadcast_to_and_expand_match_numpy(backend, data):
    t, a = data.draw(array_and_layout(max_dims=3))
    # grow size-1 dims and add leading dims
    target = [data.draw(st.integers(0, 3)) if d == 1 else d for d in a.shape]
    target = [data.draw(st.integers(1, 3)) for _ in range(data.draw(st.integers(0, 2)))] + target
    target = tuple(target)
    assert_exact(lr.broadcast_to(t, target), np.broadcast_to(a, target))
    assert_exact(t.expand(*target) if target else t.expand(()), np.broadcast_to(a, target))
    keep = tuple(-1 if i >= len(target) - a.ndim else d for i, d in enumerate(target))
    assert_exact(lr.expand(t, keep), np.broadcast_to(a, target[:len(target) - a.ndim] + a.shape))


@given(data=st.data())
def test_squeeze_unsqueeze_flatten_match_numpy(backend, data):
    t, a = data.draw(array_and_layout(max_dims=3))
    assert_exact(lr.squeeze(t), np.squeeze(a))
    ones = [i for i, d in enumerate(a.shape) if d == 1]
    if ones:
        ax = data.draw(st.sampled_from(ones))
        assert_exact(t.squeeze(ax), np.squeeze(a, ax))
    ax = data.draw(st.integers(-a.ndim - 1, a.ndim))
    assert_exact(t.unsqueeze(ax), np.expand_dims(a, ax))
    assert_exact(lr.expand_dims(t, ax), np.expand_dims(a, ax))
    assert_exact(t.flatten(), a.reshape(-1))
    if a.ndim >= 2:
        assert_exact(lr.flatten(t, 1), a.reshape(a.shape[0], int(np.prod(a.shape[1:]))))
        assert_exact(t.flatten(0, -2), a.reshape((int(np.prod(a.shape[:-1])),) + a.shape[-1:]))


@given(data=st.data())
def test_basic_indexing_matches_numpy(backend, data):
    t, a = data.draw(array_and_layout())
    index = data.draw(hnp.basic_indices(a.shape, allow_newaxis=True, allow_ellipsis=True))
    assert_exact(t[index], a[index])


@given(data=st.data())
def test_chained_views_with_negative_steps(backend, data):
    t, a = data.draw(array_and_layout(min_dims=2, max_dims=3, min_side=1))
    step = data.draw(st.sampled_from([-1, -2, -3, 2]))
    view_t = t.T[::step][..., ::-1]
    view_a = a.T[::step][..., ::-1]
    assert_exact(view_t, view_a)
    assert_exact(view_t.reshape(-1)[::-2], view_a.reshape(-1)[::-2])


def test_negative_step_slices_of_a_computed_tensor(backend):
    a = np.arange(30, dtype=np.float32).reshape(5, 6)
    t = lr.tensor(a) * 2
    assert_matches(t[::-1, ::-2], (a * 2)[::-1, ::-2])
    assert_matches(t[4:0:-2, -1:-5:-1], (a * 2)[4:0:-2, -1:-5:-1])
    assert_matches(t[::-1][1:], (a * 2)[::-1][1:])


def test_integer_index_and_iteration(backend):
    a = np.arange(12).reshape(3, 4)
    t = lr.tensor(a)
    assert_exact(t[1], a[1])
    assert_exact(t[-1, -2], a[-1, -2])
    assert [row.tolist() for row in t] == a.tolist()
    assert len(t) == 3


@given(data=st.data())
def test_setitem_matches_numpy(backend, data):
    t, a = data.draw(array_and_layout(min_dims=1))
    index = data.draw(hnp.basic_indices(a.shape, allow_newaxis=True, allow_ellipsis=True))
    target_shape = a[index].shape
    # the value broadcasts to the indexed region; any dtype is cast (unsafe), as NumPy
    vshape = data.draw(hnp.broadcastable_shapes(target_shape, max_dims=len(target_shape),
                                                min_side=0))
    assume(np.broadcast_shapes(vshape, target_shape) == target_shape)
    vdt = data.draw(st.sampled_from([a.dtype, np.dtype("float64"), np.dtype("bool")]))
    if a.dtype.kind in "iu" and vdt.kind == "f":
        vdt = a.dtype  # float -> int casts of arbitrary floats are platform garbage
    value = data.draw(arrays(vdt, vshape))
    expected = a.copy()
    with np.errstate(all="ignore"):
        expected[index] = value
    before = t
    t[index] = lr.tensor(value)
    assert t is before
    assert_exact(t, expected)


def test_setitem_with_python_scalar(backend):
    t = lr.zeros((3, 4), "int32")
    t[1] = 7
    t[:, -1] = -2
    t[::-2, 0] = True
    expected = np.zeros((3, 4), np.int32)
    expected[1] = 7
    expected[:, -1] = -2
    expected[::-2, 0] = True
    assert_exact(t, expected)


def test_setitem_has_value_semantics(backend):
    x = lr.tensor(np.arange(5.0))
    y = x[1:]
    x[2] = 0.0
    assert_exact(y, np.array([1.0, 2.0, 3.0, 4.0]))
    assert_exact(x, np.array([0.0, 1.0, 0.0, 3.0, 4.0]))


def test_setitem_does_not_write_into_the_source_array(backend):
    source = np.arange(4.0)
    x = lr.asarray(source)
    x[0] = 10.0
    assert_exact(x, np.array([10.0, 1.0, 2.0, 3.0]))
    assert source[0] == 0.0


def test_setitem_after_materialization_and_again(backend):
    x = lr.tensor(np.zeros(4, np.float32))
    x[0] = 1.0
    assert x.numpy().tolist() == [1.0, 0, 0, 0]
    x[1:3] = lr.tensor(np.array([2.0, 3.0], np.float32))
    x += 1
    assert_exact(x, np.array([2.0, 3.0, 4.0, 1.0], np.float32))


@given(data=st.data())
def test_concat_matches_numpy(backend, data):
    ndim = data.draw(st.integers(1, 3))
    base = list(data.draw(shapes(min_dims=ndim, max_dims=ndim)))
    axis = data.draw(st.integers(-ndim, ndim - 1))
    n = data.draw(st.integers(1, 3))
    parts, arrays_ = [], []
    for _ in range(n):
        shape = list(base)
        shape[axis] = data.draw(st.integers(0, 3))
        dt = data.draw(st.sampled_from(DTYPES))
        t, a = data.draw(lazy_inputs(data.draw(arrays(dt, tuple(shape)))))
        parts.append(t)
        arrays_.append(a)
    expected = np.concatenate(arrays_, axis=axis)
    out = lr.concat(parts, axis=axis)
    assert out.dtype == lazyrt_dtype(expected.dtype)
    assert_matches(out, expected)
    assert_matches(lr.concatenate(parts, axis), expected)


@given(data=st.data())
def test_stack_matches_numpy(backend, data):
    shape = data.draw(shapes(max_dims=3))
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    dt = data.draw(st.sampled_from(DTYPES))
    pairs = [data.draw(lazy_inputs(data.draw(arrays(dt, shape))))
             for _ in range(data.draw(st.integers(1, 3)))]
    assert_exact(lr.stack([p[0] for p in pairs], axis=axis),
                 np.stack([p[1] for p in pairs], axis=axis))


def test_views_of_views_keep_shape_metadata_without_computing(backend, fresh_metrics):
    t = lr.tensor(np.zeros((2, 3, 4)))
    v = t.permute(2, 0, 1)[1:, :, ::-1].reshape(3, -1)
    assert v.shape == (3, 6)
    assert lr.metrics.snapshot()["graphs_executed"] == 0


def test_results_are_read_only(backend):
    out = (lr.tensor(np.arange(3.0)) + 1).numpy()
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0] = 5.0
    leaf = lr.tensor(np.arange(3.0)).numpy()
    assert not leaf.flags.writeable


def test_tensor_copies_and_asarray_freezes_its_input(backend):
    source = np.arange(3.0)
    t = lr.tensor(source)
    source[0] = 100.0
    assert_exact(t, np.array([0.0, 1.0, 2.0]))


def test_advanced_indexing_with_several_arrays_falls_back_and_is_counted(backend,
                                                                          fresh_metrics):
    a = np.arange(12.0).reshape(3, 4)
    t = lr.tensor(a)
    assert_exact(t[[1, 2], [3, 0]], a[[1, 2], [3, 0]])
    assert lr.metrics.snapshot()["fallbacks"].get("getitem[advanced]") == 1


@pytest.mark.parametrize("index", [[1, 3, -1], np.array([[2], [0]]), np.array([], np.int64),
                                   np.array(1)])
def test_one_integer_array_is_a_lazy_gather(backend, fresh_metrics, index):
    a = np.arange(20.0).reshape(5, 4)
    t = lr.tensor(a) * 2.0
    picked = t[index] + 1.0
    picked_by_tensor = t[lr.asarray(np.asarray(index, np.int64))]
    assert lr.metrics.snapshot()["materializations"] == 0 and picked.is_pending
    assert_exact(picked, a[index] * 2.0 + 1.0)
    assert_exact(picked_by_tensor, (a * 2.0)[index])
    assert not lr.metrics.snapshot()["fallbacks"]


@pytest.mark.parametrize("shape, mask_ndim", [((6,), 1), ((3, 4), 2), ((3, 4), 1), ((), 0),
                                              ((0, 2), 1)])
def test_a_boolean_mask_is_a_barrier_on_the_mask_only(backend, fresh_metrics, shape, mask_ndim):
    rng = np.random.default_rng(0)
    a, m = rng.standard_normal(shape), rng.standard_normal(shape[:mask_ndim])
    t = lr.tensor(a) * 3.0
    mask = lr.tensor(m) * 2.0 > 0.5                          # pending
    picked = t[mask] + 1.0
    assert lr.metrics.snapshot()["materializations"] == 1     # the mask, at this line
    assert picked.is_pending and not lr.metrics.snapshot()["fallbacks"]
    assert_exact(picked, (a * 3.0)[m * 2.0 > 0.5] + 1.0)


def test_a_mask_that_does_not_match_the_leading_axes_is_an_index_error():
    with pytest.raises(IndexError, match=r"mask of shape \(2,\).*shape \(3,\)"):
        lr.tensor(np.arange(3.0))[np.array([True, False])]


@pytest.mark.parametrize("shapes_axis", [
    ([(512, 128), (512, 128), (512, 64)], 1),      # attention's q, k, v gradients
    ([(70000,), (3,), (65536,)], 0),                # few long rows, cut in chunks
    ([(2, 3, 5), (2, 0, 5), (2, 4, 5)], 1),         # an empty operand
    ([(4, 300, 7), (4, 300, 9)], 2),
])
def test_c_concat_copies_on_the_kernels_threads(shapes_axis):
    """On the C backend a concat of row-contiguous operands (fresh results,
    slices, views with a row stride) is one C launch, equal to NumPy's; a
    transposed operand keeps the host copy and is equal too."""
    if "c" not in lr.available_backends():
        pytest.skip("no C compiler")
    shapes, axis = shapes_axis
    rng = np.random.default_rng(len(shapes) + axis)
    arrays_ = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    with lr.backend("c"):
        parts = [lr.tensor(a) * 2 for a in arrays_]
        assert_exact(lr.concat(parts, axis=axis), np.concatenate([a * 2 for a in arrays_], axis))
        record = lr.debug.last_record()
        assert any(k.name == "concat" and k.language == "c" for k in record.kernels), \
            [(k.name, k.language) for k in record.kernels]
        if len(shapes[0]) >= 2:  # every other row of a wider array: rows with a stride
            wide = [rng.standard_normal((s[0] * 2,) + s[1:]).astype(np.float32) for s in shapes]
            got = lr.concat([lr.tensor(w)[::2] for w in wide], axis=axis)
            assert_exact(got, np.concatenate([w[::2] for w in wide], axis))
            t = [rng.standard_normal(s[::-1]).astype(np.float32) for s in shapes]
            got = lr.concat([lr.permute_dims(lr.tensor(x) + 1, tuple(range(len(s)))[::-1])
                             for x, s in zip(t, shapes)], axis=axis)
            assert_exact(got, np.concatenate([(x + 1).transpose() for x in t], axis))


def test_c_concat_of_transposed_columns_and_flipped_operands():
    """Operands stored transposed (a product's gradient), single columns, flipped
    and broadcast views: the C concat's tiled copy equals NumPy's."""
    if "c" not in lr.available_backends():
        pytest.skip("no C compiler")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 70, 45)).astype(np.float32)
    b = rng.standard_normal((3, 45, 33)).astype(np.float64)
    c = rng.standard_normal((45, 1)).astype(np.float32)
    with lr.backend("c"):
        ta = lr.permute_dims(lr.tensor(a) + 1, (0, 2, 1))          # (3, 45, 70) transposed
        tb = lr.tensor(b)[:, :, ::-1] * 1                            # (3, 45, 33) flipped
        tc = lr.broadcast_to(lr.reshape(lr.tensor(c) * 2, (1, 45, 1)), (3, 45, 1))
        got = lr.concat([ta, lr.astype(tb, lr.float32), tc], axis=2)
        want = np.concatenate([(a + 1).transpose(0, 2, 1), b[:, :, ::-1].astype(np.float32),
                               np.broadcast_to((c * 2).reshape(1, 45, 1), (3, 45, 1))], axis=2)
        assert_exact(got, want)
        cols = lr.concat([lr.tensor(c) * 3, lr.tensor(c) + 1], axis=1)
        assert_exact(cols, np.concatenate([c * 3, c + 1], axis=1))
