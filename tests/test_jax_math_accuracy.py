"""The jax backend's float math against the accuracy contract: a float32 result
within 1 ULP of the correctly rounded value (the float64 reference rounded to
float32), measured through the public path (``lr.<fn>`` under ``lr.backend("jax")``,
so the op table's JAX lowering is what runs) on 2^22 stratified float32 inputs:
every exponent, both signs, random mantissas, plus IEEE edges.

XLA flushes subnormals on CPU (``JaxBackend.flushes_subnormals``): a subnormal
input may read as ±0 and a subnormal result may be ±0, so a result counts as
right against the reference computed either way.

Where XLA's float32 function misses the bound, the lowering is ``lzj.<fn>``
(kernels/jax_math.py: the function in float64, rounded once). Measured on this
sample, max ULP distance (XLA's own -> the lowering's): exp 4 (near overflow)
-> 0 (lzj.exp), log 1, log1p 2 -> 0, expm1 5 -> 0, tanh 4 -> 0, sigmoid 2 -> 0,
erf 5 -> 1 (lz_erff's fits in float64 arithmetic), sin/cos/tan 1 (kept), log2
2 -> 0, log10 3 -> 0, asin/acos 2 -> 0, atan 3 (at 1.001) -> 0,
sinh/cosh/asinh/acosh/atanh 3 -> 0, atan2 and pow wrong on subnormal operands
-> 0, exp2 67 -> 0, erfc 62 -> 0, softplus 3 -> 0.

float64 (2^18 stratified inputs against x87 long double, error in ULPs of the
exact value): XLA's float64 functions miss the 1-ULP contract on several; the
documented bounds below are what is measured, pinned so they cannot regress.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import lazyrt as lr
from float32_ulps import binary_pairs, stratified_float32, ulp_distance

jax = pytest.importorskip("jax", reason="JAX is not installed: the jax backend is absent")
scipy_special = pytest.importorskip("scipy.special")

SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-45, -1e-45,
     1.1754942e-38, 1.17549435e-38, -1.17549435e-38, 3.4028235e38, -3.4028235e38,
     # exp/expm1 overflow and underflow edges, sigmoid/tanh/erf saturation edges
     88.72283, 88.72284, 88.7229, 89.0, -87.33654, -103.97208, -103.97209, -104.0,
     -150.0, -88.72283, 9.0, 9.01, -9.0, 3.9192, 3.92, 3.93, 15.9424, 16.0, 17.0, -17.0,
     # log1p/log/atanh/acosh edges
     -0.99999994, -1.0000001, 1.0000001, 0.99999994, 1e-8, -1e-8, 2**-24, -(2**-24),
     0.3466, -0.3466, 0.625, -0.625, 0.693147, 0.999, 1.001, 4.0, -4.0], np.float32)
TINY = np.float32(2.0 ** -126)


def float32_sample(per_stratum=8192, seed=0):
    return stratified_float32(per_stratum, seed, SPECIALS)


def _flush(v):
    return np.where(np.abs(v) < TINY, np.copysign(np.zeros((), v.dtype), v), v)


def _f64(ref, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ref(*(a.astype(np.float64) for a in args)).astype(np.float32)


def distance_allowing_flush(y, ref, *args):
    """ULP distance to the correctly rounded value, or to the one XLA's subnormal
    flushing gives (inputs read as ±0, a subnormal result as ±0), the smaller."""
    exact = _f64(ref, *args)
    flushed = _flush(_f64(ref, *(_flush(a) for a in args)))
    return np.minimum(ulp_distance(y, exact), ulp_distance(y, flushed))


def _sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


UNARY = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1,
         "tanh": np.tanh, "sigmoid": _sigmoid, "erf": scipy_special.erf, "sin": np.sin,
         "cos": np.cos, "tan": np.tan, "log2": np.log2, "log10": np.log10,
         "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
         "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
         "exp2": np.exp2, "erfc": scipy_special.erfc,
         "softplus": lambda a: np.logaddexp(a, 0.0)}


def run_jax(name, *arrays):
    with lr.backend("jax"):
        return getattr(lr, name)(*(lr.tensor(a) for a in arrays)).numpy()


@pytest.fixture(scope="module")
def x32():
    return float32_sample()


@pytest.mark.parametrize("name", [n for n in UNARY if n != "exp"])
def test_jax_float32_function_is_within_1_ulp_of_the_correctly_rounded_value(x32, name):
    y = run_jax(name, x32)
    assert y.dtype == np.float32
    d = distance_allowing_flush(y, UNARY[name], x32)
    worst = int(np.argmax(d))
    assert d[worst] <= 1, f"{name}({x32[worst]!r}) = {y[worst]!r}: {d[worst]} ULP"


def test_jax_float32_exp_through_the_op_table_is_within_1_ulp(x32):
    """lzj.exp (XLA's float32 exp is 4 ULP off at x in [88.7, 88.72])."""
    assert distance_allowing_flush(run_jax("exp", x32), np.exp, x32).max() <= 1


def test_jax_float32_exp_in_float64_is_within_1_ulp(x32):
    """lzj.exp itself, outside the op table."""
    from lazyrt.kernels import jax_math as lzj
    with jax.enable_x64(True):
        y = np.asarray(jax.jit(lzj.exp)(x32))
    assert distance_allowing_flush(y, np.exp, x32).max() <= 1


def _pairs(n=1 << 20, seed=3):
    return binary_pairs(n, seed, float32_sample)


@pytest.mark.parametrize("name,ref", [("atan2", np.arctan2), ("pow", np.power)])
def test_jax_float32_binary_function_is_within_1_ulp(name, ref):
    a, b = _pairs()[name]
    y = run_jax(name, a, b)
    d = distance_allowing_flush(y, ref, a, b)
    worst = int(np.argmax(d))
    assert d[worst] <= 1, f"{name}({a[worst]!r}, {b[worst]!r}) = {y[worst]!r}: {d[worst]} ULP"


@pytest.mark.parametrize("name", [n for n in UNARY if n != "exp"])  # exp: its own test above
def test_jax_float32_special_values_match_numpy(name):
    """The IEEE edges (signed zeros, infinities, NaN, overflow and saturation
    points) as NumPy's float32 loop, bit for bit up to 1 ULP; subnormals aside."""
    x = SPECIALS[np.abs(SPECIALS) >= TINY]
    x = np.concatenate([x, SPECIALS[SPECIALS == 0]])
    y = run_jax(name, x)
    d = distance_allowing_flush(y, UNARY[name], x)
    assert d.max() <= 1, dict(zip(x[d > 1], y[d > 1]))
    exact = _f64(UNARY[name], x)
    same_zero_sign = (exact != 0) | (np.signbit(exact) == np.signbit(y))
    assert same_zero_sign.all(), dict(zip(x[~same_zero_sign], y[~same_zero_sign]))


# --- float64: against x87 long double ------------------------------------------------

#: measured max error in ULPs of the exact value (2^18 stratified normal inputs); the
#: contract's 1 ULP is missed by XLA's float64 functions where this is above 1
F64_MEASURED = {"exp": 1.5, "log": 1.0, "log1p": 1.5, "expm1": 4.1, "tanh": 6.5,
                "sigmoid": 2.1, "sin": 1.0, "cos": 1.0, "tan": 1.0, "log2": 1.4,
                "log10": 1.6, "asin": 1.8, "acos": 1.3, "atan": 1.0, "sinh": 3.3,
                "cosh": 3.3, "asinh": 2.4, "acosh": 2.9, "atanh": 2.6}


def float64_sample(per_stratum=64, seed=1):
    rng = np.random.default_rng(seed)
    top = np.repeat(np.arange(4096, dtype=np.uint64), per_stratum) << np.uint64(52)
    x = (top | rng.integers(0, 1 << 52, top.size, dtype=np.uint64)).view(np.float64)
    return x[np.abs(x) >= 2.0 ** -1022]  # XLA flushes subnormals


def f64_error(y, x, ref):
    """Error of float64 ``y`` in ULPs of ``ref`` evaluated in long double."""
    with np.errstate(all="ignore"):
        exact = ref(x.astype(np.longdouble))
        _, e = np.frexp(np.abs(exact).astype(np.float64))
        ulp = np.ldexp(np.ones_like(x), np.maximum(e - 53, -1074)).astype(np.longdouble)
        err = (np.abs(y.astype(np.longdouble) - exact) / ulp).astype(np.float64)
        rounded = exact.astype(np.float64)
        same = (y == rounded) | (np.isnan(y) & np.isnan(rounded)) | (
            (np.abs(rounded) < 2.0 ** -1022) & (np.abs(y) < 2.0 ** -1022))
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="no x87 long double here")
@pytest.mark.parametrize("name", list(F64_MEASURED))
def test_jax_float64_function_error_is_as_measured(name):
    x = float64_sample()
    y = run_jax(name, x)
    assert y.dtype == np.float64
    worst = f64_error(y, x, UNARY[name]).max()
    assert worst <= F64_MEASURED[name], worst


def test_jax_float64_erf_spot_checks_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    x = np.concatenate([np.random.default_rng(2).uniform(-6, 6, 300), [1e-300, -0.5, 5.9]])
    y = run_jax("erf", x)
    with mpmath.workdps(40):
        exact = np.array([float(mpmath.erf(mpmath.mpf(float(v)))) for v in x])
    ulp = np.spacing(np.abs(exact))
    assert (np.abs(y - exact) / ulp).max() <= 2.0
