"""Triton expressions for lazyrt's ops: the per-op, per-dtype rules of the
Triton emitter (NumPy semantics through the helpers in
``lazyrt.kernels.triton_math``). :mod:`lazyrt.codegen.triton` lays out the
programs; ``kernels/triton_matmul.py`` reuses these for its epilogue.
"""
from __future__ import annotations

import math

from lazyrt import dtypes as D

_STORE_T = {D.BOOL: "tl.uint8", D.INT8: "tl.int8", D.UINT8: "tl.uint8", D.INT32: "tl.int32",
            D.INT64: "tl.int64", D.FLOAT16: "tl.float16", D.FLOAT32: "tl.float32",
            D.FLOAT64: "tl.float64"}
_COMPUTE_T = {**_STORE_T, D.BOOL: "tl.int1", D.FLOAT16: "tl.float32"}
_BITS = {D.INT8: 8, D.UINT8: 8, D.INT32: 32, D.INT64: 64, D.BOOL: 1}
_INT_MIN = {D.INT8: -2**7, D.UINT8: 0, D.INT32: -2**31, D.INT64: -2**63, D.BOOL: 0}
_INT_MAX = {D.INT8: 2**7 - 1, D.UINT8: 255, D.INT32: 2**31 - 1, D.INT64: 2**63 - 1, D.BOOL: 1}


class EmitError(Exception):
    """The spec asks for something this emitter does not generate."""


def _is_float(code):
    return code in D.FLOATING


def fmt_const(value, code) -> str:
    """A scalar tensor of dtype ``code`` holding ``value``."""
    t = _COMPUTE_T[code]
    if _is_float(code):
        v = float(value)
        lit = ('float("nan")' if math.isnan(v) else
               (('float("inf")' if v > 0 else '-float("inf")') if math.isinf(v) else repr(v)))
    elif code == D.BOOL:
        lit = "1" if value else "0"
    else:
        lit = str(int(value))
    return f"tl.full([], {lit}, {t})"


def _f(code, name32, name64=None):
    return name64 if (code == D.FLOAT64 and name64) else name32


def _float_only(name, fn):
    def emit(a, code):
        if not _is_float(code):
            raise EmitError(f"{name} on {D.NAMES[code]}")
        return f"{fn}({a})"
    return emit


def _binary(op, a, b, code, t):
    if op in ("add", "sub", "mul"):
        if code == D.BOOL:
            return {"add": f"({a} | {b})", "mul": f"({a} & {b})", "sub": f"({a} ^ {b})"}[op]
        return f"({a} {'+' if op == 'add' else '-' if op == 'sub' else '*'} {b})"
    if op == "truediv":
        return f"({a} / {b})"
    if op in ("floordiv", "mod"):
        kind = "float" if _is_float(code) else ("uint" if code in (D.UINT8, D.BOOL) else "int")
        return f"lzm.{op}_{kind}({a}, {b})"
    if op in ("maximum", "minimum"):
        if code == D.BOOL:
            return f"({a} | {b})" if op == "maximum" else f"({a} & {b})"
        if _is_float(code):
            return f"lzm.{op}({a}, {b})"
        cmp = ">" if op == "maximum" else "<"
        return f"tl.where({a} {cmp} {b}, {a}, {b})"
    cmp = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}.get(op)
    if cmp:
        return f"({a} {cmp} {b})"
    bit = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}.get(op)
    if bit:
        return f"({a} {bit} {b})"
    if op == "logical_and":
        return f"(({a} != 0) & ({b} != 0))"
    if op == "logical_or":
        return f"(({a} != 0) | ({b} != 0))"
    return None


_UNARY = {
    "exp": _float_only("exp", "tl.exp"),
    "log": _float_only("log", "tl.log"),
    "log1p": _float_only("log1p", "lzm.log1p"),
    "expm1": _float_only("expm1", "lzm.expm1"),
    "sqrt": _float_only("sqrt", "lzm.sqrt"),
    "sin": _float_only("sin", "lzm.sin"),
    "cos": _float_only("cos", "lzm.cos"),
    "tanh": _float_only("tanh", "lzm.tanh"),
    "sigmoid": _float_only("sigmoid", "lzm.sigmoid"),
    "erf": _float_only("erf", "tl.math.erf"),
    "rsqrt": lambda a, code: f"(1.0 / {_float_only('rsqrt', 'lzm.sqrt')(a, code)})",
}


def _unary(op, a, code, t):
    if op in _UNARY:
        return _UNARY[op](a, code)
    if op == "neg":
        return f"(-{a})" if code != D.UINT8 else f"(0 - {a})"
    if op == "abs":
        if _is_float(code):
            return f"tl.abs({a})"
        return a if code in (D.UINT8, D.BOOL) else f"tl.where({a} < 0, 0 - {a}, {a})"
    if op in ("floor", "ceil"):
        return f"tl.{op}({a})" if _is_float(code) else a
    if op == "round":
        return f"lzm.{_f(code, 'rint32', 'rint64')}({a})" if _is_float(code) else a
    if op == "sign":
        if _is_float(code):
            return f"lzm.sign_float({a})"
        if code == D.BOOL:
            return a
        return f"(({a} > 0).to({t}) - ({a} < 0).to({t}))"
    if op == "reciprocal":
        if _is_float(code):
            return f"(1.0 / {a})"
        neg = f"tl.where({a} == -1, -1, 0)" if code not in (D.UINT8, D.BOOL) else "0"
        return f"tl.where({a} == 1, 1, {neg}).to({t})"
    if op == "square":
        return f"({a} & {a})" if code == D.BOOL else f"({a} * {a})"
    if op == "isnan":
        return f"({a} != {a})"
    if op == "isinf":
        return f"(tl.abs({a}) == float(\"inf\"))" if _is_float(code) else f"({a} != {a})"
    if op == "isfinite":
        return f"(tl.abs({a}) < float(\"inf\"))" if _is_float(code) else f"({a} == {a})"
    if op == "logical_not":
        return f"({a} == 0)"
    if op == "invert":
        return f"({a} == 0)" if code == D.BOOL else f"(~{a})"
    return None


def _pow(a, b, code, t, const_b):
    if _is_float(code):
        if const_b == 2:
            return f"({a} * {a})"
        if const_b == 1:
            return f"({a})"
        if const_b == 0.5:
            return f"lzm.sqrt({a})"
        if const_b == 3:
            return f"({a} * {a} * {a})"
        if const_b == -1:
            return f"(1.0 / {a})"
        return f"lzm.powf({a}, {b})"
    if code == D.BOOL:
        return f"(({a}) | ({b} == 0))"
    fn = "upow" if code == D.UINT8 else "ipow"
    return f"lzm.{fn}({a}, {b}, {_BITS[code]})"


def expression(spec, st, var) -> str:
    """The Triton expression of body statement ``st`` (not load/scalar/reduce).

    ``var(sid)`` names the value of statement ``sid``. Shared by the matmul
    epilogue emitter."""
    t = _COMPUTE_T[st.dtype]
    if st.op == "const":
        return fmt_const(st.attr, st.dtype)
    args = [var(a) for a in st.args]
    codes = [spec.body[a].dtype for a in st.args]
    if st.op == "cast":
        e = f"({args[0]} != 0)" if st.dtype == D.BOOL else f"{args[0]}.to({t})"
    elif st.op == "where":
        e = f"tl.where({args[0]}, {args[1]}, {args[2]})"
    elif st.op == "pow":
        b = spec.body[st.args[1]]
        e = _pow(args[0], args[1], codes[0], t, b.attr if b.op == "const" else None)
    elif len(args) == 2 and _binary(st.op, args[0], args[1], codes[0], t) is not None:
        e = _binary(st.op, args[0], args[1], codes[0], t)
    elif len(args) == 1 and _unary(st.op, args[0], codes[0], t) is not None:
        e = _unary(st.op, args[0], codes[0], t)
    else:
        raise EmitError(f"the Triton emitter has no rule for op {st.op!r} "
                        f"({', '.join(D.NAMES[c] for c in codes)}) in kernel {spec.name}")
    if st.dtype == D.FLOAT16:
        e = f"{e}.to(tl.float16).to(tl.float32)"
    return e


def load_expr(ptr, idx, code, mask) -> str:
    m = f", mask={mask}, other=0" if mask else ""
    e = f"tl.load({ptr} + {idx}{m})"
    if code == D.BOOL:
        return f"({e} != 0)"
    if code == D.FLOAT16:
        return f"{e}.to(tl.float32)"
    return e


def store_value(v, code) -> str:
    return f"{v}.to({_STORE_T[code]})"
