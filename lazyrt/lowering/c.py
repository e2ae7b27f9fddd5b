"""The C lowering vocabulary: small functions that turn C operand expressions
into the C expression NumPy's semantics ask for (wrapping integer arithmetic,
NaN-propagating max/min, floor division with the divisor's sign).

Which one an op uses is a fact of its entry in the op table (``lazyrt/ops.py``,
``lower["c"]``); this module holds no per-op table. :mod:`lazyrt.codegen.c`
lays out the loops and calls the op's lowering.
"""
from __future__ import annotations

import math

from lazyrt import dtypes as D

from . import EmitError

_STORE_T = {D.BOOL: "uint8_t", D.INT8: "int8_t", D.UINT8: "uint8_t", D.INT32: "int32_t",
            D.INT64: "int64_t", D.FLOAT16: "_Float16", D.FLOAT32: "float",
            D.FLOAT64: "double", D.BFLOAT16: "lz_bf16"}
_COMPUTE_T = {**_STORE_T, D.BOOL: "int", D.FLOAT16: "float", D.BFLOAT16: "float"}
_UNSIGNED_T = {D.INT8: "uint8_t", D.UINT8: "uint8_t", D.INT32: "uint32_t",
               D.INT64: "uint64_t", D.BOOL: "unsigned"}
_INT_SUFFIX = {D.INT8: "i8", D.UINT8: "u8", D.INT32: "i32", D.INT64: "i64"}


def _is_float(code):
    return code in D.FLOATING


# bfloat16 is stored as ``lz_bf16`` (its 16 bits in a struct, lazyrt_math.h), which C
# cannot convert: every read and write of a stored element goes through these two,
# so a path that forgets them fails to compile instead of reading bits as a number.
def load_value(code, element: str) -> str:
    """A stored element of dtype ``code`` as its compute type."""
    if code == D.BFLOAT16:
        return f"lz_bf16_to_f32({element})"
    return f"({_COMPUTE_T[code]}){element}"


def store_value(code, value: str) -> str:
    """A computed value of dtype ``code`` (already rounded to it) as stored."""
    if code == D.BFLOAT16:
        return f"lz_f32_to_bf16({value})"
    return f"({_STORE_T[code]}){value}"


def _fmt_const(value, code) -> str:
    if _is_float(code):
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        lit = repr(v)
        return f"{lit}f" if code != D.FLOAT64 else lit
    if code == D.BOOL:
        return "1" if value else "0"
    v = int(value)
    return f"INT64_C({v})" if code == D.INT64 else str(v)


# --- lowerings: each takes (code, t, *operands) and returns a C expression -----
# ``code`` is the operands' dtype, ``t`` (a lowering.ComputeType) the result's
# C compute type. The op table (lazyrt/ops.py) names one per op. float16 values
# live in float; an op on them computes in float, and the cast to float16 that
# the planner puts after it (passes.round_float16) rounds.

def wrap_int(sym):
    """+ - *: floats as is, bool as | / &, ints wrapping through unsigned (NumPy's)."""
    def lower(code, t, a, b):
        if _is_float(code):
            return f"({a} {sym} {b})"
        if code == D.BOOL:
            return f"({a} {'|' if sym == '+' else '&'} {b})"
        return f"({t})(({_UNSIGNED_T[code]}){a} {sym} ({_UNSIGNED_T[code]}){b})"
    return lower


def infix(sym):
    return lambda code, t, a, b: f"({a} {sym} {b})"


def bitwise(sym):
    return lambda code, t, a, b: f"({t})({a} {sym} {b})"


def logical(sym):
    return lambda code, t, a, b: f"(({a} != 0) {sym} ({b} != 0))"


def divmod_(kind):
    """floor division / modulo with the divisor's sign, x // 0 == 0 for ints."""
    def lower(code, t, a, b):
        suffix = {D.FLOAT32: "f32", D.FLOAT16: "f32", D.BFLOAT16: "f32",
                  D.FLOAT64: "f64"}.get(code) \
            or _INT_SUFFIX[code]
        return f"lz_{kind}_{suffix}({a}, {b})"
    return lower


def power(code, t, a, b):
    if _is_float(code):
        return f"{'lz_pow' if code == D.FLOAT64 else 'lz_powf'}({a}, {b})"
    return f"({t})lz_ipow((int64_t){a}, (int64_t){b})"


def shift(kind):
    """<< (``shl``) and >> (``shr``) with NumPy's results for every amount: one
    outside [0, bits) gives 0, or -1 for >> of a negative value; no C undefined
    behaviour (lz_shl_i8 ... in lazyrt_math_array_api.h)."""
    def lower(code, t, a, b):
        if code not in _INT_SUFFIX:
            raise EmitError(f"on {D.NAMES[code]}")
        return f"lz_{kind}_{_INT_SUFFIX[code]}({a}, {b})"
    return lower


def maxmin(kind):
    def lower(code, t, a, b):
        if _is_float(code):  # float16 keeps the first of equal operands (lazyrt_math.h)
            suffix = {D.FLOAT64: "", D.FLOAT16: "16f"}.get(code, "f")
            return f"lz_{kind}{suffix}({a}, {b})"
        cmp = ">" if kind == "max" else "<"
        return f"({a} {cmp} {b} ? {a} : {b})"
    return lower


def negate(code, t, a):
    if _is_float(code):
        return f"(-{a})"
    return f"({t})(0u - ({_UNSIGNED_T[code]}){a})"


def absolute(code, t, a):
    if _is_float(code):
        return f"{'fabs' if code == D.FLOAT64 else 'fabsf'}({a})"
    if code in (D.UINT8, D.BOOL):
        return a
    return f"({a} < 0 ? ({t})(0u - ({_UNSIGNED_T[code]}){a}) : {a})"


def float_only(fn32, fn64):
    """A float-only function of any arity: ``fn32`` for float16/float32, ``fn64``
    for double (``exp``, ``hypot``...)."""
    def lower(code, t, *args):
        if not _is_float(code):
            raise EmitError(f"on {D.NAMES[code]}")
        return f"{fn64 if code == D.FLOAT64 else fn32}({', '.join(args)})"
    return lower


def int_identity(fn32, fn64):
    """floor, ceil, round: a float function; integers are their own value."""
    def lower(code, t, a):
        return f"{fn64 if code == D.FLOAT64 else fn32}({a})" if _is_float(code) else a
    return lower


def rsqrt(code, t, a):
    return f"(({t})1 / {'sqrt' if code == D.FLOAT64 else 'sqrtf'}({a}))"


def sign(code, t, a):
    if _is_float(code):
        return f"lz_sign{'' if code == D.FLOAT64 else 'f'}({a})"
    return f"({t})(({a} > 0) - ({a} < 0))"


def reciprocal(code, t, a):
    if _is_float(code):
        return f"(({t})1 / {a})"
    return f"({a} == 0 ? ({t})0 : ({t})(1 / {a}))"


def square(code, t, a):
    return wrap_int("*")(code, t, a, a)


def isnan(code, t, a):
    return f"({a} != {a})" if _is_float(code) else "0"


def isinf(code, t, a):
    return f"({'fabs' if code == D.FLOAT64 else 'fabsf'}({a}) == INFINITY)" \
        if _is_float(code) else "0"


def isfinite(code, t, a):
    return f"({'fabs' if code == D.FLOAT64 else 'fabsf'}({a}) < INFINITY)" \
        if _is_float(code) else "1"


def logical_not(code, t, a):
    return f"({a} == 0)"


def invert(code, t, a):
    return f"({a} ^ 1)" if code == D.BOOL else f"({t})(~{a})"


def cast(code, t, a):
    """astype: to bool is ``!= 0``; to float16 or bfloat16 rounds (held in float),
    from a double in one rounding; otherwise C's conversion."""
    if t.dtype == D.BOOL:
        return f"({a} != 0)"
    if t.dtype == D.FLOAT16:
        return f"lz_hd({a})" if code == D.FLOAT64 else f"lz_h({a})"
    if t.dtype == D.BFLOAT16:
        if code in (D.INT32, D.INT64):  # through float they would round twice
            return f"lz_bf_i64((int64_t){a})"
        return f"lz_bfd({a})" if code == D.FLOAT64 else f"lz_bf({a})"
    return f"({t}){a}"


def select(code, t, c, a, b):
    return f"({c} ? {a} : {b})"


def philox(code, t, seed, position):
    """Word ``position`` of seed's Philox4x32-10 stream (kernels/lazyrt_random.h)."""
    if code != D.INT64:
        raise EmitError(f"on {D.NAMES[code]} (seed and position are int64)")
    return f"lz_philox_word({seed}, {position})"


#: <stdint.h>'s names of the integer dtypes' extremes
_LIMITS = {(D.INT8, -2**7): "INT8_MIN", (D.INT8, 2**7 - 1): "INT8_MAX",
           (D.UINT8, 2**8 - 1): "UINT8_MAX", (D.INT32, -2**31): "INT32_MIN",
           (D.INT32, 2**31 - 1): "INT32_MAX", (D.INT64, -2**63): "INT64_MIN",
           (D.INT64, 2**63 - 1): "INT64_MAX"}


def identity_literal(value, code) -> str:
    """A reduction's or scan's identity for argument dtype ``code`` (the op table's)
    as the first value of an accumulator of any C type: a whole number as an
    integer literal, which C converts exactly; an integer dtype's extremes by their
    <stdint.h> names (-2^63 has no literal of its own); infinities as INFINITY."""
    if isinstance(value, float) and not value.is_integer():
        return _fmt_const(value, D.FLOAT64)
    return _LIMITS.get((code, int(value)), str(int(value)))


#: element count under which a kernel stays on one thread, where the C backend
#: has not measured this host's (lazyrt/backends/c_parallel.py; LZ_PAR_MIN in the kernels)
PARALLEL_THRESHOLD = 32768
