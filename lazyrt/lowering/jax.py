"""The JAX lowering vocabulary: small functions that turn operand names into
``jax.numpy`` expressions with NumPy's semantics (through the helpers in
``lazyrt.kernels.jax_math``, imported as ``lzj`` by the generated module).

Which one an op uses is a fact of its entry in the op table
(``lazyrt/ops.py``, ``lower["jax"]``). Unlike the C and Triton lowerings,
these see whole graph nodes: XLA fuses on its own, so ``codegen/jax.py``
lowers the captured graph as one function. A lowering is
``lower(n, *operands) -> expression`` where ``n`` is a :class:`JaxNode`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from lazyrt import dtypes as D

from . import EmitError

JNP_DTYPE = {D.BOOL: "jnp.bool_", D.INT8: "jnp.int8", D.UINT8: "jnp.uint8",
             D.INT32: "jnp.int32", D.INT64: "jnp.int64", D.FLOAT16: "jnp.float16",
             D.FLOAT32: "jnp.float32", D.FLOAT64: "jnp.float64", D.BFLOAT16: "jnp.bfloat16"}


class JaxNode(NamedTuple):
    """What a lowering sees of a node: its dtype, its first operand's dtype,
    its shape and attrs, and its index (for the baked-constant table)."""
    dtype: int
    in_dtype: int
    shape: tuple
    attrs: object
    index: int


def _jt(code) -> str:
    return JNP_DTYPE[code]


def literal(value) -> str:
    """A constant (a Python float, int or bool) as Python source that reads back
    exactly: infinities and NaN as ``float(...)``."""
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            return 'float("nan")'
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(value)


# --- pointwise ------------------------------------------------------------
# For every op marked ``arithmetic`` the emitter (codegen/jax.py) casts the
# operands to the result's dtype (float16 and bfloat16: computes in float32 and rounds
# the result once, ``lzj.half``/``lzj.bfloat``), so a lowering sees operands of one dtype.

def fn(name):
    """``name(*operands)``: a jax.numpy (or jax.lax, jax.nn...) function."""
    def lower(n, *args):
        return f"{name}({', '.join(args)})"
    lower.arithmetic = True
    return lower


def maxmin(name):
    """``lzj.maximum``/``lzj.minimum``; on float16 the ``16`` variants, which keep the
    first of equal operands as NumPy's half loop does."""
    def lower(n, a, b):
        return f"{name}{'16' if n.in_dtype == D.FLOAT16 else ''}({a}, {b})"
    lower.arithmetic = True
    return lower


def exact(name):
    """As :func:`fn`, for ops exact in float16 (comparisons, sign, abs...)."""
    def lower(n, *args):
        return f"{name}({', '.join(args)})"
    return lower


def arith(name, bool_name):
    """+ - *: bool as | & ^ (NumPy's bool arithmetic)."""
    def lower(n, a, b):
        return f"{bool_name if n.in_dtype == D.BOOL else name}({a}, {b})"
    lower.arithmetic = True
    return lower


def divmod_(kind):
    """// and %: integer division by zero gives 0, a float remainder has the
    divisor's sign, as NumPy."""
    def lower(n, a, b):
        if n.dtype in D.FLOATING:
            return f"lzj.float_{kind}({a}, {b})"
        return f"lzj.int_{kind}({a}, {b})"
    lower.arithmetic = True
    return lower


def float_only(name):
    """A function of floats (exp, tanh...): the recorder already cast ints."""
    def lower(n, *args):
        if n.in_dtype not in D.FLOATING:
            raise EmitError(f"of {D.NAMES[n.in_dtype]} (a float op)")
        return f"{name}({', '.join(args)})"
    lower.arithmetic = True
    return lower


def int_identity(name):
    """floor/ceil/round: the identity on ints and bool, as NumPy."""
    def lower(n, a):
        return f"{name}({a})" if n.in_dtype in D.FLOATING else a
    lower.arithmetic = True
    return lower


def reciprocal(n, a):
    """1 / x; for ints truncated, and 0 for x == 0 (lazyrt's integer division)."""
    return f"jnp.reciprocal({a})" if n.dtype in D.FLOATING else f"lzj.int_reciprocal({a})"


reciprocal.arithmetic = True


def logical(name):
    def lower(n, a, b):
        return f"{name}({a} != 0, {b} != 0)"
    return lower


def cast(n, a):
    """astype: to bool is ``!= 0``; to float16 or bfloat16 rounds once, from the source
    (ints to bfloat16 through float64: exact below 2^53, where XLA's float32 is not)."""
    if n.dtype == D.BOOL:
        return f"({a} != 0)"
    if n.in_dtype == D.BOOL:
        return f"lzj.from_bool({a}, {_jt(n.dtype)})"
    if n.dtype == D.FLOAT16 and n.in_dtype == D.FLOAT64:
        return f"lzj.f64_to_f16({a})"
    if n.dtype == D.BFLOAT16 and n.in_dtype in (D.FLOAT64, D.INT32, D.INT64):
        return f"lzj.f64_to_bf16({a}.astype(jnp.float64))"
    if n.dtype in (D.INT8, D.UINT8) and n.in_dtype in D.FLOATING:
        # XLA saturates an out-of-range float; C (and NumPy) convert through a
        # wide int and keep the low bits: -1.0 -> uint8 255, 300.0 -> 44
        return f"{a}.astype(jnp.int64).astype({_jt(n.dtype)})"
    return f"{a}.astype({_jt(n.dtype)})"


def select(n, c, a, b):
    return f"jnp.where({c}, {a}, {b})"


# --- reductions: attrs = (axes, keepdims) -----------------------------------

def accumulate(name):
    """sum/prod in the op table's accumulator dtype (``n.attrs[2]``, set by the emitter)."""
    def lower(n, a):
        axes, keepdims, acc = n.attrs
        return f"lzj.accumulate({name}, {a}, {tuple(axes)!r}, {keepdims}, {_jt(acc)}, " \
               f"{_jt(n.dtype)})"
    return lower


def reduce(name):
    def lower(n, a):
        axes, keepdims = n.attrs[:2]
        return f"{name}({a}, axis={tuple(axes)!r}, keepdims={keepdims})"
    return lower


def arg(name):
    def lower(n, a):
        axes, keepdims = n.attrs[:2]
        return f"lzj.arg({name}, {a}, {tuple(axes)!r}, {keepdims})"
    return lower


# --- views, matmul, movement -------------------------------------------------

def reshape(n, a):
    return f"{a}.reshape({tuple(n.attrs[0])!r})"


def permute(n, a):
    return f"jnp.transpose({a}, {tuple(n.attrs[0])!r})"


def expand(n, a):
    return f"jnp.broadcast_to({a}, {tuple(n.attrs[0])!r})"


def index_text(spec) -> str:
    """Python index text for a normalized ((start, step, length), ...) slice spec."""
    parts = []
    for start, step, length in spec:
        stop = start + step * length
        parts.append(f"{start}:{stop if stop >= 0 else ''}:{step}")
    return ", ".join(parts)


def slice_(n, a):
    return f"{a}[{index_text(n.attrs[0])}]" if n.attrs[0] else a


def matmul(n, a, b):
    # HIGHEST: float32 products in float32 on every device (TPUs default to bfloat16 passes)
    return f"jnp.matmul({a}, {b}, precision=lax.Precision.HIGHEST)"


def concat(n, *args):
    return f"jnp.concatenate([{', '.join(args)}], axis={n.attrs[0]})"


def setslice(n, base, value):
    if not n.attrs[0]:
        return value
    return f"{base}.at[{index_text(n.attrs[0])}].set({value})"


# --- opaque indexed reads, sorting and searching (attrs as in lazyrt/ops.py) ---

def sort(n, a):
    axis, descending = n.attrs
    return f"jnp.sort({a}, axis={axis}, stable=True, descending={descending})"


def argsort(n, a):
    axis, descending = n.attrs
    return f"jnp.argsort({a}, axis={axis}, stable=True, descending={descending})" \
           f".astype(jnp.int64)"


def searchsorted(n, a, v):
    return f"jnp.searchsorted({a}, {v}, side={n.attrs[0]!r}).astype(jnp.int64)"


# --- scans (cumsum, cumprod): attrs = (axis, include_initial, accumulator, identity) ---

def scan(name):
    """``name`` (jnp.cumsum or jnp.cumprod) along one axis in the op table's
    accumulator dtype (``n.attrs[2]``, set by the emitter), rounded to the
    result dtype; include_initial puts the op table's identity (``n.attrs[3]``) first."""
    def lower(n, a):
        axis, include_initial, acc, identity = n.attrs
        out = f"{name}({a}.astype({_jt(acc)}), axis={axis}).astype({_jt(n.dtype)})"
        if not include_initial:
            return out
        first = tuple(1 if k == axis else d for k, d in enumerate(n.shape))
        return (f"jnp.concatenate([jnp.full({first!r}, {literal(identity)}, "
                f"{_jt(n.dtype)}), {out}], axis={axis})")
    return lower


# --- gather and scatter_add (attrs as in lazyrt/ops.py) -----------------------------

def gather(n, src, indices):
    """take_along_axis; an index out of range raises at run time (``lzj.gather``)."""
    axis, negative = n.attrs
    return f"lzj.gather({src}, {indices}, {axis}, {negative})"


def scatter_add(n, values, indices):
    """np.add.at into zeros, float16 summed in float32 (``lzj.scatter_add``)."""
    axis, size, negative = n.attrs
    return f"lzj.scatter_add({values}, {indices}, {axis}, {size}, {negative})"
