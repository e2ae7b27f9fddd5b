"""The float64 math of kernels/lazyrt_math_double.h: accuracy against x87 long
double, IEEE edges against NumPy/SciPy, and vectorization with the backend's flags.

Per function: 10^6 random inputs over its whole range (plus dense samples near
0, the overflow/underflow limits and the hard spots), max error < 1 ULP of the
exact value; LAZYRT_EXHAUSTIVE_MATH=1 runs 10^8 per function, in chunks.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

from lazyrt.backends.c_compiler import CCompiler
from test_c_math import unvectorized

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                reason="no C compiler")
needs_x87 = pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63,
                               reason="no x87 long double here")

#: the float64 functions the header vectorizes (and claims < 1 ULP for)
VECTORIZED = ["exp", "log", "log2", "log10", "log1p", "expm1", "tanh", "sigmoid",
              "softplus", "exp2", "sin", "cos", "tan", "atan"]
BINARY = ["atan2", "pow"]
#: float64 functions still on libm: checked for their IEEE edges only
LIBM = ["erf", "erfc"]
CHUNK = 10**6
CHUNKS = 100 if os.environ.get("LAZYRT_EXHAUSTIVE_MATH") else 1


def _wrappers() -> str:
    lines = ['#include <stdint.h>', '#include "lazyrt_math.h"']
    for f in VECTORIZED + LIBM:
        lines.append(f"void w_{f}(long n, const double *x, double *y) {{\n"
                     f"#pragma omp parallel for simd\n"
                     f"  for (long i = 0; i < n; i++) y[i] = lz_{f}(x[i]); }}")
    for f in BINARY:
        lines.append(f"void w_{f}(long n, const double *a, const double *b, double *y) {{\n"
                     f"#pragma omp parallel for simd\n"
                     f"  for (long i = 0; i < n; i++) y[i] = lz_{f}(a[i], b[i]); }}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return CCompiler(cache_dir=str(tmp_path_factory.mktemp("cache"))).load(
        "test_lazyrt_math_f64", _wrappers())


def call(lib, name, *args):
    args = [np.ascontiguousarray(a, dtype=np.float64) for a in args]
    y = np.empty_like(args[0])
    getattr(lib, "w_" + name)(ctypes.c_long(y.size),
                              *[ctypes.c_void_p(a.ctypes.data) for a in args],
                              ctypes.c_void_p(y.ctypes.data))
    return y


def ulp_vs_longdouble(y, x, fn):
    """Error of float64 ``y`` in ULPs of ``fn`` evaluated in x87 long double
    (11 bits past double), 0 where y is the rounded value; inf for a wrong
    non-finite result."""
    with np.errstate(all="ignore"):
        ref = fn(x.astype(np.longdouble))
        _, e = np.frexp(np.abs(ref).astype(np.float64))
        ulp = np.ldexp(np.ones_like(x), np.maximum(e - 53, -1074)).astype(np.longdouble)
        err = np.abs(y.astype(np.longdouble) - ref) / ulp
        same = (y == ref.astype(np.float64)) | (np.isnan(y) & np.isnan(ref))
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err)).astype(np.float64)


def _sigmoid_ld(x):
    return 1 / (1 + np.exp(-x))


def _softplus_ld(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


REF_LD = {"exp": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10,
          "log1p": np.log1p, "expm1": np.expm1, "tanh": np.tanh, "sigmoid": _sigmoid_ld,
          "softplus": _softplus_ld, "exp2": np.exp2, "sin": np.sin, "cos": np.cos,
          "tan": np.tan, "atan": np.arctan}


def _bits(rng, n, lo=0.0, hi=np.inf):
    """n doubles uniform in bit pattern over [lo, hi] (every exponent alike)"""
    a, b = np.array([lo, hi], dtype=np.float64).view(np.uint64)
    return rng.integers(a, b, n, dtype=np.uint64, endpoint=True).view(np.float64)


def _signed(rng, x):
    return np.where(rng.integers(0, 2, x.size).astype(bool), -x, x)


def _near(rng, centers, n, width):
    """n points within ±width (relative) of randomly chosen centers"""
    c = rng.choice(np.asarray(centers, dtype=np.float64), n)
    return c * (1 + rng.uniform(-width, width, n))


def inputs(name, rng, n=CHUNK):
    """n inputs: the range, near 0, the limits and the hard spots (one sixth each)."""
    k = n // 6
    u = rng.uniform
    if name in ("log", "log2", "log10"):
        parts = [_bits(rng, 2 * k), u(0.5, 2, k), 1 + _signed(rng, _bits(rng, k, 0, 1e-3)),
                 _near(rng, [2.0**e for e in range(-1074, 1024, 7)], k, 1e-12),
                 _near(rng, [10.0**e for e in range(-300, 300)], k, 1e-12)]
    elif name == "log1p":
        parts = [_bits(rng, k), -_bits(rng, k, 0, 1), _signed(rng, _bits(rng, k, 0, 1e-3)),
                 -1 + _bits(rng, k, 2**-53, 1e-3), u(-0.5, 1.5, k),
                 _near(rng, [np.sqrt(2) - 1, np.sqrt(.5) - 1, 1, 3, 2**52], k, 1e-9)]
    elif name in ("exp", "expm1"):
        lo = -745.2 if name == "exp" else -60.0
        parts = [u(lo, 709.8, 2 * k), u(-1, 1, k), _signed(rng, _bits(rng, k, 0, 1e-3)),
                 u(709, 709.8, k // 2), u(lo, lo + 30, k // 2),
                 _near(rng, np.arange(-80, 80) * np.log(2), k, 1e-7)]
    elif name == "exp2":
        parts = [u(-1075, 1024, 2 * k), u(-1, 1, k), _signed(rng, _bits(rng, k, 0, 1e-3)),
                 u(-1075, -1020, k // 2), u(1020, 1024, k // 2),
                 rng.integers(-1100, 1100, k) + u(-1e-9, 1e-9, k)]
    elif name == "tanh":
        parts = [u(-20, 20, 2 * k), u(-1, 1, k), _signed(rng, _bits(rng, k, 0, 1e-3)),
                 _signed(rng, u(0.3, 0.6, k)), _signed(rng, _bits(rng, k, 1e-3, 30))]
    elif name in ("sigmoid", "softplus"):
        parts = [u(-745.2, 40, 2 * k), u(-1, 1, k), _signed(rng, _bits(rng, k, 0, 1e-3)),
                 u(-745.2, -700, k), _signed(rng, _bits(rng, k, 1e-3, 800))]
    elif name in ("sin", "cos", "tan"):  # both reductions; multiples of pi/2 rounded
        parts = [u(-7, 7, k), _signed(rng, _bits(rng, k, 0, 1e-3)),
                 _signed(rng, _bits(rng, k, 1e-3, 2.0**30)), _signed(rng, _bits(rng, k)),
                 _signed(rng, u(2.0**29, 2.0**31, k // 2)),
                 _signed(rng, rng.integers(1, 2**20, k // 2) * (np.pi / 2)),
                 _signed(rng, rng.integers(2**20, 2**40, k) * (np.pi / 2))]
    elif name == "atan":  # the reduction's breakpoints tan((2j-1) pi/32), and 1/t
        parts = [u(-12, 12, 2 * k), _signed(rng, _bits(rng, k, 0, 1e-3)),
                 _signed(rng, _bits(rng, k)),
                 _near(rng, np.tan(np.arange(1, 16, 2) * np.pi / 32), k, 1e-3),
                 _signed(rng, _bits(rng, k, 10, 1e20))]
    x = np.concatenate(parts)
    return np.concatenate([x, u(-1, 1, n - x.size)])


def max_ulp(lib, name, seed=0):
    rng = np.random.default_rng(seed)
    worst, where = 0.0, None
    for _ in range(CHUNKS):
        x = inputs(name, rng)
        err = ulp_vs_longdouble(call(lib, name, x), x, REF_LD[name])
        i = int(err.argmax())
        if err[i] > worst:
            worst, where = float(err[i]), float(x[i])
    return worst, where


@needs_x87
@pytest.mark.parametrize("name", VECTORIZED)
def test_float64_function_is_within_1_ulp_over_its_range(lib, name):
    worst, where = max_ulp(lib, name)
    assert worst < 1.0, (worst, where)


F64_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324,
             2.2250738585072014e-308, -2.2250738585072014e-308, 2.225073858507201e-308,
             1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0, 2.0, 0.5, 1e-300,
             -1e-300, 2**-53, -(2**-53), 2**-54, 1e-17, -1e-17,
             # exp/expm1/exp2/sigmoid overflow and underflow thresholds
             709.782712893384, 709.7827128933841, -745.1332191019411, -745.1332191019412,
             -708.3964185322641, -708.4, 1023.9999999999999, 1024.0, -1022.0, -1074.0,
             -1074.5, -1075.0, -1075.0000000000002, 710.0, -750.0, 800.0, -800.0,
             # saturation of tanh/sigmoid/expm1, log1p's pole
             19.06, 20.0, 36.8, 37.5, -37.5, 40.0, -60.0, -1.0000000000000002,
             -0.9999999999999999, 1e300, -1e300, 100.0, 1000.0, 1e-10,
             # sin/cos/tan: the reductions' boundary, the double closest to a
             # multiple of pi/2 (Kahan-McDonald), pi/2 and pi rounded
             2.0**30, np.nextafter(2.0**30, 0), 6381956970095103.0 * 2.0**797,
             -6381956970095103.0 * 2.0**797, np.pi / 2, np.pi, -np.pi, 1e22]


def atan2_inputs(rng, n=CHUNK):
    """pairs: all magnitudes and signs, ratios near the breakpoints, tiny and huge ratios"""
    k = n // 4
    y = np.concatenate([_signed(rng, _bits(rng, 2 * k)), rng.uniform(-5, 5, k),
                        _signed(rng, _bits(rng, n - 3 * k, 1e-200, 1e200))])
    ratio = np.concatenate([_signed(rng, _bits(rng, 2 * k)), rng.uniform(-5, 5, k),
                            _near(rng, np.tan(np.arange(1, 16, 2) * np.pi / 32), n - 3 * k, 1e-3)])
    with np.errstate(all="ignore"):
        x = np.where(np.isfinite(y / ratio), y / ratio, 1.0)
    return y, x


@needs_x87
def test_float64_atan2_is_within_1_ulp(lib):
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(CHUNKS):
        y, x = atan2_inputs(rng)
        err = ulp_vs_longdouble(call(lib, "atan2", y, x), y,
                                lambda yl: np.arctan2(yl, x.astype(np.longdouble)))
        worst = max(worst, float(err.max()))
    assert worst < 1.0, worst


def pow_inputs(rng, n=CHUNK):
    """x over every magnitude, y sized so x^y spans the whole range (into the
    subnormals and past overflow); integer y with negative x; x near 1 with
    huge y; small integer powers"""
    k = n // 4
    x = np.concatenate([_bits(rng, 2 * k), -_bits(rng, k),
                        1 + _signed(rng, _bits(rng, k, 0, 1e-6))])
    with np.errstate(all="ignore"):
        lx = np.log(np.abs(x))
        y = rng.uniform(-760, 720, x.size) / np.where(lx == 0, 1.0, lx)
    y[2 * k:3 * k] = np.round(y[2 * k:3 * k])
    y[3 * k:3 * k + k // 2] = rng.integers(-40, 40, k // 2)
    return x, y


def _pow_ld(x, y):
    return np.power(x.astype(np.longdouble), y.astype(np.longdouble))


@needs_x87
def test_float64_pow_is_within_1_ulp(lib):
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(CHUNKS):
        x, y = pow_inputs(rng)
        err = ulp_vs_longdouble(call(lib, "pow", x, y), x, lambda xl: _pow_ld(xl, y))
        worst = max(worst, float(err.max()))
    assert worst < 1.0, worst


@pytest.mark.parametrize("name, ref", [("atan2", np.arctan2), ("pow", np.power)])
def test_float64_binary_special_cases_are_numpys(lib, name, ref):
    v = np.array(F64_EDGES[:16] + [3.0, -2.0, 1e-300, 1e300, 0.5, -0.5, 2.5, -3.0])
    y, x = (a.ravel() for a in np.meshgrid(v, v))
    with np.errstate(all="ignore"):
        ref = ref(y, x)
    out = call(lib, name, y, x)
    special = ~np.isfinite(y) | ~np.isfinite(x) | (y == 0) | (x == 0)
    same = (out == ref) | (np.isnan(out) & np.isnan(ref))
    sign = (np.signbit(out) == np.signbit(ref)) | np.isnan(ref)
    bad = special & ~(same & sign)
    assert not bad.any(), list(zip(y[bad], x[bad], out[bad], ref[bad]))


def _ref64(name):
    sp = pytest.importorskip("scipy.special")

    def _expit(x):  # scipy's expit underflows from -709: e^x (1 - e^x) rounds as e^x there
        return np.where(x < -700, np.exp(x), sp.expit(x))
    return {"exp": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10,
            "log1p": np.log1p, "expm1": np.expm1, "tanh": np.tanh, "sigmoid": _expit,
            "softplus": lambda x: np.logaddexp(x, 0.0), "exp2": np.exp2, "erf": sp.erf,
            "erfc": sp.erfc, "sin": np.sin, "cos": np.cos, "tan": np.tan,
            "atan": np.arctan}[name]


@pytest.mark.parametrize("name", VECTORIZED + LIBM)
def test_float64_ieee_edges_match_numpy(lib, name):
    """Where input or result is 0, ±inf or NaN (and at the overflow and underflow
    thresholds) the bits are NumPy's/SciPy's; elsewhere on the edge list, within
    1 ULP of the exact value (glibc and SciPy are not correctly rounded either:
    tanh(19.06) rounds to 1 - 2^-53, glibc says 1)."""
    x = np.array(F64_EDGES)
    with np.errstate(all="ignore"):
        ref = _ref64(name)(x)
    y = call(lib, name, x)
    special = (~np.isfinite(x) | (x == 0) | ~np.isfinite(ref) | (ref == 0)
               | ~np.isfinite(y) | (y == 0))
    same = (y == ref) | (np.isnan(y) & np.isnan(ref))
    sign = (np.signbit(y) == np.signbit(ref)) | np.isnan(ref)
    bad = special & ~(same & sign)
    assert not bad.any(), list(zip(x[bad], y[bad], ref[bad]))
    if name in REF_LD and np.finfo(np.longdouble).nmant >= 63:
        err = ulp_vs_longdouble(y, x, REF_LD[name])
        assert err.max() < 1.0, list(zip(x[err >= 1], y[err >= 1], err[err >= 1]))


def test_log2_of_powers_of_two_is_exact(lib):
    e = np.arange(-1074, 1024, dtype=np.float64)
    np.testing.assert_array_equal(call(lib, "log2", np.ldexp(1.0, e.astype(int))), e)


def test_exp2_of_integers_is_exact(lib):
    e = np.arange(-1074, 1024, dtype=np.float64)
    np.testing.assert_array_equal(call(lib, "exp2", e), np.ldexp(1.0, e.astype(int)))


def _is_gcc():
    cc = shutil.which(os.environ.get("CC", "cc"))
    return cc is not None and b"Free Software Foundation" in subprocess.run(
        [cc, "--version"], capture_output=True).stdout


@pytest.mark.skipif(not _is_gcc(), reason="the -fopt-info report is GCC's")
def test_float64_functions_vectorize_with_the_backends_flags(tmp_path):
    lines = ['#include <stdint.h>', '#include "lazyrt_math.h"']
    where = {}
    for f in VECTORIZED:
        lines.append(f"void v_{f}(long n, const double *x, double *y) {{")
        lines.append("#pragma omp simd")
        lines.append(f"  for (long i = 0; i < n; i++) y[i] = lz_{f}(x[i]); }}")
        where[len(lines)] = f
    for f in BINARY:
        lines.append(f"void v_{f}(long n, const double *a, const double *b, double *y) {{")
        lines.append("#pragma omp simd")
        lines.append(f"  for (long i = 0; i < n; i++) y[i] = lz_{f}(a[i], b[i]); }}")
        where[len(lines)] = f
    # all in one loop, as a fused kernel calls them: GCC's size heuristics would
    # outline some (a call keeps the loop scalar) without LZ_INLINE
    body = " + ".join([f"lz_{f}(x[i])" for f in VECTORIZED]
                      + [f"lz_{f}(x[i], z[i])" for f in BINARY])
    lines.append("void v_all(long n, const double *x, const double *z, double *y) {")
    lines.append("#pragma omp simd")
    lines.append(f"  for (long i = 0; i < n; i++) y[i] = {body}; }}")
    where[len(lines)] = "all of them in one loop"
    assert unvectorized(lines, where, tmp_path) == []
