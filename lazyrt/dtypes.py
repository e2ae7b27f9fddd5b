"""The dtypes lazyrt knows, and the type-promotion rule it follows.

The rule is NumPy 2's (NEP 50), taken from NumPy itself rather than
re-typed: for every pointwise op we ask the op's NumPy ufunc which inner loop
it would pick (``ufunc.resolve_dtypes``) for each pair of lazyrt dtypes and
for each kind of Python scalar operand. Python scalars are *weak*: they take
the array's dtype when their kind fits (``int8_array + 1`` is int8,
``float32_array * 2.5`` is float32, ``int_array * 0.5`` is float64).

bfloat16 is ``ml_dtypes``' NumPy dtype, whose ufunc loops and casts define its
rules the same way (bfloat16 with float16 gives float32, as in JAX and torch;
with int32 or int64 float64; weak Python scalars take bfloat16).

The result is a table the recorder reads with two integer lookups per op.
lazyrt has no uint64/int16/uint16/complex: where NumPy would produce one of
those (``np.sum`` of uint8 gives uint64) lazyrt uses int64 and says so in the
op's docstring.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DTypeError

#: dtype codes; the code is the index. The first eight are in NumPy's
#: promotion-lattice order; bfloat16 (beside float16, not above or below it) comes
#: last so that the codes of the others, which kernels and caches hold, stay put.
DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(n)
    for n in ("bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64",
              ml_dtypes.bfloat16)
)
BOOL, INT8, UINT8, INT32, INT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(len(DTYPES))
NDTYPES = len(DTYPES)
CODE: dict[np.dtype, int] = {dt: i for i, dt in enumerate(DTYPES)}
NAMES: tuple[str, ...] = tuple(dt.name for dt in DTYPES)

bool_, int8, uint8, int32, int64, float16, float32, float64, bfloat16 = DTYPES

FLOATING = frozenset({FLOAT16, FLOAT32, FLOAT64, BFLOAT16})
#: 16-bit floats: stored in 16 bits, computed in float32, rounded once per op
#: (as NumPy's float16 loops and ml_dtypes' bfloat16 loops do)
REDUCED_FLOATS = frozenset({FLOAT16, BFLOAT16})
INTEGRAL = frozenset({INT8, UINT8, INT32, INT64})

#: Python scalar kinds, as operands of an op (index into the scalar tables).
SCALAR_BOOL, SCALAR_INT, SCALAR_FLOAT = 0, 1, 2
_SCALAR_TYPES = (bool, int, float)


def code_of(dtype) -> int:
    """The lazyrt dtype code of anything NumPy accepts as a dtype.

    >>> code_of("float32") == FLOAT32
    True
    """
    if isinstance(dtype, int) and not isinstance(dtype, bool) and 0 <= dtype < NDTYPES:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise DTypeError(f"lazyrt: {dtype!r} is not a dtype") from exc
    if dt not in CODE:
        narrowed = _NARROW.get(dt.kind, {}).get(dt.itemsize)
        if narrowed is None:
            raise DTypeError(
                f"lazyrt: dtype {dt} is not supported; use one of {', '.join(NAMES)}"
            )
        return narrowed
    return CODE[dt]


# Input dtypes lazyrt narrows on the way in (NumPy's int16 etc.): widened to
# the smallest supported dtype that holds every value exactly.
_NARROW = {
    "i": {2: INT32},
    "u": {2: INT32, 4: INT64},
    "b": {},
    "f": {},
}


def _lazyrt_code(dt) -> int:
    """Map a NumPy-resolved dtype to lazyrt's, or -1 where lazyrt has none."""
    dt = np.dtype(dt)
    if dt in CODE:
        return CODE[dt]
    if dt.kind == "u" and dt.itemsize == 8:
        return INT64  # documented deviation: uint64 results become int64
    if dt.kind == "i" and dt.itemsize == 2:
        return INT32  # int8 with uint8 computes in int16 in NumPy: widened, values equal
    return -1


def resolve_binary(ufunc: np.ufunc, a, b) -> tuple[int, int]:
    """(computation dtype, result dtype) NumPy picks for ``ufunc(a, b)``.

    ``a`` and ``b`` are dtype codes or Python scalar types. -1 means NumPy has
    no loop for that combination (the op is rejected at record time).
    """
    # NumPy's resolver takes int/float as weak scalar kinds but not bool; a
    # Python bool promotes exactly as a bool array does (bool is the lattice bottom)
    ta = DTYPES[a] if isinstance(a, int) else DTYPES[BOOL] if a is bool else a
    tb = DTYPES[b] if isinstance(b, int) else DTYPES[BOOL] if b is bool else b
    try:
        in_a, in_b, out = ufunc.resolve_dtypes((ta, tb, None))
    except (TypeError, ValueError, np.exceptions.DTypePromotionError):
        return -1, -1
    ca, cb = _lazyrt_code(in_a), _lazyrt_code(in_b)
    if ca != cb:
        # Mixed-type loops (ldexp and the like) are not lazyrt ops.
        return -1, -1
    return ca, _lazyrt_code(out)


def resolve_unary(ufunc: np.ufunc, a: int) -> tuple[int, int]:
    """(computation dtype, result dtype) NumPy picks for ``ufunc(a)``."""
    try:
        in_a, out = ufunc.resolve_dtypes((DTYPES[a], None))
    except (TypeError, ValueError, np.exceptions.DTypePromotionError):
        return -1, -1
    return _lazyrt_code(in_a), _lazyrt_code(out)


def binary_table(ufunc: np.ufunc) -> tuple[list[list[tuple[int, int]]], list[list[tuple[int, int]]]]:
    """Tables for a binary ufunc: ``array[a][b]`` and ``scalar[a][kind]``.

    ``scalar[a][kind]`` is for an array of dtype ``a`` with a Python scalar
    of the given kind on either side (NEP 50 makes it symmetric).
    """
    arrays = [[resolve_binary(ufunc, a, b) for b in range(NDTYPES)] for a in range(NDTYPES)]
    scalars = [[resolve_binary(ufunc, a, t) for t in _SCALAR_TYPES] for a in range(NDTYPES)]
    return arrays, scalars


def unary_table(ufunc: np.ufunc) -> list[tuple[int, int]]:
    return [resolve_unary(ufunc, a) for a in range(NDTYPES)]


def resolve_matmul(a: int, b: int) -> tuple[int, int]:
    """(computation dtype, result dtype) of ``a @ b``: NumPy's, except that operands
    promoting to bfloat16 give bfloat16 (NumPy has no bfloat16 matmul loop and would
    give float32; lazyrt, as torch and JAX, accumulates in float32 and rounds once)."""
    if promote(a, b) == BFLOAT16:
        return BFLOAT16, BFLOAT16
    return resolve_binary(np.matmul, a, b)


def promote(*codes: int) -> int:
    """NumPy's result_type of lazyrt dtypes, taken all at once as NumPy does
    (it is not associative: int8, uint8, float16 gives float16)."""
    return _lazyrt_code(np.result_type(*(DTYPES[c] for c in codes)))  # int8, uint8: int32


def scalar_kind(value) -> int:
    if isinstance(value, (bool, np.bool_)):
        return SCALAR_BOOL
    if isinstance(value, (int, np.integer)):
        return SCALAR_INT
    if isinstance(value, (float, np.floating)):
        return SCALAR_FLOAT
    raise TypeError(f"lazyrt: {type(value).__name__} is not a real number")


def default_dtype_of_scalar(value) -> int:
    """The dtype of a bare Python scalar turned into a tensor (``lr.tensor(3)``)."""
    return (BOOL, INT64, FLOAT64)[scalar_kind(value)]


def accumulator(code: int) -> int:
    """The dtype NumPy sums in: ints and bool widen to int64; floats keep theirs."""
    return INT64 if code in INTEGRAL or code == BOOL else code


def float_of(code: int) -> int:
    """The float dtype NumPy computes ``mean``/``var`` in for this input."""
    return code if code in FLOATING else FLOAT64


def can_cast_same_kind(src: int, dst: int) -> bool:
    return bool(np.can_cast(DTYPES[src], DTYPES[dst], casting="same_kind"))
