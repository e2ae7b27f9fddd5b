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
  VIEW       reshape / permute / expand / slice: no arithmetic, only indexing
  MATMUL     ``np.matmul`` semantics
  OPAQUE     concat, setslice: movement the planner does not fuse into loops

Dtype rules of pointwise ops come from the NumPy ufunc named in ``like``
(see :mod:`lazyrt.dtypes`). ``cast_inputs`` says whether the recorder casts
inputs to the computation dtype (true for arithmetic; false for ``where``'s
condition, handled by its own rule).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import dtypes as D

LEAF, POINTWISE, REDUCTION, VIEW, MATMUL, OPAQUE = (
    "leaf", "pointwise", "reduction", "view", "matmul", "opaque")


@dataclass(frozen=True)
class OpDef:
    name: str
    id: int
    kind: str
    arity: int                       # -1: variadic
    ref: Callable | None             # ref(*arrays, attrs) -> ndarray
    like: np.ufunc | None = None     # NumPy ufunc whose dtype rule this op follows
    unary_table: list = field(default=None, repr=False, compare=False)
    binary_table: tuple = field(default=None, repr=False, compare=False)
    doc: str = ""


OPS: list[OpDef] = []
BY_NAME: dict[str, OpDef] = {}


def _def(name, kind, arity, ref, like=None, doc=""):
    unary = binary = None
    if kind == POINTWISE and like is not None:
        if arity == 1:
            unary = D.unary_table(like)
        elif arity == 2:
            binary = D.binary_table(like)
    op = OpDef(name, len(OPS), kind, arity, ref, like, unary, binary, doc)
    OPS.append(op)
    BY_NAME[name] = op
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
def _b(name, ufunc, doc=""):
    return _def(name, POINTWISE, 2, _quiet(lambda a, b, attrs: ufunc(a, b)), ufunc, doc)


ADD = _b("add", np.add)
SUB = _b("sub", np.subtract)
MUL = _b("mul", np.multiply)
TRUEDIV = _b("truediv", np.true_divide)
FLOORDIV = _b("floordiv", np.floor_divide,
              "integer division by zero gives 0, as NumPy does (without its warning)")
MOD = _b("mod", np.remainder, "sign of the divisor, as NumPy; x % 0 gives 0 for ints")
POW = _b("pow", np.power)
MAXIMUM = _b("maximum", np.maximum, "NaN propagates, as np.maximum")
MINIMUM = _b("minimum", np.minimum, "NaN propagates, as np.minimum")
EQ = _b("eq", np.equal)
NE = _b("ne", np.not_equal)
LT = _b("lt", np.less)
LE = _b("le", np.less_equal)
GT = _b("gt", np.greater)
GE = _b("ge", np.greater_equal)
BITAND = _b("bitwise_and", np.bitwise_and)
BITOR = _b("bitwise_or", np.bitwise_or)
BITXOR = _b("bitwise_xor", np.bitwise_xor)
LOGICAL_AND = _b("logical_and", np.logical_and)
LOGICAL_OR = _b("logical_or", np.logical_or)

# --- pointwise: unary -----------------------------------------------------
def _u(name, ufunc, like=None, doc=""):
    return _def(name, POINTWISE, 1, _quiet(lambda a, attrs: ufunc(a)), like or ufunc, doc)


def _erf(a):
    try:
        from scipy.special import erf
        return erf(a).astype(a.dtype, copy=False)
    except ImportError:
        out = np.vectorize(math.erf, otypes=[np.float64])(a.astype(np.float64))
        return out.astype(a.dtype, copy=False)


def _rsqrt(a):
    return (np.ones((), a.dtype) / np.sqrt(a)).astype(a.dtype, copy=False)


def _sigmoid(a):
    # 1 / (1 + exp(-x)), computed in float64 so the reference is exact to the dtype
    wide = a.astype(np.float64)
    return (1.0 / (1.0 + np.exp(-wide))).astype(a.dtype)


NEG = _u("neg", np.negative)
ABS = _u("abs", np.absolute)
EXP = _u("exp", np.exp)
LOG = _u("log", np.log)
LOG1P = _u("log1p", np.log1p)
EXPM1 = _u("expm1", np.expm1)
SQRT = _u("sqrt", np.sqrt)
RSQRT = _u("rsqrt", _rsqrt, like=np.sqrt)
SIN = _u("sin", np.sin)
COS = _u("cos", np.cos)
TANH = _u("tanh", np.tanh)
SIGMOID = _u("sigmoid", _sigmoid, like=np.exp)
ERF = _u("erf", _erf, like=np.exp)
FLOOR = _u("floor", np.floor)
CEIL = _u("ceil", np.ceil)
ROUND = _u("round", np.round, like=np.floor, doc="half to even; ints unchanged, as np.round")
ROUND.unary_table[D.BOOL] = (D.FLOAT16, D.FLOAT16)  # np.round(bool) is float16
SIGN = _u("sign", np.sign)
RECIPROCAL = _u("reciprocal", lambda a: np.ones((), a.dtype) / a, like=np.reciprocal)
SQUARE = _u("square", np.square)
ISNAN = _u("isnan", np.isnan)
ISINF = _u("isinf", np.isinf)
ISFINITE = _u("isfinite", np.isfinite)
LOGICAL_NOT = _u("logical_not", np.logical_not)
INVERT = _u("invert", np.invert)
CAST = _def("cast", POINTWISE, 1,
            lambda a, attrs: a.astype(D.DTYPES[attrs[0]]) if a.dtype != D.DTYPES[attrs[0]]
            else a,
            doc="astype: attrs = (dtype code,); C casting rules, as ndarray.astype")
WHERE = _def("where", POINTWISE, 3, lambda c, a, b, attrs: np.where(c, a, b),
             doc="where(cond, a, b): cond is bool, a and b share the result dtype")


# --- reductions: attrs = (axes, keepdims) ---------------------------------
def _r(name, fn, doc=""):
    return _def(name, REDUCTION, 1,
                _quiet(lambda a, attrs: fn(a, axis=attrs[0], keepdims=attrs[1])), doc=doc)


def _sum(a, axis, keepdims):
    return np.sum(a, axis=axis, keepdims=keepdims, dtype=D.DTYPES[D.accumulator(D.CODE[a.dtype])])


def _prod(a, axis, keepdims):
    return np.prod(a, axis=axis, keepdims=keepdims, dtype=D.DTYPES[D.accumulator(D.CODE[a.dtype])])


def _arg(fn):
    def run(a, axis, keepdims):
        # lazyrt reduces over one axis (or all, flattened: axis=None)
        ax = None if len(axis) != 1 else axis[0]
        if ax is None:
            out = fn(a.reshape(-1))
            return np.asarray(out).reshape((1,) * a.ndim if keepdims else ())
        return fn(a, axis=ax, keepdims=keepdims)
    return run


SUM = _r("sum", _sum, "ints and bool sum in int64 (NumPy would give uint64 for uint8)")
PROD = _r("prod", _prod)
MAX = _r("max", np.max, "NaN propagates")
MIN = _r("min", np.min, "NaN propagates")
ARGMAX = _r("argmax", _arg(np.argmax), "first index of the maximum; NaN wins, as NumPy")
ARGMIN = _r("argmin", _arg(np.argmin))
ANY = _r("any", np.any)
ALL = _r("all", np.all)

# --- views: only indexing changes -----------------------------------------
RESHAPE = _def("reshape", VIEW, 1, lambda a, attrs: a.reshape(attrs[0]),
               doc="attrs = (new shape,)")
PERMUTE = _def("permute", VIEW, 1, lambda a, attrs: a.transpose(attrs[0]),
               doc="attrs = (axes permutation,)")
EXPAND = _def("expand", VIEW, 1, lambda a, attrs: np.broadcast_to(a, attrs[0]),
              doc="attrs = (target shape,); same rank, size-1 dims broadcast")
def as_slices(spec) -> tuple:
    """Python slices for a normalized ((start, step, length), ...) spec."""
    out = []
    for start, step, length in spec:
        stop = start + step * length
        out.append(slice(start, stop if stop >= 0 else None, step))
    return tuple(out)


SLICE = _def("slice", VIEW, 1, lambda a, attrs: a[as_slices(attrs[0])],
             doc="attrs = (((start, step, length), ...),): one per axis, normalized")

# --- matmul and opaque movement -------------------------------------------
MATMUL_OP = _def("matmul", MATMUL, 2, lambda a, b, attrs: np.matmul(a, b), like=np.matmul)
CONCAT = _def("concat", OPAQUE, -1,
              lambda *args: np.concatenate(args[:-1], axis=args[-1][0]),
              doc="attrs = (axis,)")


def _setslice(base, value, attrs):
    out = base.copy()
    out[as_slices(attrs[0])] = value
    return out


SETSLICE = _def("setslice", OPAQUE, 2, _setslice,
                doc="base with base[slices] = value; value already has the slice's shape")

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
