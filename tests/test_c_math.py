"""kernels/lazyrt_math.h against NumPy: accuracy in ULP over the float32 range,
IEEE special cases, and NumPy's integer/float division semantics.

The float32 functions are checked on a dense stratified sample of 2^24 bit
patterns (every exponent, both signs, random mantissas) plus special values.
Set LAZYRT_EXHAUSTIVE_MATH=1 to sweep all 2^32 float32 bit patterns instead,
in C against glibc's double-precision functions (about a minute per function
on 2 cores).
"""
import ctypes
import os
import re
import shutil
import subprocess
import warnings

import numpy as np
import pytest

from lazyrt.backends.c_compiler import CCompiler

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                reason="no C compiler")

# Documented in the header: max error of the float32 functions. Those computed
# in double are within 1 ULP; expf, sigmoidf and tanhf run in float32 arithmetic.
MAX_ULP_F32 = 1.0
MAX_ULP = {"exp": 1.5, "tanh": 1.5}

#: the array API's functions (kernels/lazyrt_math_array_api.h), float32 through double
ARRAY_API_F32 = ["asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2",
                 "log10"]
F32_UNARY = ["expf", "logf", "log1pf", "expm1f", "tanhf", "sigmoidf", "erff", "sinf", "cosf",
             "signf", "roundf", "tanf", "exp2f", "erfcf", "softplusf"] + [
                 f + "f" for f in ARRAY_API_F32]
F64_UNARY = ["exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf", "sin", "cos", "sign",
             "round", "tan"] + ARRAY_API_F32
BINARY = [("maxf", "float"), ("minf", "float"), ("max", "double"), ("min", "double"),
          ("floordiv_f32", "float"), ("mod_f32", "float"),
          ("floordiv_f64", "double"), ("mod_f64", "double"),
          ("floordiv_i64", "int64_t"), ("mod_i64", "int64_t"),
          ("floordiv_i32", "int32_t"), ("mod_i32", "int32_t"),
          ("floordiv_i8", "int8_t"), ("mod_i8", "int8_t"),
          ("floordiv_u8", "uint8_t"), ("mod_u8", "uint8_t"),
          ("atan2f", "float"), ("logaddexpf", "float"), ("copysignf", "float"), ("powf", "float"),
          ("atan2", "double"), ("logaddexp", "double"), ("copysign", "double")] + [
          (f"{k}_{s}", t) for k in ("shl", "shr") for s, t in
          (("i8", "int8_t"), ("u8", "uint8_t"), ("i32", "int32_t"), ("i64", "int64_t"))]


def _wrappers() -> str:
    lines = ['#include <stdint.h>', '#include "lazyrt_math.h"']
    for f in F32_UNARY:
        lines.append(f"void w_{f}(long n, const float *x, float *y) {{\n"
                     f"#pragma omp parallel for simd\n"
                     f"  for (long i = 0; i < n; i++) y[i] = lz_{f}(x[i]); }}")
    for f in F64_UNARY:
        lines.append(f"void w_{f}(long n, const double *x, double *y) {{\n"
                     f"#pragma omp parallel for simd\n"
                     f"  for (long i = 0; i < n; i++) y[i] = lz_{f}(x[i]); }}")
    for f, t in BINARY:
        lines.append(f"void w_{f}(long n, const {t} *a, const {t} *b, {t} *y) {{\n"
                     f"#pragma omp parallel for simd\n"
                     f"  for (long i = 0; i < n; i++) y[i] = lz_{f}(a[i], b[i]); }}")
    for f, t in (("signbitf", "float"), ("signbit", "double")):
        lines.append(f"void w_{f}(long n, const {t} *x, uint8_t *y) {{\n"
                     f"#pragma omp parallel for simd\n"
                     f"  for (long i = 0; i < n; i++) y[i] = (uint8_t)lz_{f}(x[i]); }}")
    lines.append("void w_f16_to_f32(long n, const uint16_t *x, float *y) {\n"
                 "#pragma omp parallel for simd\n"
                 "  for (long i = 0; i < n; i++) y[i] = lz_f16bits_to_f32(x[i]); }")
    lines.append("void w_f32_to_f16(long n, const float *x, uint16_t *y) {\n"
                 "#pragma omp parallel for simd\n"
                 "  for (long i = 0; i < n; i++) y[i] = lz_f32_to_f16bits(x[i]); }")
    lines.append("void w_f16_load_store(long n, const _Float16 *x, _Float16 *y) {\n"
                 "  for (long i = 0; i < n; i++) lz_store_f16(&y[i], lz_load_f16(&x[i]) * 3.0f); }")
    return "\n".join(lines) + "\n"


SWEEP = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "lazyrt_math.h"
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_softplus(double x) { return fmax(x, 0.0) + log1p(exp(-fabs(x))); }
/* error of y in float32 ULPs of the exact value ref (see ulp_error below) */
static double ulp_err(float y, double ref)
{
    if (!isfinite(y) || !isfinite(ref))
        return (y == (float)ref || (isnan(y) && isnan(ref))) ? 0.0 : INFINITY;
    int e;
    frexp(fabs(ref), &e);
    return fabs((double)y - ref) / ldexp(1.0, e - 24 > -149 ? e - 24 : -149);
}
#define SWEEP(F, REF)                                                          \
    double sweep_##F(int64_t lo, int64_t hi) {                                 \
        double worst = 0;                                                      \
        _Pragma("omp parallel for reduction(max:worst)")                       \
        for (int64_t i = lo; i < hi; i++) {                                    \
            uint32_t b = (uint32_t)i; float x; memcpy(&x, &b, 4);              \
            double err = ulp_err(lz_##F##f(x), REF((double)x));                \
            worst = err > worst ? err : worst;                                 \
        }                                                                      \
        return worst;                                                          \
    }
SWEEP(exp, exp) SWEEP(log, log) SWEEP(log1p, log1p) SWEEP(expm1, expm1)
SWEEP(tanh, tanh) SWEEP(sigmoid, ref_sigmoid) SWEEP(erf, erf)
SWEEP(asin, asin) SWEEP(acos, acos) SWEEP(atan, atan) SWEEP(sinh, sinh) SWEEP(cosh, cosh)
SWEEP(asinh, asinh) SWEEP(acosh, acosh) SWEEP(atanh, atanh) SWEEP(log2, log2)
SWEEP(log10, log10) SWEEP(sin, sin) SWEEP(cos, cos) SWEEP(tan, tan)
SWEEP(exp2, exp2) SWEEP(erfc, erfc) SWEEP(softplus, ref_softplus)
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return CCompiler(cache_dir=str(tmp_path_factory.mktemp("cache"))).load(
        "test_lazyrt_math", _wrappers())


def call(lib, name, *args, out_dtype=None):
    args = [np.ascontiguousarray(a) for a in args]
    out = np.empty(args[0].shape, dtype=out_dtype or args[0].dtype)
    getattr(lib, "w_" + name)(ctypes.c_long(out.size),
                              *[ctypes.c_void_p(a.ctypes.data) for a in args],
                              ctypes.c_void_p(out.ctypes.data))
    return out


# ---- reference and error measure -------------------------------------------

def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _erf(x):
    import torch
    return torch.special.erf(torch.from_numpy(x)).numpy()


def _erfc(x):
    import torch
    return torch.special.erfc(torch.from_numpy(x)).numpy()


REFERENCE = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1,
             "tanh": np.tanh, "sigmoid": _sigmoid, "erf": _erf, "sin": np.sin, "cos": np.cos,
             "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
             "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
             "atanh": np.arctanh, "log2": np.log2, "log10": np.log10, "exp2": np.exp2,
             "erfc": _erfc, "softplus": lambda x: np.logaddexp(x, 0.0)}


def ulp_error(y, ref, dtype=np.float32):
    """Error of ``y`` (dtype) in units of the last place of the exact value ``ref``
    (a wider float). NaN vs NaN and equal infinities are exact; any other
    mismatch of non-finite values is an infinite error."""
    info = np.finfo(dtype)
    y = y.astype(np.longdouble if dtype == np.float64 else np.float64)
    ref = np.asarray(ref, dtype=y.dtype)
    _, e = np.frexp(np.abs(ref))
    ulp = np.ldexp(np.ones_like(ref), np.maximum(e - 1 - info.nmant, info.minexp - info.nmant))
    with np.errstate(invalid="ignore", over="ignore"):
        # a finite exact value that rounds to ±inf, and NaN for NaN, count as exact
        same = (y == ref.astype(dtype).astype(y.dtype)) | (np.isnan(y) & np.isnan(ref))
        err = np.where(np.isfinite(y) & np.isfinite(ref), np.abs(y - ref) / ulp, np.inf)
    return np.where(same & ~(np.isfinite(y) & np.isfinite(ref)), 0.0, err)


SPECIALS_F32 = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-45, -1e-45,
     1.1754942e-38, 1.17549435e-38, -1.17549435e-38, 3.4028235e38, -3.4028235e38,
     # exp/expm1 overflow and underflow edges, sigmoid/tanh saturation edges
     88.72283, 88.72284, 88.7229, 89.0, -87.33654, -103.97208, -103.97209, -104.0, -150.0,
     -88.72283, 9.0, 9.01, -9.0, 3.9192, 3.92, 3.93, 15.9424, 16.0, 17.0, -17.0,
     # log1p/log edges
     -0.99999994, -1.0000001, 1.0000001, 0.99999994, 1e-8, -1e-8, 2**-24, -(2**-24),
     0.3466, -0.3466, 0.3465, 0.693147, 1.0, 0.999, 1.001, 4.0, 3.999999, -4.0],
    dtype=np.float32)


def float32_sample(seed=0, stride=256):
    """Every stride-th float32 bit pattern plus a random offset: all exponents,
    both signs, all NaN/inf encodings, then the special values."""
    rng = np.random.default_rng(seed)
    base = np.arange(0, 2**32, stride, dtype=np.uint64)
    bits = (base + rng.integers(0, stride, base.size, dtype=np.uint64)).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), SPECIALS_F32])


def f32_max_ulp(lib, name, x):
    y = call(lib, name + "f", x)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = REFERENCE[name](x.astype(np.float64))
    return ulp_error(y, ref).max(), y


# ---- float32 transcendental functions ----------------------------------------

def _f32_worst_ulp(lib, name, tmp_path, stride=256):
    """The largest error of lz_<name>f: on the stratified sample, or over all 2^32
    inputs (in C) with LAZYRT_EXHAUSTIVE_MATH=1."""
    if os.environ.get("LAZYRT_EXHAUSTIVE_MATH"):
        sweep = getattr(CCompiler(cache_dir=str(tmp_path)).load("sweep_lazyrt_math", SWEEP),
                        f"sweep_{name}")
        sweep.restype = ctypes.c_double
        worst = sweep(ctypes.c_int64(0), ctypes.c_int64(2**32))
    else:
        worst = f32_max_ulp(lib, name, float32_sample(stride=stride))[0]
    print(f"lz_{name}f max error {worst:.3f} ULP")
    return worst


@pytest.mark.parametrize("name", ["exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf",
                                  "exp2", "erfc", "softplus", *ARRAY_API_F32])
def test_float32_function_is_within_documented_ulp_everywhere(lib, name, tmp_path):
    assert _f32_worst_ulp(lib, name, tmp_path) <= MAX_ULP.get(name, MAX_ULP_F32)


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_float32_sin_cos_tan_are_within_1_ulp_over_the_whole_range(lib, name, tmp_path):
    """Every exponent (Payne-Hanek's integer reduction from 2^26 up to 2^128, the
    double Cody-Waite reduction below), both signs, NaN and inf."""
    assert _f32_worst_ulp(lib, name, tmp_path, stride=1024) <= MAX_ULP_F32


@pytest.mark.parametrize("name, x, expected", [
    ("exp", [np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -104.0, -87.5],
     [np.nan, np.inf, 0.0, 1.0, 1.0, np.inf, 0.0, np.exp(np.float64(-87.5))]),
    ("log", [np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0, 1e-45],
     [np.nan, np.inf, np.nan, -np.inf, -np.inf, np.nan, 0.0, np.log(1.401298464324817e-45)]),
    ("log1p", [np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, -2.0, 1e-45],
     [np.nan, np.inf, np.nan, 0.0, -0.0, -np.inf, np.nan, 1e-45]),
    ("expm1", [np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, 1e-45, -1e-45],
     [np.nan, np.inf, -1.0, 0.0, -0.0, np.inf, 1e-45, -1e-45]),
    ("tanh", [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 50.0],
     [np.nan, 1.0, -1.0, 0.0, -0.0, 1e-45, -1e-45, 1.0]),
    ("sigmoid", [np.nan, np.inf, -np.inf, 0.0, -0.0, 200.0, -200.0, -100.0],
     [np.nan, 1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 1 / (1 + np.exp(100.0))]),
    ("erf", [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 4.0],
     [np.nan, 1.0, -1.0, 0.0, -0.0, 1e-45, -1e-45, 1.0]),
    ("sin", [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45],
     [np.nan, np.nan, np.nan, 0.0, -0.0, 1e-45, -1e-45]),
    ("cos", [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45], [np.nan, np.nan, np.nan, 1.0, 1.0, 1.0]),
    ("tan", [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45],
     [np.nan, np.nan, np.nan, 0.0, -0.0, 1e-45, -1e-45]),
    ("exp2", [np.nan, np.inf, -np.inf, 0.0, -0.0, 128.0, -149.0, -150.0, 3.0, -126.0],
     [np.nan, np.inf, 0.0, 1.0, 1.0, np.inf, 1e-45, 0.0, 8.0, 2.0**-126]),
    ("erfc", [np.nan, np.inf, -np.inf, 0.0, -0.0, 10.1, 11.0, -11.0, 1e-45],
     [np.nan, 0.0, 2.0, 1.0, 1.0, 0.0, 0.0, 2.0, 1.0]),
    ("softplus", [np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -103.0, -200.0, 3e38],
     [np.nan, np.inf, 0.0, np.log(2.0), np.log(2.0), 100.0, np.exp(-103.0), 0.0, 3e38]),
])
def test_float32_special_values_follow_libm(lib, name, x, expected):
    y = call(lib, name + "f", np.array(x, dtype=np.float32))
    exp = np.array(expected, dtype=np.float32)
    np.testing.assert_array_equal(y, exp)
    # signed zeros: -0 in, -0 out where libm does it
    assert (np.signbit(y) == np.signbit(exp))[~np.isnan(exp)].all(), (y, exp)


INF, NAN = np.inf, np.nan
PI, PI_2, PI_4 = np.pi, np.pi / 2, np.pi / 4


@pytest.mark.parametrize("name, x, expected", [
    ("asin", [NAN, 2.0, -1.5, INF, 0.0, -0.0, 1.0, -1.0, 1e-45],
     [NAN, NAN, NAN, NAN, 0.0, -0.0, PI_2, -PI_2, 1e-45]),
    ("acos", [NAN, 1.5, -INF, 1.0, -1.0, 0.0, -0.0],
     [NAN, NAN, NAN, 0.0, PI, PI_2, PI_2]),
    ("atan", [NAN, INF, -INF, 0.0, -0.0, 1e-45, 3e38], [NAN, PI_2, -PI_2, 0.0, -0.0, 1e-45, PI_2]),
    ("sinh", [NAN, INF, -INF, 0.0, -0.0, 1e-45, 90.0, -90.0],
     [NAN, INF, -INF, 0.0, -0.0, 1e-45, INF, -INF]),
    ("cosh", [NAN, INF, -INF, 0.0, -0.0, 90.0], [NAN, INF, INF, 1.0, 1.0, INF]),
    ("asinh", [NAN, INF, -INF, 0.0, -0.0, 1e-45, -1e-45],
     [NAN, INF, -INF, 0.0, -0.0, 1e-45, -1e-45]),
    ("acosh", [NAN, 0.5, -INF, 1.0, INF, 0.0], [NAN, NAN, NAN, 0.0, INF, NAN]),
    ("atanh", [NAN, 1.0, -1.0, 1.5, -INF, 0.0, -0.0, 1e-45],
     [NAN, INF, -INF, NAN, NAN, 0.0, -0.0, 1e-45]),
    ("log2", [NAN, -1.0, 0.0, -0.0, INF, 1.0, 8.0, 2.0**-149, 2.0**127],
     [NAN, NAN, -INF, -INF, INF, 0.0, 3.0, -149.0, 127.0]),
    ("log10", [NAN, -1.0, 0.0, -0.0, INF, 1.0, 10.0, 1000.0, 1e-30],
     [NAN, NAN, -INF, -INF, INF, 0.0, 1.0, 3.0, -30.0]),
])
def test_array_api_float32_special_values_follow_the_standard(lib, name, x, expected):
    y = call(lib, name + "f", np.array(x, dtype=np.float32))
    exp = np.array(expected, dtype=np.float32)
    assert_same_bits(y, exp)


def _f32_pairs(seed):
    """All pairs of special values, then random pairs of every magnitude and sign."""
    special = np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 1e-45, -1e-45, 3e38, -3e38, 2.5],
                       np.float32)
    a, b = (m.ravel() for m in np.meshgrid(special, special))
    bits = np.random.default_rng(seed).integers(0, 2**32, (2, 1 << 20), dtype=np.uint64)
    r = bits.astype(np.uint32).view(np.float32)
    return np.concatenate([a, r[0]]), np.concatenate([b, r[1]])


def test_float32_pow_is_within_1_ulp_with_annex_f_special_cases(lib):
    """lz_powf (through double) on random pairs where the result is neither 0
    nor inf, integer exponents of negative bases, and every pair of special
    values (signed zeros and infinities, +-1, NaN, odd/even/non-integer y and
    2^24, past which every float is even), bit-equal to NumPy's float32 power
    where the result is special (0, 1, inf, NaN)."""
    rng = np.random.default_rng(5)
    n = 1 << 20
    x = np.exp(rng.uniform(-87, 88, n)) * rng.choice([1.0, -1.0], n)
    y = rng.uniform(-1, 1, n) * 80 / np.maximum(np.abs(np.log(np.abs(x))), 1.0)
    y[: n // 2] = np.where(x[: n // 2] < 0, np.round(y[: n // 2]), y[: n // 2])
    x, y = x.astype(np.float32), y.astype(np.float32)
    special = np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0,
                        2.5, -2.5, 1e-45, 3e38, -3e38, 2.0**24, 2.0**24 + 2, 2.0**24 - 1,
                        0.9999999, 1.0000001], np.float32)
    sa, sb = (m.ravel() for m in np.meshgrid(special, special))
    a, b = np.concatenate([sa, x]), np.concatenate([sb, y])
    out = call(lib, "powf", a, b)
    with np.errstate(all="ignore"):
        exact = np.power(a.astype(np.float64), b.astype(np.float64))
        libm = np.power(a, b)  # NumPy's float32 loop calls powf
    assert ulp_error(out, exact).max() <= MAX_ULP_F32
    edge = ~np.isfinite(libm) | (libm == 0) | (libm == 1) | ~np.isfinite(a) | ~np.isfinite(b)
    edge[sa.size:] = False  # NumPy's own float32 pow is not correctly rounded (3^0.5)
    assert_same_bits(out[edge], libm[edge])


@pytest.mark.parametrize("name, ref", [("atan2", np.arctan2), ("logaddexp", np.logaddexp)])
def test_float32_binary_functions_are_within_1_ulp_with_numpys_special_cases(lib, name, ref):
    a, b = _f32_pairs(4)
    y = call(lib, name + "f", a, b)
    with np.errstate(all="ignore"):
        exact = ref(a.astype(np.float64), b.astype(np.float64))
        special = ref(a, b)  # NumPy's float32 loop: its special cases, bit for bit
    assert ulp_error(y, exact).max() <= MAX_ULP_F32
    edge = ~np.isfinite(special) | (special == 0) | ~np.isfinite(a) | ~np.isfinite(b)
    assert_same_bits(y[edge], special[edge])


@pytest.mark.parametrize("dtype, s", [(np.float32, "f"), (np.float64, "")])
def test_copysign_and_signbit_read_the_sign_bit_of_zeros_and_nans(lib, dtype, s):
    a, b = _f32_pairs(5)
    with np.errstate(invalid="ignore"):  # NaN payloads widen with a warning
        a, b = a.astype(dtype), np.concatenate([b, -b]).astype(dtype)[:a.size]
    a = np.concatenate([a, np.array([np.nan, -np.nan, 1.0], dtype)])
    b = np.concatenate([b, np.array([-1.0, 1.0, -np.nan], dtype)])
    y = call(lib, "copysign" + s, a, b)
    ref = np.copysign(a, b)
    assert_same_bits(y, ref)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(ref))  # NaN signs too
    sb = call(lib, "signbit" + s, a, out_dtype=np.uint8).astype(bool)
    np.testing.assert_array_equal(sb, np.signbit(a))


@pytest.mark.parametrize("name, ref", [("atan2", np.arctan2), ("logaddexp", np.logaddexp)])
def test_float64_binary_functions_match_numpy(lib, name, ref):
    a, b = _f32_pairs(6)
    rng = np.random.default_rng(7)
    with np.errstate(all="ignore"):
        a = np.concatenate([a.astype(np.float64), rng.standard_normal(100_000) * 50])
        b = np.concatenate([b.astype(np.float64), rng.standard_normal(100_000) * 50])
        assert ulp_error(call(lib, name, a, b), ref(a, b), np.float64).max() <= 2.0


# ---- shifts: NumPy's results, without C's undefined behaviour -----------------------

@pytest.mark.parametrize("dtype, s", [(np.int8, "i8"), (np.uint8, "u8")])
def test_small_int_shifts_match_numpy_on_all_pairs(lib, dtype, s):
    """Every pair: shift amounts >= the width and negative ones included."""
    v = np.arange(256).astype(np.uint8).view(dtype)
    a, b = (m.ravel() for m in np.meshgrid(v, v))
    np.testing.assert_array_equal(call(lib, "shl_" + s, a, b), np.left_shift(a, b))
    np.testing.assert_array_equal(call(lib, "shr_" + s, a, b), np.right_shift(a, b))


@pytest.mark.parametrize("dtype, s", [(np.int32, "i32"), (np.int64, "i64")])
def test_int_shifts_match_numpy_past_the_width_and_for_negative_amounts(lib, dtype, s):
    info, bits = np.iinfo(dtype), np.dtype(dtype).itemsize * 8
    edges = np.array([0, 1, -1, 5, -5, info.min, info.max, info.min + 1], dtype=dtype)
    amounts = np.array([0, 1, 2, bits - 1, bits, bits + 1, 2 * bits, -1, -bits, info.min,
                        info.max], dtype=dtype)
    a, b = (m.ravel() for m in np.meshgrid(edges, amounts))
    rng = np.random.default_rng(8)
    a = np.concatenate([a, rng.integers(info.min, info.max, 20_000, dtype=dtype)])
    b = np.concatenate([b, rng.integers(-2, bits + 2, 20_000, dtype=dtype)])
    np.testing.assert_array_equal(call(lib, "shl_" + s, a, b), np.left_shift(a, b))
    np.testing.assert_array_equal(call(lib, "shr_" + s, a, b), np.right_shift(a, b))


# ---- float64 versions ----------------------------------------------------------

def float64_ulp_vs_longdouble(y, x, fn):
    """Error of float64 ``y`` in ULPs of ``fn`` evaluated in x87 long double
    (64-bit mantissa: 11 bits past double), 0 where y is the rounded value."""
    ref = fn(x.astype(np.longdouble))
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.abs(ref).astype(np.float64))
        ulp = np.ldexp(np.ones_like(x), np.maximum(e - 53, -1074)).astype(np.longdouble)
        err = np.abs(y.astype(np.longdouble) - ref) / ulp
    return np.where(y == ref.astype(np.float64), 0.0, err)


def _f64_inputs(name, rng):
    n = 10**6
    if name == "exp":  # the whole finite range, near 0, and into subnormal results
        return np.concatenate([rng.uniform(-745.2, 709.8, n), rng.uniform(-1, 1, n),
                               rng.uniform(-745.2, -700, n)])
    bits = rng.integers(0, 0x7ff0000000000000, n, dtype=np.uint64)  # every positive double
    return np.concatenate([bits.view(np.float64), rng.uniform(0.5, 2, n),
                           1 + rng.standard_normal(n) * 1e-6])


F64_EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.782712893384, 709.7827128933841,
                      -745.1332191019411, -745.1332191019412, 1e-300, -1e-300, -1.0, 1.0, 5e-324,
                      2.2250738585072014e-308, 1.7976931348623157e308, 2.0, 0.5])


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="no x87 long double here")
@pytest.mark.parametrize("name", ["exp", "log"])
def test_float64_exp_and_log_are_within_1_ulp_over_their_range(lib, name):
    """lz_exp (Cody-Waite + Taylor as hi + lo) and lz_log (atanh series, fdlibm's
    shape), both vectorized: 3e6 random inputs against x87 long double, 10^8 with
    LAZYRT_EXHAUSTIVE_MATH=1 (measured: exp 0.81 ULP, log 0.85); IEEE edges
    bit-equal to NumPy's."""
    rng = np.random.default_rng(7)
    fn = getattr(np, name)
    worst = 0.0
    for _ in range(34 if os.environ.get("LAZYRT_EXHAUSTIVE_MATH") else 1):
        x = _f64_inputs(name, rng)
        worst = max(worst, float(float64_ulp_vs_longdouble(call(lib, name, x), x, fn).max()))
    assert worst < 1.0, worst
    with np.errstate(all="ignore"):
        assert_same_bits(call(lib, name, F64_EDGES), fn(F64_EDGES))


# ---- float64 versions (libm) ----------------------------------------------------

@pytest.mark.parametrize("name", ["exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf",
                                  "sin", "cos", "tan", *ARRAY_API_F32])
def test_float64_function_matches_numpy(lib, name):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-30, 30, 200_000), rng.standard_normal(100_000) * 1e-5,
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 710.0, -750.0])])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = REFERENCE[name](x)
    y = call(lib, name, x)
    assert ulp_error(y, ref, np.float64).max() <= 2.0


# ---- sign, round, max, min --------------------------------------------------------

@pytest.mark.parametrize("dtype, sign, rnd", [(np.float32, "signf", "roundf"),
                                              (np.float64, "sign", "round")])
def test_sign_and_round_match_numpy(lib, dtype, sign, rnd):
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.7,
                  -3.2, 1e-40, 2**23 + 0.5, 1e300 if dtype == np.float64 else 1e30],
                 dtype=dtype)
    np.testing.assert_array_equal(call(lib, sign, x), np.sign(x))
    np.testing.assert_array_equal(np.signbit(call(lib, sign, x)), np.signbit(np.sign(x)))
    np.testing.assert_array_equal(call(lib, rnd, x), np.round(x))
    np.testing.assert_array_equal(np.signbit(call(lib, rnd, x)), np.signbit(np.round(x)))


VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, -3.0, 7.5, 1e30, -1e-30, 1e-40,
          np.inf, -np.inf, np.nan]


def pairs(dtype):
    a, b = np.meshgrid(np.array(VALUES, dtype), np.array(VALUES, dtype))
    rng = np.random.default_rng(2)
    ra = (rng.standard_normal(20_000) * 100).astype(dtype)
    rb = (rng.standard_normal(20_000) * 10).astype(dtype)
    return np.concatenate([a.ravel(), ra]), np.concatenate([b.ravel(), rb])


def assert_same_bits(y, ref):
    same = (y == ref) | (np.isnan(y) & np.isnan(ref))
    assert same.all(), list(zip(y[~same][:5], ref[~same][:5]))
    assert (np.signbit(y) == np.signbit(ref))[~np.isnan(ref)].all()


@pytest.mark.parametrize("dtype, mx, mn", [(np.float32, "maxf", "minf"),
                                           (np.float64, "max", "min")])
def test_max_min_propagate_nan_like_numpy(lib, dtype, mx, mn):
    a, b = pairs(dtype)
    assert_same_bits(call(lib, mx, a, b), np.maximum(a, b))
    assert_same_bits(call(lib, mn, a, b), np.minimum(a, b))


@pytest.mark.parametrize("dtype, s", [(np.float32, "f32"), (np.float64, "f64")])
def test_float_floordiv_and_mod_match_numpy_including_inf_nan_zero(lib, dtype, s):
    a, b = pairs(dtype)
    with np.errstate(all="ignore"):
        assert_same_bits(call(lib, "floordiv_" + s, a, b), np.floor_divide(a, b))
        assert_same_bits(call(lib, "mod_" + s, a, b), np.remainder(a, b))


# ---- integer floor division and modulo ------------------------------------------

@pytest.mark.parametrize("dtype, s", [(np.int8, "i8"), (np.uint8, "u8")])
def test_small_int_floordiv_and_mod_match_numpy_on_all_pairs(lib, dtype, s):
    v = np.arange(256).astype(np.uint8).view(dtype)
    a, b = (m.ravel() for m in np.meshgrid(v, v))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(call(lib, "floordiv_" + s, a, b), np.floor_divide(a, b))
        np.testing.assert_array_equal(call(lib, "mod_" + s, a, b), np.remainder(a, b))


@pytest.mark.parametrize("dtype, s", [(np.int32, "i32"), (np.int64, "i64")])
def test_int_floordiv_and_mod_match_numpy_for_negatives_and_zero(lib, dtype, s):
    info = np.iinfo(dtype)
    edges = np.array([0, 1, -1, 2, -2, 3, -3, 7, -7, info.min, info.max, info.min + 1],
                     dtype=dtype)
    a, b = (m.ravel() for m in np.meshgrid(edges, edges))
    rng = np.random.default_rng(3)
    a = np.concatenate([a, rng.integers(-1000, 1000, 50_000, dtype=dtype),
                        rng.integers(info.min, info.max, 10_000, dtype=dtype)])
    b = np.concatenate([b, rng.integers(-20, 20, 50_000, dtype=dtype),
                        rng.integers(info.min, info.max, 10_000, dtype=dtype)])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(call(lib, "floordiv_" + s, a, b), np.floor_divide(a, b))
        np.testing.assert_array_equal(call(lib, "mod_" + s, a, b), np.remainder(a, b))


# ---- float16 -------------------------------------------------------------------

def test_float16_loads_every_bit_pattern_exactly(lib):
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    y = call(lib, "f16_to_f32", bits, out_dtype=np.float32)
    ref = bits.view(np.float16).astype(np.float32)
    assert_same_bits(y, ref)


def test_float16_stores_round_like_numpy(lib):
    with np.errstate(all="ignore"):
        x = np.concatenate([float32_sample(stride=2**12),
                            np.linspace(-70000, 70000, 100_001, dtype=np.float32),
                            # near-halfway cases between float16 neighbours
                            (np.arange(2**16, dtype=np.uint32).astype(np.uint16)
                             .view(np.float16).astype(np.float32) * np.float32(1 + 2**-11)),
                            # every float16 denormal and the midpoints between them
                            np.arange(-4096, 4097, dtype=np.float32) * np.float32(2**-25)])
        ref = x.astype(np.float16)
    y = call(lib, "f32_to_f16", x, out_dtype=np.uint16).view(np.float16)
    assert_same_bits(y, ref)


def test_float16_load_store_helpers_compute_in_float32(lib):
    x = np.array([1.0, -2.5, 65504.0, 1e-7, np.nan, 0.1], dtype=np.float16)
    with np.errstate(all="ignore"):
        assert_same_bits(call(lib, "f16_load_store", x),
                         (x.astype(np.float32) * np.float32(3)).astype(np.float16))


# ---- vectorization --------------------------------------------------------------

VECTORIZABLE = ["lz_expf", "lz_logf", "lz_log1pf", "lz_expm1f", "lz_tanhf", "lz_sigmoidf",
                "lz_erff", "lz_sinf", "lz_cosf", "lz_tanf", "lz_exp2f", "lz_erfcf", "lz_softplusf",
                "lz_roundf", "lz_signf", "lz_f16bits_to_f32", "lz_f32_to_f16bits",
                *(f"lz_{f}f" for f in ARRAY_API_F32)]
VECTORIZABLE_BINARY = ["lz_atan2f", "lz_logaddexpf", "lz_copysignf", "lz_powf"]
VECTORIZABLE_F64 = ["lz_exp", "lz_sigmoid", "lz_log"]


def _is_gcc():
    cc = shutil.which(os.environ.get("CC", "cc"))
    return cc is not None and b"Free Software Foundation" in subprocess.run(
        [cc, "--version"], capture_output=True).stdout


@pytest.mark.skipif(not _is_gcc(), reason="the -fopt-info report is GCC's")
def test_header_functions_vectorize_without_fast_math(tmp_path):
    """Each function the header claims to vectorize does, in a `#pragma omp simd`
    loop built with the backend's own flags (no -ffast-math)."""
    lines = ['#include <stdint.h>', '#include "lazyrt_math.h"']
    where = {}
    for f in VECTORIZABLE:
        tin = "uint16_t" if f == "lz_f16bits_to_f32" else "float"
        tout = "uint16_t" if f == "lz_f32_to_f16bits" else "float"
        lines.append(f"void v_{f}(long n, const {tin} *x, {tout} *y) {{")
        lines.append("#pragma omp simd")
        lines.append(f"  for (long i = 0; i < n; i++) y[i] = {f}(x[i]); }}")
        where[len(lines)] = f
    for f in VECTORIZABLE_BINARY:
        lines.append(f"void v_{f}(long n, const float *a, const float *b, float *y) {{")
        lines.append("#pragma omp simd")
        lines.append(f"  for (long i = 0; i < n; i++) y[i] = {f}(a[i], b[i]); }}")
        where[len(lines)] = f
    for s, t in (("i8", "int8_t"), ("u8", "uint8_t"), ("i32", "int32_t"), ("i64", "int64_t")):
        f = f"lz_shl_{s}"
        lines.append(f"void v_shifts_{s}(long n, const {t} *a, const {t} *b, {t} *y) {{")
        lines.append("#pragma omp simd")
        lines.append(f"  for (long i = 0; i < n; i++) y[i] = {f}(a[i], b[i]) ^ lz_shr_{s}(a[i], b[i]); }}")
        where[len(lines)] = f
    for f in VECTORIZABLE_F64:
        lines.append(f"void v_{f}(long n, const double *x, double *y) {{")
        lines.append("#pragma omp simd")
        lines.append(f"  for (long i = 0; i < n; i++) y[i] = {f}(x[i]); }}")
        where[len(lines)] = f
    # one kernel calling the big functions twice (GELU forward and backward):
    # GCC's own heuristics kept lz_erff out of line then, and the loop scalar
    lines.append("void v_twice(long n, const float *x, float *y) {")
    lines.append("#pragma omp simd")
    lines.append("  for (long i = 0; i < n; i++) y[i] = lz_erff(x[i]) * lz_erff(2.0f * x[i]) "
                 "+ lz_tanhf(x[i]) * lz_tanhf(-x[i]) + lz_logf(x[i]) * lz_logf(3.0f * x[i]); }")
    where[len(lines)] = "erff, tanhf, logf called twice in one loop"
    assert unvectorized(lines, where, tmp_path) == []


def unvectorized(lines, where, tmp_path):
    """Compile ``lines`` (C) with the backend's flags and GCC's vectorization
    report; the names (``where``: line number -> name) of the loops it did not
    vectorize."""
    src = tmp_path / "vec.c"
    src.write_text("\n".join(lines) + "\n")
    cc = CCompiler(cache_dir=str(tmp_path))
    out = subprocess.run([os.environ.get("CC", "cc"), *cc.flags, "-fopt-info-vec-optimized",
                          "-o", str(tmp_path / "vec.so"), str(src)],
                         capture_output=True, text=True, check=True).stderr
    done = {where[int(m)] for m in re.findall(r"vec\.c:(\d+):\d+: optimized: loop vectorized",
                                              out) if int(m) in where}
    return sorted(set(where.values()) - done)


# ---- streamed (non-temporal) stores ------------------------------------------

def test_stream_bytes_copies_every_alignment_and_length(tmp_path):
    """lz_stream_bytes: unaligned head, 32-byte non-temporal body, tail."""
    src = ('#include <stdint.h>\n#include "lazyrt_math.h"\n'
           "void w_stream(char *d, const char *s, long n) { lz_stream_bytes(d, s, (size_t)n);"
           " lz_stream_fence(); }\n")
    fn = CCompiler(cache_dir=str(tmp_path)).load("stream_test", src).w_stream
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    for dst_off in range(0, 33, 3):
        for n in (0, 1, 31, 32, 33, 63, 64, 100, 1000, 4000):
            dst = np.zeros(4096 + 64, dtype=np.uint8)
            fn(ctypes.c_void_p(dst.ctypes.data + dst_off), ctypes.c_void_p(data.ctypes.data + 5),
               ctypes.c_long(n))
            assert (dst[dst_off:dst_off + n] == data[5:5 + n]).all()
            assert not dst[:dst_off].any() and not dst[dst_off + n:].any()


@pytest.mark.parametrize("n", [(8 << 20) // 4 + 5, 1000])
def test_streamed_pointwise_and_row_outputs_match_numpy(n):
    """Outputs over LZ_STREAM_MIN_BYTES (8 MiB) take the tiled, streamed path;
    smaller ones store directly. Both match NumPy, tail tiles included."""
    import lazyrt as lr
    if "c" not in lr.available_backends():
        pytest.skip("no c backend")
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n, dtype=np.float32)
    rows = rng.standard_normal((max(n // 2053, 1), 2053), dtype=np.float32)
    with lr.backend("c"):
        y = (lr.tensor(x) * 2.0 + 1.0).numpy()
        t = lr.tensor(rows)
        sm = lr.nn.softmax(t, axis=-1).numpy()
        cs = (t - t.max(axis=-1, keepdims=True)).numpy()
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))
    np.testing.assert_array_equal(cs, rows - rows.max(axis=-1, keepdims=True))
    e = np.exp(rows.astype(np.float64) - rows.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(axis=-1, keepdims=True), rtol=1e-6, atol=1e-9)
