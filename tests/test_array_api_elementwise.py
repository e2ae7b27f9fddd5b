"""The array API's (2023.12) remaining elementwise functions, on every backend,
against NumPy: accuracy in ULP over the whole float range (random bit
patterns: every exponent, both signs, subnormals, huge values) and bit-exact
special cases (±0, ±inf, NaN), every dtype with NumPy's dtype rule, broadcasting,
0-d, size-0 and strided inputs; the shifts give NumPy's results for every
amount, negative and past the bit width included.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyrt as lr
from conftest import DTYPES, FLOAT_DTYPES, INT_DTYPES, assert_exact, flushes_subnormals, \
    lazyrt_dtype, numpy_ref

#: name -> the NumPy function it matches (lazyrt follows NumPy's dtype rule)
UNARY_FLOAT = {"acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin, "asinh": np.arcsinh,
               "atan": np.arctan, "atanh": np.arctanh, "cosh": np.cosh, "sinh": np.sinh,
               "tan": np.tan, "log2": np.log2, "log10": np.log10}
BINARY_FLOAT = {"atan2": np.arctan2, "logaddexp": np.logaddexp, "copysign": np.copysign}

#: max error in ULPs of the exact value, any backend (NumPy's own float32 loops
#: are within 4; lazyrt's C and Triton within 1)
MAX_ULP = 4.0
N_RANDOM = 1 << 13

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 10.0, 1e-3,
            np.pi / 2, -np.pi / 2, 100.0, -100.0, 1e10, -1e10]


def specials(dtype):
    """Special values of ``dtype``: signed zeros, infinities, NaN (both signs),
    the smallest subnormal and normal, the largest finite, and the table above."""
    fi = np.finfo(dtype)
    tiny = [fi.smallest_subnormal, -fi.smallest_subnormal, fi.tiny, -fi.tiny]
    with np.errstate(over="ignore"):
        v = np.array(SPECIALS + tiny + [fi.max, -fi.max, fi.max / 2], dtype=dtype)
    return flush(np.concatenate([v, -np.abs(np.array([np.nan], dtype))]))


def flush(x):
    """Subnormals flushed to 0 on a backend that flushes them (the jax backend's
    documented deviation), else ``x``."""
    if x.dtype.kind != "f" or not flushes_subnormals():
        return x
    return np.where(np.abs(x) < np.finfo(x.dtype).tiny, np.zeros((), x.dtype), x)


def random_bits(dtype, n, seed):
    """``n`` values of ``dtype`` from uniformly random bit patterns: every exponent."""
    dtype = np.dtype(dtype)
    bits = np.random.default_rng(seed).integers(0, 2 ** (8 * dtype.itemsize), n,
                                                dtype=np.uint64)
    return bits.astype(f"u{dtype.itemsize}").view(dtype)


def float_inputs(dtype, seed=0):
    return flush(np.concatenate([specials(dtype), random_bits(dtype, N_RANDOM, seed),
                                 np.random.default_rng(seed).uniform(-3, 3, 512).astype(dtype)]))


def exact(fn, *args):
    """``fn`` in a wider float: float64 for float16/32, long double for float64."""
    wide = np.longdouble if args[0].dtype == np.float64 else np.float64
    with np.errstate(invalid="ignore"):  # NaN payloads widen with a warning
        return numpy_ref(fn, *(a.astype(wide) for a in args))


def ulp_error(y, ref, dtype, basis=None):
    """|y - ref| in ULPs of ``ref`` (or of ``basis``) in ``dtype``; NaN vs NaN and
    equal infinities (or a finite ``ref`` that rounds to that infinity) are exact."""
    fi = np.finfo(dtype)
    with np.errstate(invalid="ignore"):  # NaN payloads widen with a warning
        y = y.astype(ref.dtype)
    _, e = np.frexp(np.abs(ref) if basis is None else basis)
    ulp = np.ldexp(np.ones_like(ref), np.maximum(e - 1 - fi.nmant, fi.minexp - fi.nmant))
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype).astype(ref.dtype)
        same = (y == rounded) | (np.isnan(y) & np.isnan(ref))
        err = np.where(np.isfinite(y) & np.isfinite(ref), np.abs(y - ref) / ulp, np.inf)
    return np.where(same, 0.0, err)


def check_float_result(got, x_args, fn, dtype, bound=MAX_ULP):
    """``got`` (lazyrt's) against NumPy: the dtype, NaN positions and signed
    zeros exactly, values within ``bound`` ULPs of the exact result. logaddexp's
    ULPs are those of max(a, b) or the result, whichever is larger: its formula
    (NumPy's too) cancels where the result nears 0."""
    want = numpy_ref(fn, *x_args)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ref = exact(fn, *x_args)
    keep = np.ones(got.shape, bool)
    if flushes_subnormals():
        keep &= ~((np.abs(ref) < np.finfo(dtype).tiny) & (ref != 0))
        if fn is np.logaddexp:  # a subnormal exp(-|a - b|) is flushed before it is added
            with np.errstate(all="ignore"):
                e = np.exp(-np.abs(x_args[0].astype(ref.dtype) - x_args[1]))
            keep &= ~((e < np.finfo(dtype).tiny) & (e > 0))
    zero = (want == 0) & keep
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]),
                                  err_msg="signed zeros differ")
    basis = None
    if fn is np.logaddexp:
        with np.errstate(invalid="ignore"):
            basis = np.fmax(np.abs(ref), np.abs(np.maximum(*x_args)).astype(ref.dtype))
    err = ulp_error(got, ref, dtype, basis)[keep]
    worst = int(np.argmax(err)) if err.size else 0
    assert err.size == 0 or err[worst] <= bound, (
        f"{err[worst]:.2f} ULP at {[a[keep][worst] for a in x_args]}: "
        f"got {got[keep][worst]!r}, exact {ref[keep][worst]!r}")


# ---- float functions over the whole range ----------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
def test_unary_float_function_is_within_ulp_of_exact_with_numpys_special_cases(
        backend, name, dtype):
    x = float_inputs(dtype, seed=len(name))
    got = getattr(lr, name)(lr.tensor(x)).numpy()
    check_float_result(got, (x,), UNARY_FLOAT[name], dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY_FLOAT))
def test_binary_float_function_is_within_ulp_of_exact_on_all_special_pairs(
        backend, name, dtype):
    s = specials(dtype)
    a, b = (m.ravel() for m in np.meshgrid(s, s))
    a = np.concatenate([a, float_inputs(dtype, 1)])
    b = np.concatenate([b, float_inputs(dtype, 2)])
    got = getattr(lr, name)(lr.tensor(a), lr.tensor(b)).numpy()
    check_float_result(got, (a, b), BINARY_FLOAT[name], dtype,
                       bound=0.0 if name == "copysign" else MAX_ULP)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_copysign_and_signbit_read_the_sign_bit_of_zeros_and_nans(backend, dtype):
    nan = np.array(np.nan, dtype)
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, nan, -nan, 3.0], dtype)
    y = np.array([-1.0, 1.0, -0.0, 0.0, -nan, nan, -2.0, 2.0, -np.inf], dtype)
    got = lr.copysign(lr.tensor(x), lr.tensor(y)).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.copysign(x, y)))
    np.testing.assert_array_equal(np.abs(got), np.abs(x))
    assert_exact(lr.signbit(lr.tensor(x)), np.signbit(x))
    assert lr.signbit(lr.tensor(np.array(-0.0, dtype))).item() is True


# The standard's special cases (C99 Annex F), named: NumPy's values bit for bit.
STANDARD_CASES = [
    ("atan2", (0.0, 0.0), 0.0), ("atan2", (-0.0, 0.0), -0.0),
    ("atan2", (0.0, -0.0), np.pi), ("atan2", (-0.0, -0.0), -np.pi),
    ("atan2", (1.0, 0.0), np.pi / 2), ("atan2", (-1.0, -0.0), -np.pi / 2),
    ("atan2", (np.inf, np.inf), np.pi / 4), ("atan2", (-np.inf, -np.inf), -3 * np.pi / 4),
    ("atan2", (1.0, -np.inf), np.pi), ("atan2", (-1.0, np.inf), -0.0),
    ("atan2", (np.nan, 1.0), np.nan),
    ("logaddexp", (np.inf, np.inf), np.inf), ("logaddexp", (-np.inf, -np.inf), -np.inf),
    ("logaddexp", (-np.inf, 1.0), 1.0), ("logaddexp", (np.inf, np.nan), np.nan),
    ("copysign", (np.nan, -1.0), -np.nan), ("copysign", (2.0, -0.0), -2.0),
    ("log2", (0.0,), -np.inf), ("log2", (-0.0,), -np.inf), ("log2", (8.0,), 3.0),
    ("log10", (0.0,), -np.inf), ("log10", (-1.0,), np.nan),
    ("asin", (-0.0,), -0.0), ("atan", (-np.inf,), -np.pi / 2), ("acos", (1.0,), 0.0),
    ("acosh", (1.0,), 0.0), ("acosh", (0.5,), np.nan), ("atanh", (-1.0,), -np.inf),
    ("atanh", (-0.0,), -0.0), ("asinh", (-np.inf,), -np.inf), ("sinh", (-0.0,), -0.0),
    ("cosh", (-np.inf,), np.inf), ("tan", (-0.0,), -0.0), ("trunc", (-0.5,), -0.0),
    ("trunc", (-np.inf,), -np.inf), ("signbit", (-0.0,), True), ("signbit", (-np.nan,), True),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_of_equal_operands_follow_numpy(backend, dtype, name):
    """NumPy keeps the second of two equal operands in float32/64 (x86's maxps) and
    the first in float16 (its half loop): the sign of a zero tells which, also
    against a scalar (1e-8 is 0 in float16). NaN wins from either side."""
    x = np.array([-0.0, 0.0, -0.0, 0.0, np.nan, 1.0, 2.0, -np.inf, -0.0], dtype)
    y = np.array([0.0, -0.0, -0.0, 0.0, 1.0, np.nan, 2.0, -np.inf, 3.0], dtype)
    fn, lfn = getattr(np, name), getattr(lr, name)
    for got, want in ((lfn(lr.tensor(x), lr.tensor(y)), fn(x, y)),
                      (lfn(lr.tensor(y), lr.tensor(x)), fn(y, x)),
                      (lfn(lr.tensor(x), 0.0), fn(x, 0.0)),
                      (lfn(lr.tensor(x), -0.0), fn(x, -0.0)),
                      (lfn(lr.tensor(x), 1e-8), fn(x, 1e-8))):
        got = got.numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_cases_of_the_standard(backend, dtype):
    for name, args, expected in STANDARD_CASES:
        got = getattr(lr, name)(*(lr.tensor(np.array(a, dtype)) for a in args)).numpy()
        want = np.array(expected).astype(got.dtype)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        if got.dtype.kind == "f" and np.isfinite(want) and want != 0:
            same |= ulp_error(got.reshape(1), np.array([expected]), dtype)[0] <= 1
        sign_ok = np.isnan(want) or np.signbit(got) == np.signbit(want)
        assert same and sign_ok, (name, args, got, want)


# ---- trunc, signbit, logical_xor: exact on every dtype ---------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_trunc_is_exact_and_the_identity_on_ints_and_bool(backend, dtype):
    x = (np.concatenate([specials(dtype), random_bits(dtype, 4096, 3),
                         np.linspace(-5, 5, 41).astype(dtype)]) if dtype.kind == "f"
         else random_bits(dtype, 4096, 3) if dtype.kind in "iu"
         else np.array([True, False]))
    x = flush(x)
    got, want = lr.trunc(lr.tensor(x)), numpy_ref(np.trunc, x)
    assert_exact(got, want)
    if dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_new_function_follows_numpys_dtype_rule(backend, dtype):
    """Ints and bool compute in the float dtype NumPy picks (as lr.exp does)."""
    x = np.array([0, 1, 1, 0, 1], dtype=dtype)
    y = np.array([1, 1, 0, 0, 1], dtype=dtype)
    for name, fn in {**UNARY_FLOAT, "signbit": np.signbit}.items():
        want = numpy_ref(fn, x)
        got = getattr(lr, name)(lr.tensor(x))
        assert got.dtype == lazyrt_dtype(want.dtype), (name, dtype)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64),
                                   rtol=1e-3, equal_nan=True, err_msg=name)
    for name, fn in {**BINARY_FLOAT, "logical_xor": np.logical_xor}.items():
        want = numpy_ref(fn, x, y)
        got = getattr(lr, name)(lr.tensor(x), lr.tensor(y))
        assert got.dtype == lazyrt_dtype(want.dtype), (name, dtype)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64),
                                   rtol=1e-3, err_msg=name)


def test_logical_xor_of_mixed_dtypes_and_scalars(backend):
    a = np.array([0, 2, -1, 0], np.int8)
    b = np.array([0.0, 0.0, np.nan, -0.0], np.float32)
    assert_exact(lr.logical_xor(lr.tensor(a), lr.tensor(b)), np.logical_xor(a, b))
    assert_exact(lr.logical_xor(lr.tensor(a), True), np.logical_xor(a, True))


# ---- shifts ------------------------------------------------------------------------

def shift_operands(dtype):
    """Edge values shifted by every amount in [-3, bits + 3] and a few huge ones."""
    info, bits = np.iinfo(dtype), np.dtype(dtype).itemsize * 8
    values = np.unique(np.array([0, 1, 5, 127, info.max, info.min, info.min + 1, info.max // 3]
                                + ([-1, -5, -128] if info.min < 0 else []), dtype=np.int64)
                       .clip(info.min, info.max)).astype(dtype)
    amounts = np.arange(max(info.min, -3), bits + 4).astype(dtype)
    amounts = np.concatenate([amounts, np.array([info.max, info.min], dtype)])
    a, b = (m.ravel() for m in np.meshgrid(values, amounts))
    return a, b


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_shifts_give_numpys_results_for_every_amount(backend, dtype):
    a, b = shift_operands(dtype)
    ta, tb = lr.tensor(a), lr.tensor(b)
    assert_exact(lr.bitwise_left_shift(ta, tb), np.left_shift(a, b))
    assert_exact(lr.bitwise_right_shift(ta, tb), np.right_shift(a, b))
    assert_exact(ta << tb, a << b)
    assert_exact(ta >> tb, a >> b)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_shift_operators_with_scalars_reflected_and_in_place(backend, dtype):
    a, b = shift_operands(dtype)
    bits = np.dtype(dtype).itemsize * 8
    for k in (0, 1, 3, bits - 1, bits):
        if k <= np.iinfo(dtype).max:
            assert_exact(lr.tensor(a) << k, a << k)
            assert_exact(lr.tensor(a) >> k, a >> k)
    small = b[(b >= 0) & (b < bits)]
    assert_exact(1 << lr.tensor(small), numpy_ref(np.left_shift, 1, small))
    assert_exact(-1 >> lr.tensor(b) if np.iinfo(dtype).min < 0 else 255 >> lr.tensor(b),
                 numpy_ref(np.right_shift, -1 if np.iinfo(dtype).min < 0 else 255, b))
    t = lr.tensor(a)
    view = t[:]
    t <<= lr.tensor(b)
    assert_exact(t, a << b)
    t >>= 1
    assert_exact(t, (a << b) >> 1)
    assert_exact(view, a)  # an in-place shift rebinds t only


def test_shifts_of_bool_and_mixed_dtypes_follow_numpys_promotion(backend):
    a = np.array([True, False, True])
    b = np.array([1, 2, 9], np.int8)
    c = np.array([3, 1, 40], np.int64)
    u = np.array([200, 7, 255], np.uint8)
    for x, y in ((a, a), (a, b), (b, c), (u, c), (a, u)):
        assert_exact(lr.bitwise_left_shift(lr.tensor(x), lr.tensor(y)), np.left_shift(x, y))
        assert_exact(lr.bitwise_right_shift(lr.tensor(x), lr.tensor(y)), np.right_shift(x, y))
    # int8 with uint8: NumPy computes in int16, which lazyrt lacks; a left shift in
    # int32 would keep the bits NumPy drops, so it is refused, not silently different
    assert_exact(lr.bitwise_right_shift(lr.tensor(u), lr.tensor(b)), np.right_shift(u, b),
                 dtype=np.int32)
    with pytest.raises(lr.DTypeError, match="bitwise_left_shift.*uint8.*int8"):
        lr.tensor(u) << lr.tensor(b)


def test_shifts_and_float_functions_refuse_what_numpy_refuses():
    x = lr.tensor(np.ones(3, np.float32))
    with pytest.raises(lr.DTypeError, match="bitwise_left_shift.*float32"):
        lr.bitwise_left_shift(x, x)
    with pytest.raises(lr.DTypeError, match="bitwise_right_shift"):
        x >> 1
    with pytest.raises(lr.ShapeError, match=r"atan2.*\(3,\).*\(2,\)"):
        lr.atan2(x, lr.tensor(np.ones(2, np.float32)))
    with pytest.raises(OverflowError):
        lr.tensor(np.ones(3, np.int8)) << 300
    with pytest.raises(lr.DTypeError, match="positive.*bool"):
        lr.positive(lr.tensor(np.ones(3, bool)))
    with pytest.raises(lr.DTypeError, match="positive.*bool"):
        +lr.tensor(np.ones(3, bool))


# ---- shapes, views, aliases ------------------------------------------------------------

def test_broadcasting_0d_size0_and_strided_views(backend):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 1)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    base = rng.uniform(-0.9, 0.9, (6, 8)).astype(np.float32)
    view, view_np = lr.tensor(base)[::2, 1::3].T, base[::2, 1::3].T
    for name, fn in BINARY_FLOAT.items():
        f = getattr(lr, name)
        check_float_result(f(lr.tensor(a), lr.tensor(b)).numpy(),
                           np.broadcast_arrays(a, b), fn, np.float32)
        check_float_result(f(lr.tensor(a[0, 0]), lr.tensor(b)).numpy(),
                           np.broadcast_arrays(a[0, 0], b), fn, np.float32)
        assert f(lr.tensor(np.zeros((0, 3), np.float32)), 1.0).shape == (0, 3)
    for name, fn in UNARY_FLOAT.items():
        f = getattr(lr, name)
        check_float_result(f(view).numpy(), (view_np,), fn, np.float32)
        zero_d = f(lr.tensor(np.float64(0.25)))
        assert zero_d.shape == () and zero_d.dtype == np.float64
        assert f(lr.tensor(np.zeros((2, 0), np.float16))).numpy().shape == (2, 0)
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert_exact(lr.bitwise_left_shift(lr.tensor(i)[:, ::-1], lr.tensor(np.int32(2))),
                 np.left_shift(i[:, ::-1], np.int32(2)))


def test_new_functions_fuse_into_one_kernel_with_their_neighbours(backend):
    x = np.linspace(-0.9, 0.9, 64, dtype=np.float32)
    t = lr.tensor(x)
    out = lr.atan2(lr.asin(t) * 2.0, lr.cosh(t)) + lr.logaddexp(t, lr.log2(t + 1.0))
    want = numpy_ref(lambda v: np.arctan2(np.arcsin(v) * np.float32(2), np.cosh(v))
                     + np.logaddexp(v, np.log2(v + np.float32(1))), x)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-6, atol=1e-6)
    if backend in ("c", "triton"):
        assert len(lr.debug.last_record().kernels) == 1


def test_aliases_and_the_real_valued_complex_functions(backend):
    x = np.array([[1.5, -0.0], [np.nan, -2.0]], np.float32)
    i = np.array([1, -2, 3], np.int8)
    t, ti = lr.tensor(x), lr.tensor(i)
    assert lr.pow is lr.power and lr.bitwise_invert is lr.invert
    assert_exact(lr.pow(ti, 2), np.power(i, 2))
    assert_exact(lr.bitwise_invert(ti), np.invert(i))
    for fn, want in ((lr.positive, np.positive(x)), (lr.real, np.real(x)),
                     (lr.conj, np.conj(x)), (lr.imag, np.imag(x))):
        out = fn(t)
        assert out is not t and out.dtype == np.float32
        assert_exact(out, want)
    assert_exact(lr.imag(ti), np.imag(i))
    assert_exact(lr.positive(ti), np.positive(i))
    p = lr.positive(t)
    p += 1.0  # a new tensor: t is unchanged
    assert_exact(t, x)
