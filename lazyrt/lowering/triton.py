"""The Triton lowering vocabulary: small functions that turn operand
expressions into Triton expressions with NumPy's semantics (through the
helpers in ``lazyrt.kernels.triton_math``).

Which one an op uses is a fact of its entry in the op table (``lazyrt/ops.py``,
``lower["triton"]``); this module holds no per-op table.
:mod:`lazyrt.codegen.triton` lays out the programs; ``codegen/triton_matmul.py``
reuses :func:`expression` for its epilogue.
"""
from __future__ import annotations

import math

from lazyrt import dtypes as D

from . import ComputeType, EmitError, lower_statement

_STORE_T = {D.BOOL: "tl.uint8", D.INT8: "tl.int8", D.UINT8: "tl.uint8", D.INT32: "tl.int32",
            D.INT64: "tl.int64", D.FLOAT16: "tl.float16", D.FLOAT32: "tl.float32",
            D.FLOAT64: "tl.float64", D.BFLOAT16: "tl.bfloat16"}
_COMPUTE_T = {**_STORE_T, D.BOOL: "tl.int1", D.FLOAT16: "tl.float32", D.BFLOAT16: "tl.float32"}
_BITS = {D.INT8: 8, D.UINT8: 8, D.INT32: 32, D.INT64: 64, D.BOOL: 1}


def _is_float(code):
    return code in D.FLOATING


def literal(value) -> str:
    """A constant (a Python float, int or bool: a reduction's identity from the op
    table) as Triton source: infinities and NaN as ``float(...)``, bool as 0 or 1."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else '-float("inf")'
        return repr(value)
    return str(int(value))


def fmt_const(value, code) -> str:
    """A scalar tensor of dtype ``code`` holding ``value``."""
    kind = float if _is_float(code) else (bool if code == D.BOOL else int)
    return f"tl.full([], {literal(kind(value))}, {_COMPUTE_T[code]})"


# --- lowerings: each takes (code, t, *operands) and returns a Triton expression ---
# ``code`` is the operands' dtype, ``t`` (a lowering.ComputeType) the result's
# compute type. The op table (lazyrt/ops.py) names one per op. float16 and bfloat16
# values live in float32; an op on them computes in float32, and the cast to float16
# that the planner puts after it (passes.round_float16) rounds.

def arith(sym):
    """+ - *: bool as | & ^ (NumPy's bool arithmetic), else the operator."""
    bool_sym = {"+": "|", "*": "&", "-": "^"}[sym]

    def lower(code, t, a, b):
        return f"({a} {bool_sym if code == D.BOOL else sym} {b})"
    return lower


def infix(sym):
    return lambda code, t, a, b: f"({a} {sym} {b})"


#: codes computed in float32, whose ``/`` compiles to the approximate div.full.f32 on
#: NVIDIA GPUs (2 ULP; the interpreter divides exactly): these divide by div_rn
_FLOAT32_COMPUTE = (D.FLOAT16, D.BFLOAT16, D.FLOAT32)


def truediv(code, t, a, b):
    """``a / b`` rounded correctly on a GPU too (IEEE division, as NumPy's)."""
    return f"tl.math.div_rn({a}, {b})" if code in _FLOAT32_COMPUTE else f"({a} / {b})"


def _one_over(code, a):
    return f"lzm.recip_rn({a})" if code in _FLOAT32_COMPUTE else f"(1.0 / {a})"


def logical(sym):
    return lambda code, t, a, b: f"(({a} != 0) {sym} ({b} != 0))"


def divmod_(kind):
    """floor division / modulo with the divisor's sign, x // 0 == 0 for ints."""
    def lower(code, t, a, b):
        flavour = "float" if _is_float(code) else \
            ("uint" if code in (D.UINT8, D.BOOL) else "int")
        return f"lzm.{kind}_{flavour}({a}, {b})"
    return lower


def maxmin(kind):
    def lower(code, t, a, b):
        if code == D.BOOL:
            return f"({a} | {b})" if kind == "maximum" else f"({a} & {b})"
        if _is_float(code):  # float16 keeps the first of equal operands (triton_math)
            return f"lzm.{kind}({a}, {b}{', True' if code == D.FLOAT16 else ''})"
        return f"tl.where({a} {'>' if kind == 'maximum' else '<'} {b}, {a}, {b})"
    return lower


def power(code, t, a, b):
    if _is_float(code):
        return f"lzm.powf({a}, {b})"
    if code == D.BOOL:
        return f"(({a}) | ({b} == 0))"
    fn = "upow" if code == D.UINT8 else "ipow"
    return f"lzm.{fn}({a}, {b}, {_BITS[code]})"


def shift(kind):
    """<< (``shl``) and >> (``shr``): NumPy's results for amounts outside
    [0, bits) (0, or -1 for >> of a negative value), never an LLVM poison shift."""
    def lower(code, t, a, b):
        if code not in _BITS or code == D.BOOL:
            raise EmitError(f"on {D.NAMES[code]}")
        return f"lzm.{kind}({a}, {b}, {_BITS[code]})"
    return lower


def float_only(fn):
    def lower(code, t, *args):
        if not _is_float(code):
            raise EmitError(f"on {D.NAMES[code]}")
        return f"{fn}({', '.join(args)})"
    return lower


def rsqrt(code, t, a):
    return _one_over(code, float_only('lzm.sqrt')(code, t, a))


def negate(code, t, a):
    return f"(-{a})" if code != D.UINT8 else f"(0 - {a})"


def absolute(code, t, a):
    if _is_float(code):
        return f"tl.abs({a})"
    return a if code in (D.UINT8, D.BOOL) else f"tl.where({a} < 0, 0 - {a}, {a})"


def int_identity(fn):
    """floor, ceil: a float function; integers are their own value."""
    return lambda code, t, a: f"{fn}({a})" if _is_float(code) else a


def round_even(code, t, a):
    return f"lzm.{'rint64' if code == D.FLOAT64 else 'rint32'}({a})" if _is_float(code) else a


def sign(code, t, a):
    if _is_float(code):
        return f"lzm.sign_float({a})"
    if code == D.BOOL:
        return a
    return f"(({a} > 0).to({t}) - ({a} < 0).to({t}))"


def reciprocal(code, t, a):
    if _is_float(code):
        return _one_over(code, a)
    neg = f"tl.where({a} == -1, -1, 0)" if code not in (D.UINT8, D.BOOL) else "0"
    return f"tl.where({a} == 1, 1, {neg}).to({t})"


def square(code, t, a):
    return f"({a} & {a})" if code == D.BOOL else f"({a} * {a})"


def isnan(code, t, a):
    return f"({a} != {a})"


def isinf(code, t, a):
    return f"(tl.abs({a}) == float(\"inf\"))" if _is_float(code) else f"({a} != {a})"


def isfinite(code, t, a):
    return f"(tl.abs({a}) < float(\"inf\"))" if _is_float(code) else f"({a} == {a})"


def logical_not(code, t, a):
    return f"({a} == 0)"


def invert(code, t, a):
    return f"({a} == 0)" if code == D.BOOL else f"(~{a})"


def cast(code, t, a):
    """astype: to bool is ``!= 0``; to float16 or bfloat16 rounds once, from the
    source, and is held in float32; else Triton's conversion."""
    if t.dtype == D.BOOL:
        return f"({a} != 0)"
    if t.dtype == D.BFLOAT16 and code in (D.FLOAT64, D.INT32, D.INT64):
        # one rounding (ints through float64: exact below 2^53), lzm.f64_to_bf16
        return f"lzm.f64_to_bf16({a}.to(tl.float64))"
    if t.dtype in D.REDUCED_FLOATS:
        return f"{a}.to({_STORE_T[t.dtype]}).to({t})"
    return f"{a}.to({t})"


def select(code, t, c, a, b):
    return f"tl.where({c}, {a}, {b})"


def philox(code, t, seed, position):
    """Word ``position`` of seed's Philox4x32-10 stream (kernels/triton_random.py)."""
    if code != D.INT64:
        raise EmitError(f"on {D.NAMES[code]} (seed and position are int64)")
    return f"lzr.philox_word({seed}, {position})"


def expression(spec, st, var) -> str:
    """The Triton expression of body statement ``st`` (not load/scalar/reduce):
    the op table's Triton lowering of ``st.op``. ``var(sid)`` names the value of
    statement ``sid``. Shared by the matmul epilogue emitter."""
    t = ComputeType(_COMPUTE_T[st.dtype], st.dtype)
    if st.op == "const":
        return fmt_const(st.attr, st.dtype)
    code = spec.body[st.args[0]].dtype if st.args else st.dtype
    return lower_statement("triton", st, code, t, [var(a) for a in st.args], spec.name)


def load_expr(ptr, idx, code, mask) -> str:
    m = f", mask={mask}, other=0" if mask else ""
    e = f"tl.load({ptr} + {idx}{m})"
    if code == D.BOOL:
        return f"({e} != 0)"
    if code in D.REDUCED_FLOATS:
        return f"{e}.to(tl.float32)"
    return e


def store_value(v, code) -> str:
    return f"{v}.to({_STORE_T[code]})"
