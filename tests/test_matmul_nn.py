"""``matmul``/``@`` (1-D, 2-D, batched with broadcasting, every dtype) and
``lr.nn`` (relu, gelu, silu, softmax, log_softmax, layer_norm) against NumPy
formulas computed in float64.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

import lazyrt as lr
from conftest import (DTYPES, FLOAT_DTYPES, arrays, assert_matches, lazy_inputs, numpy_raises,
                      shapes)


@st.composite
def matmul_shapes(draw):
    """Operand shapes NumPy's matmul accepts: 1-D or (batch..., n, k) @ (batch..., k, m)."""
    n, k, m = (draw(st.integers(0, 5)) for _ in range(3))
    batch_a = draw(shapes(max_dims=2, max_side=3))
    batch_b = list(batch_a[len(batch_a) - draw(st.integers(0, len(batch_a))):])
    batch_b = tuple(1 if draw(st.booleans()) else d for d in batch_b)
    if draw(st.booleans()):
        batch_a, batch_b = batch_b, batch_a
    sa = (k,) if draw(st.integers(0, 4)) == 0 else batch_a + (n, k)
    sb = (k,) if draw(st.integers(0, 4)) == 0 else batch_b + (k, m)
    return sa, sb


@given(data=st.data())
def test_matmul_matches_numpy(backend, data):
    sa, sb = data.draw(matmul_shapes())
    da = data.draw(st.sampled_from(DTYPES))
    db = data.draw(st.sampled_from([da] + list(DTYPES)))
    a = data.draw(arrays(da, sa, special=False, small=True))
    b = data.draw(arrays(db, sb, special=False, small=True))
    rejected = numpy_raises(np.matmul, a, b)
    ta, a = data.draw(lazy_inputs(a))
    tb, b = data.draw(lazy_inputs(b))
    if rejected is not None:
        with pytest.raises(TypeError):
            ta @ tb
        return
    expected = np.matmul(a, b)
    out = ta @ tb if data.draw(st.booleans()) else lr.matmul(ta, tb)
    assert out.shape == expected.shape
    tol = {}
    if expected.dtype == np.float16:
        tol = dict(rtol=1e-2, atol=0.1)  # products of |x| <= 20 summed in float16
    elif expected.dtype == np.float32:
        tol = dict(atol=1e-3)
    assert_matches(out, expected, **tol)


@given(data=st.data())
def test_a_product_read_only_transposed_matches_numpy(backend, data):
    """A backend may store such a product transposed (the C backend does:
    ``MatmulStep.transposed``); its readers must see the same values: a
    pointwise op, a reduction, a reshape of the transpose, every dtype, views."""
    sa, sb = data.draw(matmul_shapes())
    if len(sa) < 2 or len(sb) < 2:
        sa, sb = sa if len(sa) >= 2 else (2,) + sa, sb if len(sb) >= 2 else sb + (3,)
    dt = data.draw(st.sampled_from(DTYPES))
    a = data.draw(arrays(dt, sa, special=False, small=True))
    b = data.draw(arrays(dt, sb, special=False, small=True))
    if numpy_raises(np.matmul, a, b) is not None:
        return
    ta, a = data.draw(lazy_inputs(a))
    tb, b = data.draw(lazy_inputs(b))
    want = np.swapaxes(np.matmul(a, b), -1, -2)
    got = (ta @ tb).mT
    tol = {np.dtype(np.float16): dict(rtol=1e-2, atol=0.1),
           np.dtype(np.float32): dict(atol=1e-3)}.get(want.dtype, {})
    reader = data.draw(st.sampled_from(["add", "sum", "reshape", "two readers"]))
    if reader == "add":
        assert_matches(got * 2, want * 2, **tol)
    elif reader == "sum" and want.dtype != np.bool_:
        assert_matches(got.sum(axis=-1), want.sum(axis=-1), **tol)
    elif reader == "reshape":
        assert_matches(lr.reshape(got, (-1,)), want.reshape(-1), **tol)
    else:
        got2 = (ta @ tb).mT
        assert_matches(got * 2, want * 2, **tol)
        assert_matches(got2, want, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [(), (3,), (2, 1)])
def test_a_weight_update_through_a_transposed_gradient(backend, dtype, batch):
    """``w - lr * (x^T @ g)^T``, as autograd and SGD make it, at sizes BLAS runs
    threaded, with a broadcast batch dimension and strided operands."""
    rng = np.random.default_rng(len(batch))
    x = rng.standard_normal(batch + (300, 70)).astype(dtype)
    g = rng.standard_normal((300, 90)).astype(dtype)
    w = rng.standard_normal(batch + (90, 70)).astype(dtype)
    tx, tg, tw = lr.tensor(x), lr.tensor(g), lr.tensor(w)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    assert_matches(tw - 0.1 * (tx.mT @ tg).mT, w - 0.1 * np.swapaxes(np.swapaxes(x, -1, -2) @ g,
                                                                     -1, -2), rtol=rtol, atol=rtol)
    xs = x[..., ::2, 1:]
    assert_matches((tx[..., ::2, 1:].mT @ tg[::2]).mT.sum(axis=-1),
                   np.swapaxes(np.swapaxes(xs, -1, -2) @ g[::2], -1, -2).sum(axis=-1),
                   rtol=rtol, atol=rtol * 100)


def test_matmul_with_nan_and_inf(backend):
    a = np.array([[1.0, np.nan], [np.inf, 1.0], [1.0, 2.0]])
    b = np.array([[1.0, 0.0], [2.0, 1.0]])
    assert_matches(lr.tensor(a) @ lr.tensor(b), a @ b)


def test_matmul_of_transposed_and_reversed_views(backend):
    a = np.arange(12.0).reshape(3, 4)
    b = np.arange(20.0).reshape(5, 4)
    ta, tb = lr.tensor(a), lr.tensor(b)
    assert_matches(ta @ tb.T, a @ b.T)
    assert_matches(ta[::-1] @ tb[::-2].T, a[::-1] @ b[::-2].T)
    assert_matches((ta.T @ ta)[1:, ::-1], (a.T @ a)[1:, ::-1])


def test_matmul_with_numpy_array_and_list_operands(backend):
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(3.0)
    assert_matches(lr.tensor(a) @ b, a @ b)
    assert_matches(a @ lr.tensor(b), a @ b)
    assert_matches(lr.matmul([[1, 2], [3, 4]], [1, 1]), np.array([3, 7]))


def test_matmul_fused_with_pointwise_epilogue(backend):
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.linspace(1, -1, 8, dtype=np.float32).reshape(4, 2)
    out = lr.nn.relu(lr.tensor(x) @ lr.tensor(w) * 2 + 0.5)
    assert_matches(out, np.maximum(x @ w * 2 + np.float32(0.5), 0), atol=1e-5)


@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "bool", "float16", "float64"])
def test_matmul_epilogue_with_runtime_scalars_of_every_dtype(backend, dt):
    # regression: the Triton epilogue read int scalars' int64 bits as a double (5 -> 0)
    a = (np.arange(12).reshape(3, 4) % 5 - 2).astype(dt)
    b = (np.arange(8).reshape(4, 2) % 3 - 1).astype(dt)
    with np.errstate(all="ignore"):
        for s in (5, -3, 2**40) if dt == "int64" else (5, 1):
            expected = a @ b + s if dt != "bool" else (a @ b) | bool(s)
            got = lr.tensor(a) @ lr.tensor(b) + s if dt != "bool" else \
                (lr.tensor(a) @ lr.tensor(b)) | bool(s)
            assert_matches(got, expected, rtol=1e-3 if dt == "float16" else None,
                           atol=1e-3 if dt == "float16" else None)


# --- nn ------------------------------------------------------------------------

def _gelu(x):
    return 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _silu(x):
    return x / (1 + np.exp(-x))


NN_POINTWISE = {
    "relu": (lr.nn.relu, lambda x: np.maximum(x, 0)),
    "gelu": (lr.nn.gelu, _gelu),
    "gelu_tanh": (lambda t: lr.nn.gelu(t, approximate="tanh"), _gelu_tanh),
    "silu": (lr.nn.silu, _silu),
}


def _tol(dt):
    return dict(rtol=4e-3, atol=4e-3) if dt == np.float16 else \
        dict(rtol=1e-4, atol=1e-5) if dt == np.float32 else {}


@pytest.mark.parametrize("name", sorted(NN_POINTWISE))
@given(data=st.data())
def test_nn_activation_matches_float64_formula(backend, name, data):
    lazy_fn, ref = NN_POINTWISE[name]
    dt = data.draw(st.sampled_from(FLOAT_DTYPES))
    a = data.draw(arrays(dt, shapes(max_dims=3), small=True))
    t, a = data.draw(lazy_inputs(a))
    with np.errstate(all="ignore"):
        expected = ref(a.astype(np.float64)).astype(dt)
    assert_matches(lazy_fn(t), expected, **_tol(dt))


def test_relu_keeps_int_dtype_and_nan(backend):
    assert_matches(lr.nn.relu(lr.tensor(np.array([-3, 0, 4], np.int8))),
                   np.array([0, 0, 4], np.int8))
    assert_matches(lr.nn.relu(lr.tensor([np.nan, -1.0, 2.0])), np.array([np.nan, 0.0, 2.0]))


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@given(data=st.data())
def test_softmax_and_log_softmax_match_numpy(backend, name, data):
    dt = data.draw(st.sampled_from(FLOAT_DTYPES))
    a = data.draw(arrays(dt, shapes(min_dims=1, max_dims=3, min_side=1), special=False))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    t, a = data.draw(lazy_inputs(a))
    ref = _softmax if name == "softmax" else _log_softmax
    expected = ref(a.astype(np.float64), axis).astype(dt)
    out = getattr(lr.nn, name)(t, axis=axis)
    tol = _tol(dt)
    if name == "log_softmax":  # absolute error scales with the logits' magnitude
        tol = dict(tol, atol=float(np.finfo(dt).eps) * 8 * (1 + float(np.abs(a).max())))
    assert_matches(out, expected, **tol)


def test_softmax_rows_sum_to_one_and_survive_large_logits(backend):
    a = np.array([[1000.0, 1000.0, -1000.0], [0.0, 1.0, 2.0]], np.float32)
    out = lr.nn.softmax(lr.tensor(a), axis=1)
    assert_matches(out, _softmax(a.astype(np.float64), 1).astype(np.float32))
    np.testing.assert_allclose(out.numpy().sum(axis=1), [1.0, 1.0], rtol=1e-6)


@given(data=st.data())
def test_layer_norm_matches_numpy(backend, data):
    dt = data.draw(st.sampled_from(FLOAT_DTYPES))
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    k = data.draw(st.integers(1, len(shape)))
    norm_shape = shape[len(shape) - k:]
    a = data.draw(arrays(dt, shape, special=False, small=True))
    use_affine = data.draw(st.booleans())
    w = data.draw(arrays(dt, norm_shape, special=False, small=True)) if use_affine else None
    b = data.draw(arrays(dt, norm_shape, special=False, small=True)) if use_affine else None
    eps = 1e-5
    t, a = data.draw(lazy_inputs(a))
    axes = tuple(range(len(shape) - k, len(shape)))
    x = a.astype(np.float64)
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    expected = (x - mu) / np.sqrt(var + eps)
    if use_affine:
        expected = expected * w + b
    out = lr.nn.layer_norm(t, norm_shape if k > 1 or data.draw(st.booleans()) else norm_shape[0],
                           None if w is None else lr.tensor(w),
                           None if b is None else lr.tensor(b), eps=eps)
    scale = 1.0 if w is None else 1.0 + float(np.abs(w).max())
    # the mean is rounded to the input dtype (|x| * its epsilon, order-dependent) and
    # that error is amplified by 1/sqrt(var + eps) on near-constant rows
    amplified = float(np.finfo(dt).eps) * (1.0 + float(np.abs(x).max())) / \
        float(np.sqrt(var.min() + eps)) * scale
    tol = dict(rtol=2e-2, atol=2e-2 * scale + 4 * amplified) if dt == np.float16 else \
        dict(rtol=1e-3, atol=2e-3 * scale + 4 * amplified) if dt == np.float32 else \
        dict(rtol=1e-9, atol=1e-12 * scale * (1.0 + float(np.abs(x).max())) / np.sqrt(eps))
    assert_matches(out, expected.astype(dt), **tol)


def test_nn_functions_reject_int_inputs(backend):
    t = lr.tensor(np.array([1, 2, 3], np.int32))
    for fn in (lr.nn.gelu, lr.nn.silu, lr.nn.softmax, lr.nn.log_softmax):
        with pytest.raises(lr.DTypeError, match="int32"):
            fn(t)
    with pytest.raises(ValueError, match="approximate"):
        lr.nn.gelu(lr.tensor([1.0]), approximate="fast")
