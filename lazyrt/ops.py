"""The op table: every op lazyrt records is defined here, once.

An entry says what the op is (name, arity, kind), how it types and shapes its
result, and what it computes (a NumPy reference implementation that the
``numpy`` backend runs and every other backend is tested against). The
recorder, capture, planner and emitters all read this table; adding an op is
an entry here plus its emitter lines.

Kinds:
  LEAF       parameters and constants (data, runtime scalar, baked constant)
  POINTWISE  elementwise over broadcast inputs, already cast to one dtype
  REDUCTION  reduce ``axes`` (attrs = (axes, keepdims))
  SCAN       running combine along one axis (attrs = (axis, include_initial))
  VIEW       reshape / permute / expand / slice: no arithmetic, only indexing
  MATMUL     ``np.matmul`` semantics
  OPAQUE     concat, setslice, sort, argsort, searchsorted: work the planner does
             not fuse into loops (the host runs it, lazyrt/backends/host.py);
             scatter_add, its own kernel on the C and Triton backends; gather, fused
             into the kernels that use it where a backend's capabilities say so
             (``Capabilities.gather_in_kernels``: C and Triton), else its own step

Dtype rules of pointwise ops come from the NumPy ufunc named in ``like``
(see :mod:`lazyrt.dtypes`). ``cast_inputs`` says whether the recorder casts
inputs to the computation dtype (true for arithmetic; false for ``where``'s
condition, handled by its own rule).
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes as D
from .lowering import c as C
from .lowering import jax as J
from .lowering import triton as T
from .op_def import (CHEAP, COSTLY, DIVIDES, LEAF, MATMUL, OPAQUE, POINTWISE, REDUCTION,  # noqa: F401
                     SCAN, TARGETS, VIEW, Combine, OpDef)

OPS: list[OpDef] = []


def _def(name, kind, arity, ref, like=None, doc="", cost=CHEAP, c=None, triton=None,
         jax=None, **facts):
    unary = binary = None
    if kind == POINTWISE and like is not None:
        if arity == 1:
            unary = D.unary_table(like)
        elif arity == 2:
            binary = D.binary_table(like)
    lower = {k: v for k, v in (("c", c), ("triton", triton), ("jax", jax)) if v is not None}
    op = OpDef(name, len(OPS), kind, arity, ref, like, unary, binary, doc, cost, lower,
               **facts)
    OPS.append(op)
    return op


def _quiet(fn):
    """Reference kernels follow NumPy's values without its warnings."""
    def run(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    run.__name__ = getattr(fn, "__name__", "ref")
    return run


# --- leaves ---------------------------------------------------------------
DATA = _def("data", LEAF, 0, None, doc="a parameter: user data, hashed by shape and dtype")
SCALAR = _def("scalar", LEAF, 0, None,
              doc="a runtime Python scalar (x * lr): a parameter, its value not in the key")
CONST = _def("const", LEAF, 0, None,
             doc="a baked constant (the 2 in x ** 2, 1/n in mean): its value is in the key")

# --- pointwise: binary (inputs share the computation dtype) ---------------
def _b(name, ufunc, c, triton, jax, doc="", cost=CHEAP):
    return _def(name, POINTWISE, 2, _quiet(lambda a, b, attrs: ufunc(a, b)), ufunc, doc,
                cost, c, triton, jax)


ADD = _b("add", np.add, C.wrap_int("+"), T.arith("+"), J.arith("jnp.add", "jnp.logical_or"))
SUB = _b("sub", np.subtract, C.wrap_int("-"), T.arith("-"),
         J.arith("jnp.subtract", "jnp.logical_xor"))
MUL = _b("mul", np.multiply, C.wrap_int("*"), T.arith("*"),
         J.arith("jnp.multiply", "jnp.logical_and"))
TRUEDIV = _b("truediv", np.true_divide, C.infix("/"), T.truediv,
             J.fn("lzj.divide"), cost=DIVIDES)
FLOORDIV = _b("floordiv", np.floor_divide, C.divmod_("floordiv"), T.divmod_("floordiv"),
              J.divmod_("floordiv"),
              "integer division by zero gives 0, as NumPy does (without its warning)",
              cost=DIVIDES)
MOD = _b("mod", np.remainder, C.divmod_("mod"), T.divmod_("mod"), J.divmod_("mod"),
         "sign of the divisor, as NumPy; x % 0 gives 0 for ints", cost=DIVIDES)
POW = _b("pow", np.power, C.power, T.power, J.fn("lzj.power"),
         "x ** 2, 3, 0.5, 1 and -1 are rewritten before lowering (passes.specialize_pow)",
         cost=COSTLY)
MAXIMUM = _b("maximum", np.maximum, C.maxmin("max"), T.maxmin("maximum"), J.maxmin("lzj.maximum"),
             "NaN propagates, as np.maximum; float16 keeps the first of equal operands")
MINIMUM = _b("minimum", np.minimum, C.maxmin("min"), T.maxmin("minimum"), J.maxmin("lzj.minimum"),
             "NaN propagates, as np.minimum; float16 keeps the first of equal operands")
EQ = _b("eq", np.equal, C.infix("=="), T.infix("=="), J.exact("jnp.equal"))
NE = _b("ne", np.not_equal, C.infix("!="), T.infix("!="), J.exact("jnp.not_equal"))
LT = _b("lt", np.less, C.infix("<"), T.infix("<"), J.exact("jnp.less"))
LE = _b("le", np.less_equal, C.infix("<="), T.infix("<="), J.exact("jnp.less_equal"))
GT = _b("gt", np.greater, C.infix(">"), T.infix(">"), J.exact("jnp.greater"))
GE = _b("ge", np.greater_equal, C.infix(">="), T.infix(">="), J.exact("jnp.greater_equal"))
BITAND = _b("bitwise_and", np.bitwise_and, C.bitwise("&"), T.infix("&"), J.exact("jnp.bitwise_and"))
BITOR = _b("bitwise_or", np.bitwise_or, C.bitwise("|"), T.infix("|"), J.exact("jnp.bitwise_or"))
BITXOR = _b("bitwise_xor", np.bitwise_xor, C.bitwise("^"), T.infix("^"), J.exact("jnp.bitwise_xor"))
LOGICAL_AND = _b("logical_and", np.logical_and, C.logical("&"), T.logical("&"),
                 J.logical("jnp.logical_and"))
LOGICAL_OR = _b("logical_or", np.logical_or, C.logical("|"), T.logical("|"),
                J.logical("jnp.logical_or"))
HYPOT = _b("hypot", np.hypot, C.float_only("hypotf", "hypot"), T.float_only("lzm.hypot"),
           J.float_only("lzj.hypot"),
           "sqrt(a*a + b*b) without overflow; inf if either is inf, even beside NaN",
           cost=COSTLY)
# the array API's (2023.12) remaining binary functions
ATAN2 = _b("atan2", np.arctan2, C.float_only("lz_atan2f", "lz_atan2"), T.float_only("lzm.atan2"),
           J.float_only("lzj.atan2"),
           "atan2(y, x), the angle of the point (x, y); signed zeros and infinities pick the "
           "quadrant (C99 Annex F, as the standard and NumPy)", cost=COSTLY)
LOGADDEXP = _b("logaddexp", np.logaddexp, C.float_only("lz_logaddexpf", "lz_logaddexp"),
               T.float_only("lzm.logaddexp"), J.float_only("jnp.logaddexp"),
               "log(exp(a) + exp(b)) without overflow, max + log1p(exp(-|a - b|)); equal "
               "infinities give that infinity", cost=COSTLY)
COPYSIGN = _b("copysign", np.copysign, C.float_only("lz_copysignf", "lz_copysign"),
              T.float_only("lzm.copysign"), J.float_only("jnp.copysign"),
              "|a| with the sign bit of b (of -0.0 and NaN too)")
LOGICAL_XOR = _b("logical_xor", np.logical_xor, C.logical("^"), T.logical("^"),
                 J.logical("jnp.logical_xor"))
LSHIFT = _b("bitwise_left_shift", np.left_shift, C.shift("shl"), T.shift("shl"),
            J.exact("lzj.left_shift"),
            "an amount outside [0, bits) gives 0, as NumPy (which reads a negative amount as "
            "a huge unsigned one; the standard leaves both undefined)")
# NumPy shifts int8 by uint8 (either way round) in int16, which lazyrt lacks: in
# int32 a left shift would keep the bits NumPy drops, so that pairing is refused
for _a, _b2 in ((D.INT8, D.UINT8), (D.UINT8, D.INT8)):
    LSHIFT.binary_table[0][_a][_b2] = (-1, -1)
RSHIFT = _b("bitwise_right_shift", np.right_shift, C.shift("shr"), T.shift("shr"),
            J.exact("lzj.right_shift"),
            "arithmetic for signed ints; an amount outside [0, bits) gives 0, or -1 for a "
            "negative value, as NumPy")

# --- pointwise: unary -----------------------------------------------------
def _u(name, ufunc, c, triton, jax, like=None, doc="", cost=CHEAP):
    return _def(name, POINTWISE, 1, _quiet(lambda a, attrs: ufunc(a)), like or ufunc, doc,
                cost, c, triton, jax)


def _special(name):
    """scipy.special's ``name`` in the input's dtype (Python's math.``name``,
    element by element in float64, where SciPy is not installed)."""
    def ref(a):
        try:
            import scipy.special
            return getattr(scipy.special, name)(a).astype(a.dtype, copy=False)
        except ImportError:
            out = np.vectorize(getattr(math, name), otypes=[np.float64])(a.astype(np.float64))
            return out.astype(a.dtype, copy=False)
    ref.__name__ = name
    return ref


_erf, _erfc = _special("erf"), _special("erfc")


def _rsqrt(a):
    return (np.ones((), a.dtype) / np.sqrt(a)).astype(a.dtype, copy=False)


def _sigmoid(a):
    # 1 / (1 + exp(-x)), computed in float64 so the reference is exact to the dtype
    wide = a.astype(np.float64)
    return (1.0 / (1.0 + np.exp(-wide))).astype(a.dtype)


NEG = _u("neg", np.negative, C.negate, T.negate, J.exact("jnp.negative"))
ABS = _u("abs", np.absolute, C.absolute, T.absolute, J.exact("jnp.abs"))
EXP = _u("exp", np.exp, C.float_only("lz_expf", "lz_exp"), T.float_only("lzm.exp"),
         J.float_only("lzj.exp"), cost=COSTLY)
LOG = _u("log", np.log, C.float_only("lz_logf", "lz_log"), T.float_only("lzm.log"),
         J.float_only("jnp.log"), cost=COSTLY)
LOG1P = _u("log1p", np.log1p, C.float_only("lz_log1pf", "lz_log1p"), T.float_only("lzm.log1p"),
           J.float_only("lzj.log1p"),
           cost=COSTLY)
EXPM1 = _u("expm1", np.expm1, C.float_only("lz_expm1f", "lz_expm1"), T.float_only("lzm.expm1"),
           J.float_only("lzj.expm1"),
           cost=COSTLY)
SQRT = _u("sqrt", np.sqrt, C.float_only("sqrtf", "sqrt"), T.float_only("lzm.sqrt"),
          J.float_only("jnp.sqrt"))
RSQRT = _u("rsqrt", _rsqrt, C.rsqrt, T.rsqrt, J.float_only("lax.rsqrt"), like=np.sqrt)
SIN = _u("sin", np.sin, C.float_only("lz_sinf", "lz_sin"), T.float_only("lzm.sin"),
         J.float_only("jnp.sin"), cost=COSTLY)
COS = _u("cos", np.cos, C.float_only("lz_cosf", "lz_cos"), T.float_only("lzm.cos"),
         J.float_only("jnp.cos"), cost=COSTLY)
TANH = _u("tanh", np.tanh, C.float_only("lz_tanhf", "lz_tanh"),
          lambda code, t, a: T.float_only("lzm.tanh16" if code in D.REDUCED_FLOATS
                                          else "lzm.tanh")(code, t, a),
          J.float_only("lzj.tanh"),
          cost=COSTLY)
SIGMOID = _u("sigmoid", _sigmoid, C.float_only("lz_sigmoidf", "lz_sigmoid"),
             T.float_only("lzm.sigmoid"), J.float_only("lzj.sigmoid"), like=np.exp, cost=COSTLY)
ERF = _u("erf", _erf, C.float_only("lz_erff", "lz_erf"), T.float_only("lzm.erf"),
         J.float_only("lzj.erf"),
         like=np.exp, cost=COSTLY)


def _softplus(a):
    # log(1 + e^x) = logaddexp(x, 0), in float64 so the reference rounds once
    return np.logaddexp(a.astype(np.float64), 0.0).astype(a.dtype)


EXP2 = _u("exp2", np.exp2, C.float_only("lz_exp2f", "lz_exp2"), T.float_only("lzm.exp2"),
          J.float_only("lzj.exp2"), doc="2 ** x; powers of two exact", cost=COSTLY)
ERFC = _u("erfc", _erfc, C.float_only("lz_erfcf", "lz_erfc"), T.float_only("lzm.erfc"),
          J.float_only("lzj.erfc"), like=np.exp,
          doc="1 - erf(x) without its cancellation (relative accuracy to the underflow)",
          cost=COSTLY)
SOFTPLUS = _u("softplus", _softplus, C.float_only("lz_softplusf", "lz_softplus"),
              T.float_only("lzm.softplus"), J.float_only("lzj.softplus"), like=np.exp,
              doc="log(1 + exp(x)) = logaddexp(x, 0), exact for large |x| (no threshold)",
              cost=COSTLY)

FLOOR = _u("floor", np.floor, C.int_identity("floorf", "floor"), T.int_identity("tl.floor"),
           J.int_identity("jnp.floor"))
CEIL = _u("ceil", np.ceil, C.int_identity("ceilf", "ceil"), T.int_identity("tl.ceil"),
          J.int_identity("jnp.ceil"))
ROUND = _u("round", np.round, C.int_identity("lz_roundf", "lz_round"), T.round_even,
           J.int_identity("jnp.round"),
           like=np.floor, doc="half to even; ints unchanged, as np.round")
ROUND.unary_table[D.BOOL] = (D.FLOAT16, D.FLOAT16)  # np.round(bool) is float16
SIGN = _u("sign", np.sign, C.sign, T.sign, J.exact("jnp.sign"))
RECIPROCAL = _u("reciprocal", lambda a: np.ones((), a.dtype) / a, C.reciprocal, T.reciprocal,
                J.reciprocal,
                like=np.reciprocal, cost=DIVIDES)
SQUARE = _u("square", np.square, C.square, T.square, J.fn("jnp.square"))
ISNAN = _u("isnan", np.isnan, C.isnan, T.isnan, J.exact("jnp.isnan"))
ISINF = _u("isinf", np.isinf, C.isinf, T.isinf, J.exact("jnp.isinf"))
ISFINITE = _u("isfinite", np.isfinite, C.isfinite, T.isfinite, J.exact("jnp.isfinite"))
LOGICAL_NOT = _u("logical_not", np.logical_not, C.logical_not, T.logical_not,
                 J.exact("jnp.logical_not"))
INVERT = _u("invert", np.invert, C.invert, T.invert, J.exact("jnp.invert"))


# the array API's (2023.12) remaining unary functions: float functions (ints
# computed in the float dtype NumPy picks, as exp), special cases C99's
def _float_fn(name, ufunc, c_name, doc="", jax=None):
    return _u(name, ufunc, C.float_only(f"lz_{c_name}f", f"lz_{c_name}"),
              T.float_only(f"lzm.{c_name}"), J.float_only(jax or f"jnp.{ufunc.__name__}"),
              doc=doc, cost=COSTLY)


ASIN = _float_fn("asin", np.arcsin, "asin", jax="lzj.asin")
ACOS = _float_fn("acos", np.arccos, "acos", jax="lzj.acos")
ATAN = _float_fn("atan", np.arctan, "atan", jax="lzj.atan")
TAN = _float_fn("tan", np.tan, "tan")
SINH = _float_fn("sinh", np.sinh, "sinh", jax="lzj.sinh")
COSH = _float_fn("cosh", np.cosh, "cosh", jax="lzj.cosh")
ASINH = _float_fn("asinh", np.arcsinh, "asinh", jax="lzj.asinh")
ACOSH = _float_fn("acosh", np.arccosh, "acosh", "acosh(1) = +0; NaN below 1",
                  jax="lzj.acosh")
ATANH = _float_fn("atanh", np.arctanh, "atanh", "atanh(±1) = ±inf; NaN past 1", jax="lzj.atanh")
LOG2 = _float_fn("log2", np.log2, "log2", "log2(±0) = -inf; powers of two exact",
                 jax="lzj.log2")
LOG10 = _float_fn("log10", np.log10, "log10", "log10(±0) = -inf", jax="lzj.log10")
SIGNBIT = _u("signbit", np.signbit, C.float_only("lz_signbitf", "lz_signbit"),
             T.float_only("lzm.signbit"), J.exact("jnp.signbit"),
             doc="the sign bit: True for -0.0 and a negative NaN")
TRUNC = _u("trunc", np.trunc, C.int_identity("truncf", "trunc"), T.int_identity("lzm.trunc"),
           J.int_identity("jnp.trunc"), doc="toward zero, -0.0 kept; ints and bool unchanged")
def _cast(a, attrs):
    to = D.DTYPES[attrs[0]]
    if a.dtype == to:
        return a
    if a.dtype == D.bfloat16 and to.kind in "iu":
        # as the backends, which hold bfloat16 in float32: NumPy's float32 conversion
        # (ml_dtypes' own gives 0 out of range, where float32's wraps: 300 -> 44 in uint8)
        return a.astype(np.float32).astype(to)
    return a.astype(to)


CAST = _def("cast", POINTWISE, 1, _cast,
            doc="astype: attrs = (dtype code,); C casting rules, as ndarray.astype",
            c=C.cast, triton=T.cast, jax=J.cast)
WHERE = _def("where", POINTWISE, 3, lambda c, a, b, attrs: np.where(c, a, b),
             doc="where(cond, a, b): cond is bool, a and b share the result dtype",
             c=C.select, triton=T.select, jax=J.select)


# --- pointwise: counter-based random bits ----------------------------------
# Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
# as 1, 2, 3", SC11): a pure function of (counter, key), so any element of the
# stream is computed on its own, in any kernel, on any backend. lazyrt reads the
# stream as 32-bit words: word ``p`` is output ``p & 3`` of the block with counter
# (b & 0xffffffff, b >> 32, 0, 0), b = p >> 2, under key (seed & 0xffffffff,
# seed >> 32), p and seed taken as uint64. lazyrt.api.random builds floats from it.
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # the round multipliers
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # the key schedule's increments (Weyl sequence)
_LOW32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter, key) -> tuple:
    """The four output words of Philox4x32-10 for ``counter`` (four uint32 arrays)
    and ``key`` (two): NumPy arrays of uint64 holding uint32 values."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in counter)
    k0, k1 = (np.asarray(k, np.uint64) for k in key)
    for r in range(10):
        if r:
            k0, k1 = (k0 + _PHILOX_W[0]) & _LOW32, (k1 + _PHILOX_W[1]) & _LOW32
        p0, p1 = c0 * np.uint64(_PHILOX_M[0]), c2 * np.uint64(_PHILOX_M[1])  # < 2^64
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & _LOW32, (p0 >> 32) ^ c3 ^ k1, p0 & _LOW32
    return c0, c1, c2, c3


def _philox_word(seed, position, attrs):
    seed, position = np.broadcast_arrays(seed, position)
    s, p = seed.astype(np.uint64), position.astype(np.uint64)  # two's complement
    block = p >> 2
    words = philox4x32_10((block & _LOW32, block >> 32, 0, 0), (s & _LOW32, s >> 32))
    lane = p & 3
    word = np.where(lane == 0, words[0], np.where(lane == 1, words[1],
                                                  np.where(lane == 2, words[2], words[3])))
    return word.astype(np.int64)


PHILOX = _def("philox", POINTWISE, 2, _philox_word, np.bitwise_xor,
              "philox(seed, position): word ``position`` of seed's Philox4x32-10 stream, an "
              "int64 in [0, 2^32); int64 operands only; lazyrt.random makes floats of it",
              COSTLY, C.philox, T.philox, J.fn("lzj.philox_word"))
# bitwise_xor's table restricted to int64 (operands that promote to int64 are cast)
for _table in PHILOX.binary_table:
    for _row in _table:
        _row[:] = [p if p == (D.INT64, D.INT64) else (-1, -1) for p in _row]


# --- reductions: attrs = (axes, keepdims) ---------------------------------
def _r(name, fn, combine, accumulator, jax, doc=""):
    return _def(name, REDUCTION, 1,
                _quiet(lambda a, attrs: fn(a, axis=attrs[0], keepdims=attrs[1])), doc=doc,
                jax=jax, combine=combine, accumulator=accumulator)


def _wide_accumulator(code):
    """Sums and products: floats in float64 on every backend (2^24 float32 values
    sum within 1e-6 of the exact value), ints and bool in int64 (wrapping, as NumPy)."""
    return D.FLOAT64 if code in D.FLOATING else D.INT64


def _own_dtype(code):
    """max/min/argmax/argmin: exact in the argument's own dtype."""
    return code


def _accumulated(fn):
    """The reference sum/prod: accumulated in the op table's accumulator dtype
    (as every backend does), then given the result dtype."""
    def run(a, axis, keepdims):
        code = D.CODE[a.dtype]
        out = fn(a, axis=axis, keepdims=keepdims, dtype=D.DTYPES[_wide_accumulator(code)])
        return np.asarray(out).astype(D.DTYPES[D.accumulator(code)], copy=False)
    return run


_sum, _prod = _accumulated(np.sum), _accumulated(np.prod)


def _arg(fn):
    def run(a, axis, keepdims):
        # lazyrt reduces over one axis (or all, flattened: axis=None)
        ax = None if len(axis) != 1 else axis[0]
        if ax is None:
            out = fn(a.reshape(-1))
            return np.asarray(out).reshape((1,) * a.ndim if keepdims else ())
        return fn(a, axis=ax, keepdims=keepdims)
    return run


SUM = _r("sum", _sum, Combine.SUM, _wide_accumulator, J.accumulate("jnp.sum"),
         "ints and bool sum in int64 (NumPy would give uint64 for uint8)")
PROD = _r("prod", _prod, Combine.PROD, _wide_accumulator, J.accumulate("jnp.prod"))
MAX = _r("max", np.max, Combine.MAX, _own_dtype, J.reduce("jnp.max"), "NaN propagates")
MIN = _r("min", np.min, Combine.MIN, _own_dtype, J.reduce("jnp.min"), "NaN propagates")
ARGMAX = _r("argmax", _arg(np.argmax), Combine.ARGMAX, _own_dtype, J.arg("jnp.argmax"),
            "first index of the maximum; NaN wins, as NumPy")
ARGMIN = _r("argmin", _arg(np.argmin), Combine.ARGMIN, _own_dtype, J.arg("jnp.argmin"))
ANY = _r("any", np.any, Combine.ANY, lambda code: D.BOOL, J.reduce("jnp.any"))
ALL = _r("all", np.all, Combine.ALL, lambda code: D.BOOL, J.reduce("jnp.all"))

# --- scans: attrs = (axis, include_initial) --------------------------------
# A running sum or product along one axis, accumulated as sum/prod are (floats
# in float64, ints and bool in int64) and rounded to the result dtype at every
# element; include_initial puts the identity first (the result's axis is one
# longer). The result dtype is sum's: D.accumulator of the argument.
def _scanned(fn, combine):
    def run(a, attrs):
        axis, include_initial = attrs
        code = D.CODE[a.dtype]
        wide = D.DTYPES[_wide_accumulator(code)]
        out = fn(a, axis=axis, dtype=wide)
        if include_initial:
            first = list(out.shape)
            first[axis] = 1
            out = np.concatenate([np.full(first, combine.identity(code), wide), out], axis=axis)
        return out.astype(D.DTYPES[D.accumulator(code)], copy=False)
    return run


def _s(name, fn, combine, jax, doc=""):
    return _def(name, SCAN, 1, _quiet(_scanned(fn, combine)), doc=doc, jax=jax,
                combine=combine, accumulator=_wide_accumulator)


CUMSUM = _s("cumsum", np.cumsum, Combine.SUM, J.scan("jnp.cumsum"),
            "cumulative_sum: a scan kernel on every compiled backend; ints and bool in int64")
CUMPROD = _s("cumprod", np.cumprod, Combine.PROD, J.scan("jnp.cumprod"),
             "cumulative_prod: as cumsum, with products")

# --- views: only indexing changes -----------------------------------------
RESHAPE = _def("reshape", VIEW, 1, lambda a, attrs: a.reshape(attrs[0]),
               doc="attrs = (new shape,)", jax=J.reshape)
PERMUTE = _def("permute", VIEW, 1, lambda a, attrs: a.transpose(attrs[0]),
               doc="attrs = (axes permutation,)", jax=J.permute)
EXPAND = _def("expand", VIEW, 1, lambda a, attrs: np.broadcast_to(a, attrs[0]),
              doc="attrs = (target shape,); same rank, size-1 dims broadcast",
              jax=J.expand)
def as_slices(spec) -> tuple:
    """Python slices for a normalized ((start, step, length), ...) spec."""
    out = []
    for start, step, length in spec:
        stop = start + step * length
        out.append(slice(start, stop if stop >= 0 else None, step))
    return tuple(out)


SLICE = _def("slice", VIEW, 1, lambda a, attrs: a[as_slices(attrs[0])],
             doc="attrs = (((start, step, length), ...),): one per axis, normalized",
             jax=J.slice_)

# --- matmul and opaque movement -------------------------------------------
def _matmul(a, b, attrs):
    """np.matmul; for bfloat16, which has no matmul loop of its own, NumPy's float32
    loop rounded once to bfloat16 (:func:`lazyrt.dtypes.resolve_matmul`)."""
    out = np.matmul(a, b)
    return out.astype(a.dtype) if a.dtype == b.dtype == D.bfloat16 else out


MATMUL_OP = _def("matmul", MATMUL, 2, _matmul, like=np.matmul,
                 doc="bfloat16 products accumulate in float32 and round once", jax=J.matmul)
CONCAT = _def("concat", OPAQUE, -1,
              lambda *args: np.concatenate(args[:-1], axis=args[-1][0]),
              doc="attrs = (axis,)", jax=J.concat)


def _setslice(base, value, attrs):
    out = base.copy()
    out[as_slices(attrs[0])] = value
    return out


SETSLICE = _def("setslice", OPAQUE, 2, _setslice,
                doc="base with base[slices] = value; value already has the slice's shape",
                jax=J.setslice)


# --- opaque sorting and searching ----------------------------------------------
# Their output shapes do not depend on the data, so they stay lazy; they run
# on the host (lazyrt/backends/host.py) from these references, on every backend.

def _sort(a, attrs, arg=False):
    """Stable sort along ``axis``; NaN sorts as the largest value (last ascending).
    Descending sorts the reversed array ascending, stably, and reverses back: equal
    elements keep their original order (not simply the ascending result reversed)."""
    axis, descending = attrs[0], attrs[1]
    if not descending:
        return (np.argsort if arg else np.sort)(a, axis=axis, kind="stable")
    flipped = np.flip(a, axis)
    if not arg:
        return np.flip(np.sort(flipped, axis=axis, kind="stable"), axis)
    order = np.flip(np.argsort(flipped, axis=axis, kind="stable"), axis)
    return a.shape[axis] - 1 - order


SORT = _def("sort", OPAQUE, 1, _sort,
            doc="attrs = (axis, descending): stable; NaN last ascending, first descending",
            jax=J.sort)
ARGSORT = _def("argsort", OPAQUE, 1, lambda a, attrs: _sort(a, attrs, arg=True),
               doc="attrs = (axis, descending): int64 indices of sort's order", jax=J.argsort)
SEARCHSORTED = _def("searchsorted", OPAQUE, 2,
                    lambda a, v, attrs: np.searchsorted(a, v, side=attrs[0]),
                    doc="attrs = (side,): int64 insertion points of v in the sorted 1-D a",
                    jax=J.searchsorted)

# --- indexed reads and accumulating writes along one axis (gather, scatter_add) ------
# Both iterate over the index tensor's shape; the API broadcasts the operands so
# that the other axes already agree (stride-0 views cost nothing). attrs end with
# ``negative``: whether an index in [-n, 0) counts from the end (NumPy) or is an
# error (torch's gather and embedding). An index out of range raises IndexError when
# the result is computed, on every backend, and is never read or written.

#: the name a range-checked op's IndexError begins with, on every backend (the user's
#: call: the barrier finds the op's recorded lines by it, lazyrt.runtime)
CHECKED_NAMES = {"gather": "lazyrt.take_along_axis", "scatter_add": "lazyrt.scatter_add"}


def index_error(name, bad, where, n, negative) -> str:
    """The message of the IndexError for index ``bad`` of op ``name``, every backend's."""
    return (f"{name}: index {bad} is out of range for {where}; indices must lie in "
            f"[{-n if negative else 0}, {n})")


def check_indices(name, indices, n, negative, where):
    """Raise IndexError naming ``name`` when an index lies outside [-n, n) (or
    [0, n) when ``negative`` is false); ``where`` says which axis and shape."""
    low = -n if negative else 0
    bad = (indices < low) | (indices >= n)
    if bad.any():
        raise IndexError(index_error(name, int(indices[bad][0]), where, n, negative))


def _gather(src, indices, attrs):
    axis, negative = attrs
    n = src.shape[axis]
    check_indices(CHECKED_NAMES["gather"], indices, n, negative,
                  f"axis {axis} of size {n} (source shape {src.shape})")
    return np.take_along_axis(src, indices.astype(np.int64, copy=False), axis=axis)


def scatter_accumulator(code: int) -> int:
    """The dtype scatter_add accumulates ``code`` in: float16 and bfloat16 in float32
    (rounded once at the end), every other dtype in itself (ints wrap, bool is or)."""
    return D.FLOAT32 if code in D.REDUCED_FLOATS else code


def _scatter_add(values, indices, attrs):
    axis, size, negative = attrs
    check_indices(CHECKED_NAMES["scatter_add"], indices, size, negative,
                  f"axis {axis} of size {size} (values shape {values.shape})")
    acc = D.DTYPES[scatter_accumulator(D.CODE[values.dtype])]
    shape = values.shape[:axis] + (size,) + values.shape[axis + 1:]
    out = np.zeros(shape, acc)
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + size, idx)
    where = tuple(idx if k == axis else
                  np.arange(d).reshape((1,) * k + (d,) + (1,) * (values.ndim - k - 1))
                  for k, d in enumerate(values.shape))
    with np.errstate(all="ignore"):  # ints wrap, as every backend's sum does
        np.add.at(out, where, values.astype(acc, copy=False))
    return out.astype(values.dtype, copy=False)


GATHER = _def("gather", OPAQUE, 2, _gather,
              doc="take_along_axis: out[..., j, ...] = src[..., idx[..., j, ...], ...] along "
                  "attrs[0]; attrs = (axis, negative); src and idx agree off the axis; "
                  "result shape idx's, dtype src's",
              jax=J.gather)
SCATTER_ADD = _def("scatter_add", OPAQUE, 2, _scatter_add,
                   doc="out = zeros; out[..., idx[..., r, ...], ...] += values[..., r, ...] in "
                       "order of r (as np.add.at); attrs = (axis, size, negative); values and "
                       "idx share a shape; float16 and bfloat16 sum in float32",
                   jax=J.scatter_add)

#: the reductions by name: a kernel IR ``reduce`` statement names its op (``attr``)
REDUCTIONS = {op.name: op for op in OPS if op.kind == REDUCTION}

#: scalar attribute of each reduction op's dtype rule: ints/bool widen to int64
WIDENING_REDUCTIONS = frozenset({SUM.id, PROD.id})
BOOL_REDUCTIONS = frozenset({ANY.id, ALL.id})
INDEX_REDUCTIONS = frozenset({ARGMAX.id, ARGMIN.id})


def reduction_dtype(op: OpDef, code: int) -> int:
    if op.id in WIDENING_REDUCTIONS:
        return D.accumulator(code)
    if op.id in BOOL_REDUCTIONS:
        return D.BOOL
    if op.id in INDEX_REDUCTIONS:
        return D.INT64
    return code


def reference(op: OpDef, inputs: list, attrs):
    """Run ``op``'s NumPy reference on concrete arrays."""
    return op.ref(*inputs, attrs)
