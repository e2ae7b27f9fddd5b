"""Elementwise ops against eager NumPy: every op, every dtype, broadcasting,
non-contiguous and pending inputs, size-0 and 0-d shapes, NaN and inf.

Where NumPy rejects a dtype, lazyrt must raise a TypeError (``lr.DTypeError``)
when the op is recorded, before anything is computed.
"""
from __future__ import annotations

import operator

import numpy as np
import pytest
import scipy.special
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazyrt as lr
from conftest import (ALL_DTYPES, DTYPES, FLOAT_DTYPES, arrays, assert_matches, broadcast_pairs,
                      lazy_inputs, lazyrt_dtype, numpy_raises, numpy_ref,
                      same_error_kind, shapes)

# name -> (lazyrt callable, numpy callable)
BINARY = {
    "add": (operator.add, np.add),
    "sub": (operator.sub, np.subtract),
    "mul": (operator.mul, np.multiply),
    "truediv": (operator.truediv, np.true_divide),
    "floordiv": (operator.floordiv, np.floor_divide),
    "mod": (operator.mod, np.remainder),
    "pow": (operator.pow, np.power),
    "maximum": (lr.maximum, np.maximum),
    "minimum": (lr.minimum, np.minimum),
    "eq": (operator.eq, np.equal),
    "ne": (operator.ne, np.not_equal),
    "lt": (operator.lt, np.less),
    "le": (operator.le, np.less_equal),
    "gt": (operator.gt, np.greater),
    "ge": (operator.ge, np.greater_equal),
    "and": (operator.and_, np.bitwise_and),
    "or": (operator.or_, np.bitwise_or),
    "xor": (operator.xor, np.bitwise_xor),
    "logical_and": (lr.logical_and, np.logical_and),
    "logical_or": (lr.logical_or, np.logical_or),
    "hypot": (lr.hypot, np.hypot),
}


def _via_float64(fn, like):
    """A NumPy reference for ops NumPy lacks: computed in float64, typed like ``like``."""
    def ref(a):
        out_dtype = like(a).dtype
        return fn(a.astype(np.float64)).astype(out_dtype)
    return ref


UNARY = {
    "neg": (operator.neg, np.negative),
    "abs": (lr.abs, np.absolute),
    "exp": (lr.exp, np.exp),
    "log": (lr.log, np.log),
    "log1p": (lr.log1p, np.log1p),
    "expm1": (lr.expm1, np.expm1),
    "sqrt": (lr.sqrt, np.sqrt),
    "rsqrt": (lr.rsqrt, _via_float64(lambda a: 1.0 / np.sqrt(a), np.sqrt)),
    "sin": (lr.sin, np.sin),
    "cos": (lr.cos, np.cos),
    "tanh": (lr.tanh, np.tanh),
    "sigmoid": (lr.sigmoid, _via_float64(lambda a: 1.0 / (1.0 + np.exp(-a)), np.exp)),
    "erf": (lr.erf, _via_float64(scipy.special.erf, np.exp)),
    "erfc": (lr.erfc, _via_float64(scipy.special.erfc, np.exp)),
    "exp2": (lr.exp2, np.exp2),
    "softplus": (lr.softplus, _via_float64(lambda a: np.logaddexp(a, 0.0), np.exp)),
    "floor": (lr.floor, np.floor),
    "ceil": (lr.ceil, np.ceil),
    "round": (lr.round, np.round),
    "sign": (lr.sign, np.sign),
    "reciprocal": (lr.reciprocal, np.reciprocal),
    "square": (lr.square, np.square),
    "isnan": (lr.isnan, np.isnan),
    "isinf": (lr.isinf, np.isinf),
    "isfinite": (lr.isfinite, np.isfinite),
    "logical_not": (lr.logical_not, np.logical_not),
    "invert": (operator.invert, np.invert),
}


def _prepare_binary(name, a, b):
    """Keep inputs where NumPy's answer is defined (not platform garbage)."""
    if name == "pow" and a.dtype.kind in "iub" and b.dtype.kind in "iu":
        b = np.abs(b.astype(np.int64)).astype(b.dtype) % 4  # ints to negative powers raise
    return a, b


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_op_matches_numpy_with_broadcasting(backend, name, data):
    lazy_fn, np_fn = BINARY[name]
    da, db = data.draw(st.sampled_from(DTYPES)), data.draw(st.sampled_from(DTYPES))
    (sa, sb), _ = data.draw(broadcast_pairs())
    a = data.draw(arrays(da, sa, small=name == "pow"))
    b = data.draw(arrays(db, sb, small=name == "pow"))
    a, b = _prepare_binary(name, a, b)
    rejected = numpy_raises(np_fn, a, b)
    ta, a = data.draw(lazy_inputs(a))
    tb, b = data.draw(lazy_inputs(b))
    if rejected is not None:
        assert issubclass(rejected, TypeError), rejected
        with pytest.raises(TypeError):
            lazy_fn(ta, tb)
        return
    expected = numpy_ref(np_fn, a, b)
    out = lazy_fn(ta, tb)
    assert out.shape == expected.shape and out.dtype == lazyrt_dtype(expected.dtype)  # known before running
    assert_matches(out, expected)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("scalar", [True, 3, -2, 2.5, -0.5], ids=repr)
@pytest.mark.parametrize("reflected", [False, True], ids=["tensor_op_scalar",
                                                           "scalar_op_tensor"])
def test_binary_op_with_python_scalar_follows_nep50(backend, name, scalar, reflected):
    lazy_fn, np_fn = BINARY[name]
    failures = []
    for dt in DTYPES:
        a = np.array([[0, 1, 2], [3, 1, 0]]).astype(dt)
        if reflected and name in ("floordiv", "mod", "truediv"):
            a = np.where(a == 0, 1, a).astype(dt)  # the scalar divided by the tensor
        args = (scalar, a) if reflected else (a, scalar)
        rejected = numpy_raises(np_fn, *args)
        t = lr.tensor(a)
        targs = (scalar, t) if reflected else (t, scalar)
        if rejected is not None:
            try:
                lazy_fn(*targs)
            except Exception as exc:  # noqa: BLE001
                if not same_error_kind(exc, rejected):
                    failures.append(f"{dt}: raised {exc!r}, NumPy raises {rejected.__name__}")
                continue
            failures.append(f"{dt}: no error, NumPy raises {rejected.__name__}")
            continue
        expected = numpy_ref(np_fn, *args)
        try:
            assert_matches(lazy_fn(*targs), expected)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{dt}: {exc}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary_op_matches_numpy(backend, name, data):
    lazy_fn, np_fn = UNARY[name]
    dt = data.draw(st.sampled_from(DTYPES if name != "round" else DTYPES[1:]))
    a = data.draw(arrays(dt, shapes()))
    if name == "reciprocal" and dt.kind in "iu":
        a = np.where(a == 0, 1, a).astype(dt)  # NumPy's integer 1/0 is platform garbage
    rejected = numpy_raises(np_fn, a)
    t, a = data.draw(lazy_inputs(a))
    if rejected is not None:
        assert issubclass(rejected, TypeError), rejected
        with pytest.raises(TypeError):
            lazy_fn(t)
        return
    expected = numpy_ref(np_fn, a)
    out = lazy_fn(t)
    assert out.shape == expected.shape and out.dtype == lazyrt_dtype(expected.dtype)
    assert_matches(out, expected)


def test_integer_floor_division_and_modulo_by_zero_give_zero(backend):
    a = np.array([7, -7, 0, 5], np.int32)
    b = np.array([0, 0, 0, 2], np.int32)
    assert_matches(lr.tensor(a) // lr.tensor(b), np.array([0, 0, 0, 2], np.int32))
    assert_matches(lr.tensor(a) % lr.tensor(b), np.array([0, 0, 0, 1], np.int32))


def test_modulo_takes_the_sign_of_the_divisor(backend):
    a = np.array([7, -7, 7, -7], np.int64)
    b = np.array([3, 3, -3, -3], np.int64)
    assert_matches(lr.tensor(a) % lr.tensor(b), np.array([1, 2, -2, -1]))
    assert_matches(lr.tensor(a.astype(np.float32)) % lr.tensor(b.astype(np.float32)),
                   np.array([1, 2, -2, -1], np.float32))


def test_maximum_and_minimum_propagate_nan(backend):
    a = lr.tensor([np.nan, 1.0, 2.0])
    b = lr.tensor([0.0, np.nan, 1.0])
    assert_matches(lr.maximum(a, b), np.array([np.nan, np.nan, 2.0]))
    assert_matches(lr.minimum(a, b), np.array([np.nan, np.nan, 1.0]))


def test_round_is_half_to_even(backend):
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999], np.float32)
    assert_matches(lr.round(lr.tensor(a)), np.array([0, 2, 2, -0, -2, 2], np.float32))


@pytest.mark.parametrize("dt", ["int8", "uint8", "int32", "int64", "bool"])
@pytest.mark.parametrize("op", ["iadd", "isub", "imul", "itruediv", "ifloordiv",
                                "imod", "iand", "ior", "ixor"])
def test_in_place_op_follows_numpy_same_kind_rule(backend, op, dt):
    failures = []
    base = np.array([[1, 2, 3], [4, 5, 6]]).astype(dt)
    for other_dt in DTYPES:
        other = np.array([1, 2, 1]).astype(other_dt)
        expected = base.copy()
        rejected = numpy_raises(getattr(operator, op), expected, other)
        if rejected is None:
            with np.errstate(all="ignore"):
                expected = getattr(operator, op)(base.copy(), other)
        t = lr.tensor(base)
        before = t
        try:
            t = getattr(operator, op)(t, lr.tensor(other))
        except Exception as exc:  # noqa: BLE001
            if rejected is None or not same_error_kind(exc, rejected):
                failures.append(f"{dt} {op} {other_dt}: raised {exc!r}, NumPy: {rejected}")
            continue
        if rejected is not None:
            failures.append(f"{dt} {op} {other_dt}: no error, NumPy raises {rejected}")
            continue
        assert t is before  # in place: the same Python object gets the new value
        try:
            assert_matches(t, expected)
        except AssertionError as exc:
            failures.append(f"{dt} {op} {other_dt}: {exc}")
    assert not failures, "\n".join(failures)


@given(data=st.data())
def test_in_place_float_ops_keep_dtype(backend, data):
    dt = data.draw(st.sampled_from(FLOAT_DTYPES))
    (sa, sb), _ = data.draw(broadcast_pairs(max_dims=3))
    assume(np.broadcast_shapes(sa, sb) == tuple(sa))
    a = data.draw(arrays(dt, sa))
    b = data.draw(arrays("float64", sb))
    t, a = data.draw(lazy_inputs(a))
    t *= lr.tensor(b)
    t += 1.5
    t -= lr.tensor(b)
    with np.errstate(all="ignore"):
        expected = a.copy()
        expected *= b
        expected += 1.5
        expected -= b
    assert_matches(t, expected)


@given(data=st.data())
def test_where_matches_numpy(backend, data):
    dc, da, db = (data.draw(st.sampled_from(DTYPES)) for _ in range(3))
    (sc, sa, sb), _ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3,
                                                                  max_side=4))
    c, a, b = data.draw(arrays(dc, sc)), data.draw(arrays(da, sa)), data.draw(arrays(db, sb))
    tc, c = data.draw(lazy_inputs(c))
    ta, a = data.draw(lazy_inputs(a))
    tb, b = data.draw(lazy_inputs(b))
    assert_matches(lr.where(tc, ta, tb), np.where(c, a, b))


@pytest.mark.parametrize("dt", ["int8", "uint8", "int32", "float16", "float32", "bfloat16"])
@pytest.mark.parametrize("scalars", [(0, 1.5), (2, 0), (True, 3), (0.5, 7)], ids=repr)
def test_where_with_python_scalars_is_weak(backend, dt, scalars):
    cond = np.array([True, False, True])
    a = np.array([5, 6, 7]).astype(dt)
    x, y = scalars
    # NumPy gives np.where(c, 1.5, bfloat16_array) float32 but np.where(c, bfloat16_array,
    # 1.5) bfloat16; lazyrt's weak scalars take bfloat16 on either side
    weak = (lambda r: r.astype(a.dtype)) if dt == "bfloat16" else (lambda r: r)
    assert_matches(lr.where(lr.tensor(cond), lr.tensor(a), x), weak(np.where(cond, a, x)))
    assert_matches(lr.where(lr.tensor(cond), y, lr.tensor(a)), weak(np.where(cond, y, a)))
    assert_matches(lr.where(lr.tensor(cond), x, y), np.where(cond, x, y))


@given(data=st.data())
def test_clip_matches_numpy(backend, data):
    dt = data.draw(st.sampled_from([d for d in DTYPES if d.kind != "b"]))
    a = data.draw(arrays(dt, shapes(max_dims=3)))
    lo = data.draw(st.integers(-5, 5))
    hi = lo + data.draw(st.integers(0, 10))
    assume(numpy_raises(np.clip, a, lo, hi) is None)
    t, a = data.draw(lazy_inputs(a))
    assert_matches(lr.clip(t, lo, hi), np.clip(a, lo, hi))
    # one-sided, NumPy refuses an out-of-range bound (uint8 with max=-1); both-sided it clamps
    if numpy_raises(np.clip, a, lo, None) is None:
        assert_matches(t.clip(min=lo), np.clip(a, lo, None))
    if numpy_raises(np.clip, a, None, hi) is None:
        assert_matches(lr.clip(t, max=hi), np.clip(a, None, hi))


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
@given(data=st.data())
def test_astype_matches_numpy(backend, dt, data):
    src = data.draw(st.sampled_from(ALL_DTYPES))
    if src == lr.bfloat16 and dt.kind in "iu":  # bfloat16's whole numbers in range
        info = np.iinfo(dt)
        vals = st.integers(max(info.min, -60000), min(info.max, 60000)).map(float)
        a = data.draw(hnp.arrays(np.float32, shapes(max_dims=3), elements=vals)).astype(src)
        a = np.trunc(a.astype(np.float64)).clip(info.min, info.max).astype(src)
    elif src.kind == "f" and dt.kind in "iu":
        # float -> int is defined only for finite values in range (C casting rules)
        info = np.iinfo(dt)
        lo, hi = max(info.min, -60000), min(info.max, 60000)
        vals = st.floats(lo, hi, width=src.itemsize * 8).map(np.trunc)
        a = data.draw(hnp.arrays(src, shapes(max_dims=3), elements=vals))
    else:
        a = data.draw(arrays(src, shapes(max_dims=3)))
    t, a = data.draw(lazy_inputs(a))
    out = t.astype(dt)
    assert out.dtype == dt
    with np.errstate(all="ignore"):
        assert_matches(out, a.astype(dt))


@pytest.mark.parametrize("dt", ["float16", "float32", "float64", "bfloat16"])
def test_transcendentals_on_special_values(backend, dt):
    a = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-3, 30.0, -30.0], dt)
    t = lr.tensor(a)
    for name in ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "sigmoid",
                 "erf", "erfc", "exp2", "softplus", "rsqrt", "sign", "floor", "ceil", "abs"):
        lazy_fn, np_fn = UNARY[name]
        try:
            assert_matches(lazy_fn(t), numpy_ref(np_fn, a))
        except AssertionError as exc:
            raise AssertionError(f"{name}({dt}): {exc}") from None


def test_zero_dim_and_size_zero_tensors(backend):
    s = lr.tensor(np.float32(2.0))
    assert s.shape == ()
    assert_matches(s * s + 1, np.float32(5.0))
    e = lr.zeros((0, 3), "float32")
    out = lr.exp(e) + lr.tensor(np.ones(3, np.float32))
    assert_matches(out, np.zeros((0, 3), np.float32))


def test_round_of_bool_is_float16_like_numpy(backend):
    a = np.array([True, False])
    assert_matches(lr.round(lr.tensor(a)), np.round(a))


def test_python_operators_and_builtins(backend):
    a = np.array([-2.5, 0.5, 3.0], np.float32)
    i = np.array([1, -2, 3], np.int8)
    t, ti = lr.tensor(a), lr.tensor(i)
    assert_matches(abs(t), np.abs(a))
    assert_matches(-t, -a)
    assert (+t) is not t  # a new tensor, as +ndarray is a copy
    assert_matches(+t, a)
    assert_matches(~ti, ~i)
    assert_matches(abs(ti), np.abs(i))
    assert_matches(2 - t, 2 - a)
    assert_matches(2 / t, np.float32(2) / a)
    assert_matches(2 ** t, np.float32(2) ** a, rtol=1e-6)
    assert_matches(7 // ti, 7 // i)
    assert_matches(7 % ti, 7 % i)


def test_numpy_array_on_the_left_stays_lazy_and_is_not_weak(backend):
    a = np.array([1, 2, 3], np.int32)
    t = lr.tensor(np.array([1, 1, 1], np.int8))
    out = a + t
    assert isinstance(out, lr.Tensor) and out.is_pending
    assert_matches(out, a + np.array([1, 1, 1], np.int8))
    assert_matches(a * t > np.int64(2), (a * 1) > 2)
    assert (np.float16(1) + t).dtype == np.float16


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_hypot_is_accurate_and_never_overflows(backend, dt):
    info = np.finfo(dt)
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(300) * 10.0 ** rng.integers(-3, 4, 300)).astype(dt)
    b = (rng.standard_normal(300) * 10.0 ** rng.integers(-3, 4, 300)).astype(dt)
    big = np.array([info.max / 2, info.max, np.inf, -np.inf, np.nan, 0.0, -0.0, info.tiny], dt)
    pairs = np.array(np.meshgrid(big, big)).reshape(2, -1).astype(dt)  # NaN beside 0, inf...
    a, b = np.concatenate([a, pairs[0]]), np.concatenate([b, pairs[1]])
    with np.errstate(all="ignore"):
        expected = np.hypot(a, b)
    got = lr.hypot(lr.tensor(a), lr.tensor(b)).numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    fin = np.isfinite(expected)
    with np.errstate(over="ignore"):
        ulps = np.abs(got[fin].astype(np.float64) - expected[fin]) / np.spacing(expected[fin])
    assert ulps.max() <= 2, ulps.max()
