"""C expressions for lazyrt's ops: the per-op, per-dtype rules of the C emitter.

Each entry turns C operand expressions into the C expression NumPy's
semantics ask for (wrapping integer arithmetic, NaN-propagating max/min,
floor division with the divisor's sign, float16 rounding is the emitter's).
Pure data and small functions; :mod:`lazyrt.codegen.c` lays out the loops.
"""
from __future__ import annotations

import math

from lazyrt import dtypes as D

_STORE_T = {D.BOOL: "uint8_t", D.INT8: "int8_t", D.UINT8: "uint8_t", D.INT32: "int32_t",
            D.INT64: "int64_t", D.FLOAT16: "_Float16", D.FLOAT32: "float",
            D.FLOAT64: "double"}
_COMPUTE_T = {**_STORE_T, D.BOOL: "int", D.FLOAT16: "float"}
_UNSIGNED_T = {D.INT8: "uint8_t", D.UINT8: "uint8_t", D.INT32: "uint32_t",
               D.INT64: "uint64_t", D.BOOL: "unsigned"}
_INT_SUFFIX = {D.INT8: "i8", D.UINT8: "u8", D.INT32: "i32", D.INT64: "i64"}


class EmitError(Exception):
    """The spec asks for something this emitter does not generate."""


def _is_float(code):
    return code in D.FLOATING


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


def _wrap_int(op):
    def emit(a, b, t, code):
        if _is_float(code):
            return f"({a} {op} {b})"
        if code == D.BOOL:
            return f"({a} {'|' if op == '+' else '&'} {b})"
        return f"({t})(({_UNSIGNED_T[code]}){a} {op} ({_UNSIGNED_T[code]}){b})"
    return emit


def _divmod(kind):
    def emit(a, b, t, code):
        suffix = {D.FLOAT32: "f32", D.FLOAT16: "f32", D.FLOAT64: "f64"}.get(code) \
            or _INT_SUFFIX[code]
        return f"lz_{kind}_{suffix}({a}, {b})"
    return emit


def _pow(a, b, t, code, const_b=None):
    if const_b is not None and _is_float(code):
        if const_b == 2:
            return f"({a} * {a})"
        if const_b == 1:
            return f"({a})"
        if const_b == 0.5:
            return f"{'sqrt' if code == D.FLOAT64 else 'sqrtf'}({a})"
        if const_b == 3:
            return f"({a} * {a} * {a})"
        if const_b == -1:
            return f"(({t})1 / {a})"
    if _is_float(code):
        return f"{'pow' if code == D.FLOAT64 else 'powf'}({a}, {b})"
    return f"({t})lz_ipow((int64_t){a}, (int64_t){b})"


def _maxmin(kind):
    def emit(a, b, t, code):
        if _is_float(code):
            return f"lz_{kind}{'' if code == D.FLOAT64 else 'f'}({a}, {b})"
        cmp = ">" if kind == "max" else "<"
        return f"({a} {cmp} {b} ? {a} : {b})"
    return emit


_BINARY = {
    "add": _wrap_int("+"), "sub": _wrap_int("-"), "mul": _wrap_int("*"),
    "truediv": lambda a, b, t, c: f"({a} / {b})",
    "floordiv": _divmod("floordiv"), "mod": _divmod("mod"),
    "maximum": _maxmin("max"), "minimum": _maxmin("min"),
    "eq": lambda a, b, t, c: f"({a} == {b})", "ne": lambda a, b, t, c: f"({a} != {b})",
    "lt": lambda a, b, t, c: f"({a} < {b})", "le": lambda a, b, t, c: f"({a} <= {b})",
    "gt": lambda a, b, t, c: f"({a} > {b})", "ge": lambda a, b, t, c: f"({a} >= {b})",
    "bitwise_and": lambda a, b, t, c: f"({t})({a} & {b})",
    "bitwise_or": lambda a, b, t, c: f"({t})({a} | {b})",
    "bitwise_xor": lambda a, b, t, c: f"({t})({a} ^ {b})",
    "logical_and": lambda a, b, t, c: f"(({a} != 0) & ({b} != 0))",
    "logical_or": lambda a, b, t, c: f"(({a} != 0) | ({b} != 0))",
}


def _neg(a, t, code):
    if _is_float(code):
        return f"(-{a})"
    return f"({t})(0u - ({_UNSIGNED_T[code]}){a})"


def _abs(a, t, code):
    if _is_float(code):
        return f"{'fabs' if code == D.FLOAT64 else 'fabsf'}({a})"
    if code in (D.UINT8, D.BOOL):
        return a
    return f"({a} < 0 ? ({t})(0u - ({_UNSIGNED_T[code]}){a}) : {a})"


def _float_only(name, fn32, fn64):
    def emit(a, t, code):
        if not _is_float(code):
            raise EmitError(f"{name} on {D.NAMES[code]}")
        return f"{fn64 if code == D.FLOAT64 else fn32}({a})"
    return emit


def _int_identity(fn32, fn64):
    def emit(a, t, code):
        return f"{fn64 if code == D.FLOAT64 else fn32}({a})" if _is_float(code) else a
    return emit


_UNARY = {
    "neg": _neg, "abs": _abs,
    "exp": _float_only("exp", "lz_expf", "lz_exp"),
    "log": _float_only("log", "lz_logf", "lz_log"),
    "log1p": _float_only("log1p", "lz_log1pf", "lz_log1p"),
    "expm1": _float_only("expm1", "lz_expm1f", "lz_expm1"),
    "sqrt": _float_only("sqrt", "sqrtf", "sqrt"),
    "sin": _float_only("sin", "lz_sinf", "lz_sin"),
    "cos": _float_only("cos", "lz_cosf", "lz_cos"),
    "tanh": _float_only("tanh", "lz_tanhf", "lz_tanh"),
    "sigmoid": _float_only("sigmoid", "lz_sigmoidf", "lz_sigmoid"),
    "erf": _float_only("erf", "lz_erff", "lz_erf"),
    "rsqrt": lambda a, t, c: f"(({t})1 / {'sqrt' if c == D.FLOAT64 else 'sqrtf'}({a}))",
    "floor": _int_identity("floorf", "floor"),
    "ceil": _int_identity("ceilf", "ceil"),
    "round": _int_identity("lz_roundf", "lz_round"),
    "sign": lambda a, t, c: (f"lz_sign{'' if c == D.FLOAT64 else 'f'}({a})" if _is_float(c)
                             else f"({t})(({a} > 0) - ({a} < 0))"),
    "reciprocal": lambda a, t, c: (f"(({t})1 / {a})" if _is_float(c)
                                   else f"({a} == 0 ? ({t})0 : ({t})(1 / {a}))"),
    "square": lambda a, t, c: _wrap_int("*")(a, a, t, c),
    "isnan": lambda a, t, c: f"({a} != {a})" if _is_float(c) else "0",
    "isinf": lambda a, t, c: (f"({'fabs' if c == D.FLOAT64 else 'fabsf'}({a}) == INFINITY)"
                              if _is_float(c) else "0"),
    "isfinite": lambda a, t, c: (f"({'fabs' if c == D.FLOAT64 else 'fabsf'}({a}) < INFINITY)"
                                 if _is_float(c) else "1"),
    "logical_not": lambda a, t, c: f"({a} == 0)",
    "invert": lambda a, t, c: f"({a} ^ 1)" if c == D.BOOL else f"({t})(~{a})",
}

_REDUCE_INIT = {
    "sum": lambda t, f: "0", "prod": lambda t, f: "1",
    "any": lambda t, f: "0", "all": lambda t, f: "1",
    "max": lambda t, f: "(-INFINITY)" if f else {
        "int8_t": "INT8_MIN", "uint8_t": "0", "int32_t": "INT32_MIN",
        "int64_t": "INT64_MIN", "int": "0"}[t],
    "min": lambda t, f: "INFINITY" if f else {
        "int8_t": "INT8_MAX", "uint8_t": "UINT8_MAX", "int32_t": "INT32_MAX",
        "int64_t": "INT64_MAX", "int": "1"}[t],
}
_OMP_REDUCTION = {"sum": "+", "prod": "*", "max": "max", "min": "min", "any": "|",
                  "all": "&"}


#: element count under which a kernel stays on one thread
PARALLEL_THRESHOLD = 32768

#: ops that cost tens of cycles per element: worth a row buffer, and they make
#: a kernel compute-bound (its stores are not streamed)
COSTLY_OPS = frozenset({"exp", "log", "log1p", "expm1", "tanh", "sigmoid", "erf", "sin", "cos",
                        "pow"})
