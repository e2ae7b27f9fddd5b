"""Counter-based random numbers: ``lr.random.uniform``, ``normal``, ``integers`` and
dropout masks.

Every value is a pure function of ``(seed, offset, element)``: Philox4x32-10
(the op table's ``philox``, see :mod:`lazyrt.ops`) gives one stream of 32-bit
words per seed, and a draw of ``n`` elements reads the words from ``offset`` on.
Nothing is stateful, so a value is the same on every backend, bit for bit, and
in any kernel it is fused into (dropout is one kernel with its consumers).

``seed`` and ``offset`` are runtime scalars (Python ints or 0-d integer
tensors): a new seed or offset every step changes the values, never the
compiled program. Advance ``offset`` by :func:`words` after each draw so no two
draws under one seed share a word; rounding up to a multiple of 4 (one Philox
block, as torch advances its offsets) is also fine.

The layout, which every backend computes exactly:

* Word ``p`` of seed ``s``'s stream is output ``p & 3`` of the Philox4x32-10
  block with counter ``(b & 0xffffffff, b >> 32, 0, 0)``, ``b = p >> 2``, under
  key ``(s & 0xffffffff, s >> 32)`` (``s`` taken mod 2^64, ``p`` as uint64).
* Elements are numbered in row-major (C) order of ``shape``: element ``i`` of
  a float32 draw is word ``w = offset + i`` made ``(w >> 8) * 2^-24``, a
  multiple of 2^-24 in [0, 1); element ``i`` of a float64 draw reads words
  ``a = offset + 2i`` and ``b = a + 1`` and is ``((a >> 5) * 2^26 + (b >> 6)) * 2^-53``,
  a multiple of 2^-53 in [0, 1).
* Element ``i`` of an integer draw reads words ``a = offset + 2i`` and
  ``b = a + 1``, makes the 63-bit ``r = (a >> 1) * 2^32 + b`` and is
  ``low + r mod (high - low)``.

>>> import lazyrt as lr
>>> u = lr.random.uniform((2, 3), seed=7, offset=0)
>>> nxt = lr.random.words((2, 3))       # the next draw starts at offset 6
>>> v = lr.random.uniform((2, 3), seed=7, offset=nxt)
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import _recorder as R
from .. import _recorder_pointwise as PW
from .. import dtypes as D
from .. import ops
from . import pointwise as P
from .operands import check_probability, data_leaf, normalize_shape

#: words of the stream one element of each dtype reads (an integer draw: 2, any dtype)
_WORDS_PER_ELEMENT = {D.FLOAT32: 1, D.FLOAT64: 2}
_INTEGER_WORDS = 2
#: an integer draw's span (high - low) is at most this: r has 63 bits
MAX_SPAN = 2**63
#: draws with fewer words than this sum their element positions in int32
NARROW_POSITIONS = 2**31


def _float_dtype(dtype, fn) -> int:
    code = D.code_of(dtype)
    if code not in _WORDS_PER_ELEMENT:
        raise TypeError(f"lazyrt.random.{fn}: dtype must be float32 or float64, not "
                        f"{D.NAMES[code]}")
    return code


def words(shape, dtype="float32", *, normal=False) -> int:
    """How many stream words a draw of ``shape`` reads: advance ``offset`` by this
    (``n`` for float32, ``2n`` for float64, twice that for :func:`normal`, ``2n``
    for :func:`integers` of any dtype)."""
    shape = normalize_shape(shape, "random.words")
    if not normal and D.code_of(dtype) not in _WORDS_PER_ELEMENT:
        return math.prod(shape) * _INTEGER_WORDS
    fn = "normal" if normal else "uniform"
    n = math.prod(shape) * _WORDS_PER_ELEMENT[_float_dtype(dtype, fn)]
    return 2 * n if normal else n


def _counter(value, name, fn):
    """``seed``/``offset`` as what the philox op takes: an int64 Python int (a
    runtime scalar) or a 0-d int64 tensor."""
    if isinstance(value, R.TensorBase):
        if value.ndim != 0 or D.code_of(value.dtype) not in (D.INT8, D.UINT8, D.INT32,
                                                                  D.INT64):
            raise TypeError(f"lazyrt.random.{fn}: {name} must be a Python int or a 0-d "
                            f"integer tensor, not a {value.dtype} tensor of shape "
                            f"{value.shape}")
        return value.astype(D.DTYPES[D.INT64])
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"lazyrt.random.{fn}: {name} must be a Python int or a 0-d integer "
                        f"tensor, not {type(value).__name__}")
    value = int(value)
    if name == "seed":  # the key is the seed mod 2^64; int64 holds it two's complement
        if not -2**63 <= value < 2**64:
            raise ValueError(f"lazyrt.random.{fn}: seed {value} is outside [-2^63, 2^64)")
        return value - 2**64 if value >= 2**63 else value
    if not 0 <= value < 2**62:
        raise ValueError(f"lazyrt.random.{fn}: offset {value} is outside [0, 2^62)")
    return value


@functools.lru_cache(maxsize=256)
def _axis_index(ndim: int, axis: int, size: int, step: int, narrow: bool):
    """``arange(size) * step`` laid along ``axis`` of an ``ndim``-d shape (size 1
    elsewhere): a small data leaf, shared by every draw of that shape; int32 when
    ``narrow`` (fewer bytes to read), else int64."""
    shape = (1,) * axis + (size,) + (1,) * (ndim - axis - 1)
    values = np.arange(size, dtype=np.int64) * step
    return data_leaf(values.astype(np.int32 if narrow else np.int64).reshape(shape))


@functools.lru_cache(maxsize=16)
def _zero_index(ndim: int):
    return data_leaf(np.zeros((1,) * ndim, np.int64))


def _positions(shape, offset, per_element):
    """Stream positions ``offset + per_element * i`` of the elements of ``shape``,
    built from one small index leaf per axis (broadcast, so they fuse into the
    consumer: no full-size index array unless the shape is 1-d), summed in int32
    where every position relative to ``offset`` fits, then widened to int64."""
    narrow = math.prod(shape) * per_element < NARROW_POSITIONS
    index, stride = None, per_element
    for axis in reversed(range(len(shape))):
        if shape[axis] != 1:
            term = _axis_index(len(shape), axis, shape[axis], stride, narrow)
            index = term if index is None else term + index
        stride *= shape[axis]
    if index is None:  # 0-d, or all sizes 1: one element, at position offset
        index = _zero_index(len(shape))
    elif narrow:
        index = P.astype(index, D.DTYPES[D.INT64])
    return index + offset


def _word(seed, position):
    return PW.binary(ops.PHILOX.id, seed, position)


def _by_const(op, x, value):
    """``x op value`` with ``value`` baked into the program (the same for every
    draw): a constant shift lets the C compiler vectorize the element loop."""
    node = x._node
    const = R.scalar_node(value, node.dtype, True)
    return R.wrap(R.record(op.id, node.dtype, node.shape, (node, const), None))


def uniform(shape, *, seed, offset=0, dtype="float32"):
    """Uniform values in [0, 1) of ``shape``: float32 multiples of 2^-24, float64
    multiples of 2^-53, from seed's Philox4x32-10 stream starting at word ``offset``
    (layout in the module docstring; the same bits on every backend).

    ``seed`` (any int in [-2^63, 2^64), taken mod 2^64) and ``offset`` (in
    [0, 2^62)) may be Python ints or 0-d integer tensors; neither is part of the
    compiled program. Advance ``offset`` by ``words(shape, dtype)`` for the next
    draw (or by that rounded up to 4)."""
    shape = normalize_shape(shape, "random.uniform")
    code = _float_dtype(dtype, "uniform")
    seed = _counter(seed, "seed", "uniform")
    offset = _counter(offset, "offset", "uniform")
    pos = _positions(shape, offset, _WORDS_PER_ELEMENT[code])
    if code == D.FLOAT32:
        bits = _by_const(ops.RSHIFT, _word(seed, pos), 8)
        return _by_const(ops.MUL, P.astype(bits, D.DTYPES[code]), 2.0 ** -24)
    high = _by_const(ops.RSHIFT, _word(seed, pos), 5)
    low = _by_const(ops.RSHIFT, _word(seed, _by_const(ops.ADD, pos, 1)), 6)
    bits = _by_const(ops.LSHIFT, high, 26) + low
    return _by_const(ops.MUL, P.astype(bits, D.DTYPES[code]), 2.0 ** -53)


def normal(shape, *, seed, offset=0, dtype="float32"):
    """Standard normal values of ``shape`` by Box–Muller on two uniform draws:
    ``u1 = uniform(shape, offset)``, ``u2 = uniform(shape, offset + words(shape))``,
    ``z = sqrt(-2 log(1 - u1)) * cos(2 pi u2)`` (``1 - u1`` is in (0, 1]: never
    log 0), computed in ``dtype``.

    Reads ``words(shape, dtype, normal=True)`` words. The uniforms are the same
    bits everywhere; ``log`` and ``cos`` are each backend's, so values agree
    across backends to a few units in the last place, not bit for bit."""
    shape = normalize_shape(shape, "random.normal")
    code = _float_dtype(dtype, "normal")
    seed = _counter(seed, "seed", "normal")
    offset = _counter(offset, "offset", "normal")
    half = words(shape, D.DTYPES[code])
    if isinstance(offset, R.TensorBase):
        second = offset + half
    else:
        second = _counter(offset + half, "offset", "normal")
    u1 = uniform(shape, seed=seed, offset=offset, dtype=D.DTYPES[code])
    u2 = uniform(shape, seed=seed, offset=second, dtype=D.DTYPES[code])
    return P.sqrt(-2.0 * P.log(1.0 - u1)) * P.cos((2.0 * math.pi) * u2)


def integers(shape, low, high, *, seed, offset=0, dtype="int64"):
    """Integers uniform in [``low``, ``high``) of ``shape``, in ``dtype`` (any
    numeric dtype or bool: torch's ``randint`` and ``random_`` give floats too).

    Element ``i`` is ``low + r mod (high - low)`` with ``r`` a uniform 63-bit
    integer from words ``offset + 2i`` and ``offset + 2i + 1`` (module docstring).
    A power-of-two span is exactly uniform; any other span ``n`` favours some
    values by at most ``n / 2^63`` of their probability (below 2^-31 for every
    span up to 2^32). ``low`` and ``high`` are Python ints with
    ``0 < high - low <= 2^63`` and are runtime scalars, as ``seed`` and ``offset``
    are: new bounds reuse the compiled program (a span of exactly 2^63 has one
    program of its own). Reads ``words(shape, dtype)``
    words. The result is computed in int64 and cast to ``dtype``; an integer
    ``dtype`` must hold ``low`` and ``high - 1``."""
    shape = normalize_shape(shape, "random.integers")
    code = D.code_of(dtype)
    for name, bound in (("low", low), ("high", high)):
        if isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, np.integer)):
            raise TypeError(f"lazyrt.random.integers: {name} must be a Python int, not "
                            f"{type(bound).__name__}")
    low, high = int(low), int(high)
    if not 0 < high - low <= MAX_SPAN or not -2**63 <= low < high <= 2**63:
        raise ValueError(f"lazyrt.random.integers: needs low < high, both in [-2^63, 2^63], "
                         f"and high - low <= 2^63; got low={low}, high={high}")
    if D.DTYPES[code].kind in "iub":
        info = (0, 1) if code == D.BOOL else np.iinfo(D.DTYPES[code])
        lo, hi = (info[0], info[1]) if code == D.BOOL else (int(info.min), int(info.max))
        if low < lo or high - 1 > hi:
            raise ValueError(f"lazyrt.random.integers: [{low}, {high}) does not fit in "
                             f"{D.NAMES[code]} ([{lo}, {hi + 1}))")
    seed = _counter(seed, "seed", "integers")
    offset = _counter(offset, "offset", "integers")
    pos = _positions(shape, offset, _INTEGER_WORDS)
    a = _by_const(ops.RSHIFT, _word(seed, pos), 1)
    b = _word(seed, _by_const(ops.ADD, pos, 1))
    r = _by_const(ops.LSHIFT, a, 32) + b
    if high - low < MAX_SPAN:  # a span of exactly 2^63 is r itself (one more program)
        r = r % (high - low)
    r = r + low
    return r if code == D.INT64 else P.astype(r, D.DTYPES[code])


def dropout_mask(shape, p, *, seed, offset=0):
    """The keep mask of dropout with drop probability ``p``: ``uniform(shape,
    seed=seed, offset=offset) >= p`` (float32 uniforms: ``p`` is compared as a
    float32). Reads ``words(shape)`` words. Recomputing it with the same seed and
    offset gives the same mask (dropout's backward needs no saved mask)."""
    check_probability(p, "dropout_mask")
    return uniform(shape, seed=seed, offset=offset) >= float(p)

