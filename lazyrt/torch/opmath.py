"""Eager torch's float32 formulas for float16 ops, where its CPU kernel is more
than "each primitive in float32, rounded once at the end".

Most float16 lowerings need only :func:`.operands.up` and :func:`.operands.down`.
Two kinds of eager kernels need more, since a float16 rounding can expose a
float32 difference of one bit:

- multiply-adds that eager's vectorized kernels compile to FMA instructions,
  one rounding for ``a * b + c`` (``lerp``, ``addcmul``, ``add`` and ``sub``
  with ``alpha``): :func:`fused_multiply_add`;
- ``erf``, which eager computes with Abramowitz and Stegun's 7.1.26 polynomial
  (absolute error up to 1.5e-7, more than a float16 rounding hides near 0 and,
  through ``1 + erf(x)``, in ``F.gelu`` below -2): :func:`vectorized_erf`;
- ``prod`` of fewer than 64 float16 values, which eager multiplies one by one
  in float16 (:func:`float16_product`);
- kernels whose vectorized loop and its scalar remainder round differently
  (``add`` with ``alpha``, ``rsqrt``, ``gelu``): eager's result depends on where
  an element falls in the loop, which :func:`scalar_remainder` reproduces for
  contiguous tensors.

Measured against eager CPU torch 2.13 (AVX-512 kernels): bit-equal on every
finite float16 value, or on 10,000 random ones (``tests/test_torch_half.py``).
Not followed: torch's oneDNN gelu, which eager takes instead of its own kernel
for a contiguous float16 tensor where the CPU has AVX-512 FP16 (oneDNN's
piecewise erf differs by a float16 ulp below -2; ``torch.backends.mkldnn.flags
(enabled=False)`` turns it off), and the last bit of ``tanh``, ``sin``... where
eager's SLEEF functions are not correctly rounded.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .. import dtypes as D
from ..api import creation as C
from ..api import manipulation as M
from ..api import pointwise as P
from .. import _recorder_shapes as S
from .tensor import runtime_scalar


def fused_multiply_add(a, b, c):
    """``a * b + c`` of float32 values, rounded once as an FMA instruction does:
    the float64 product of two float32 values is exact, so the float64 sum
    rounded to float32 is the fused result (but where the sum itself does not
    fit in float64, far outside the float16 range)."""
    f64 = D.float64
    return P.astype(P.astype(a, f64) * P.astype(b, f64) + P.astype(c, f64), D.float32)


def _f32(number):
    return runtime_scalar(number, D.FLOAT32)


#: Abramowitz and Stegun 7.1.26, as eager's ``Vectorized<float>::erf`` spells them
_P = 0.3275911
_COEFFICIENTS = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)


def vectorized_erf(x):
    """erf of a float32 value as eager's vectorized CPU kernel computes it:
    ``sign(x) * (1 - t * r(t) * exp(-x * x))`` with ``t = 1 / (1 + p |x|)``,
    ``r`` a degree-4 polynomial in Horner form, every multiply-add fused."""
    one = _f32(1.0)
    t = one / fused_multiply_add(_f32(_P), P.abs(x), one)
    r = _f32(_COEFFICIENTS[0])
    for c in _COEFFICIENTS[1:]:
        r = fused_multiply_add(r, t, _f32(c))
    # eager's exp (SLEEF's) is float32's correctly rounded one: float64's, rounded
    e = P.astype(P.exp(P.astype(P.negative(x * x), D.float64)), D.float32)
    return P.copysign(fused_multiply_add(P.negative(e) * t, r, one), x)


#: eager's ``at::internal::GRAIN_SIZE``: an elementwise loop this long or shorter
#: runs on one thread
_GRAIN = 32768
_MASKS: dict = {}


def scalar_remainder(shape, operands, lane=torch.float32):
    """Where eager's float16 loop for an op of result ``shape`` on ``operands``
    takes its scalar code: True, False (everywhere or nowhere), or a boolean
    lazyrt tensor.

    As measured on eager torch 2.13's CPU kernels (``add`` with ``alpha``): the
    loop runs over contiguous runs (:func:`contiguous_run`), a run longer than
    eager's grain split between threads; each piece takes two vectors at a time
    (of ``lane`` elements: float32 for ``add``'s kernel, float16 for
    ``gelu``'s) and leaves the rest, under one step, to the scalar code."""
    shape = tuple(shape)
    width = 64 if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else 32
    step = 2 * width // lane.itemsize
    key = (shape, contiguous_run(shape, operands), step, torch.get_num_threads())
    found = _MASKS.get(key)
    if found is None:
        found = _MASKS[key] = _remainder_mask(math.prod(shape), *key[1:])
    return found if isinstance(found, bool) else C.asarray(found.reshape(shape))


def contiguous_run(shape, operands) -> int:
    """The length of the runs eager's loop takes at once: the trailing axes along
    which no tensor operand broadcasts, or the last axis where one broadcasts
    along it (Python numbers and 0-d tensors are read as scalars)."""
    run = 1
    for axis in range(1, len(shape) + 1):
        size = shape[-axis]
        for x in operands:
            dims = tuple(x.shape) if isinstance(x, torch.Tensor) else ()
            if dims and (len(dims) < axis or dims[-axis] != size):
                return run if axis > 1 else size
        run *= size
    return run


def _remainder_mask(n, run, step, threads):
    if n == 0 or run == 0:
        return False
    pieces = [run]
    if run == n:  # one run: at::parallel_for splits it between threads past the grain
        chunk = -(-n // min(threads, -(-n // _GRAIN)))
        pieces = [min(chunk, n - start) for start in range(0, n, chunk)]
    mask = np.concatenate([np.arange(p) >= p - p % step for p in pieces])
    mask = np.resize(mask, n)
    if mask.all():
        return True
    if not mask.any():
        return False
    mask.flags.writeable = False
    return mask


def correctly_rounded(fn):
    """``fn`` of a float32 value, correctly rounded to float32 (float64's, rounded):
    eager's float16 ``exp``, ``log``, ``tanh``... are its float32 functions rounded,
    and those are correctly rounded far more often than lazyrt's float32 ones."""
    def wide(*args):
        return P.astype(fn(*(P.astype(x, D.float64) for x in args)), D.float32)
    return wide


def vectorized_sigmoid(x):
    """eager's float32 sigmoid, ``1 / (1 + exp(-x))``, its exp correctly rounded."""
    one = _f32(1.0)
    return one / (one + correctly_rounded(P.exp)(P.negative(x)))


#: eager multiplies a float16 product of fewer values one by one, each rounded
SEQUENTIAL_PRODUCT = 64


def float16_product(x, axes, keepdims):
    """The product of float16 ``x`` over ``axes`` (None: all) as eager's kernel
    takes it when they hold fewer than :data:`SEQUENTIAL_PRODUCT` values: one
    multiply at a time in index order, each rounded to float16. None where they
    hold more (eager's vectorized order then)."""
    axes = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    kept = tuple(a for a in range(x.ndim) if a not in axes)
    n = math.prod(x.shape[a] for a in axes)
    if not 0 < n < SEQUENTIAL_PRODUCT:
        return None
    rows = M.reshape(M.permute_dims(x, kept + axes), tuple(x.shape[a] for a in kept) + (n,))
    out = rows[..., 0]
    for k in range(1, n):
        out = out * rows[..., k]  # float16 * float16: rounded to float16
    if keepdims:
        out = M.reshape(out, tuple(1 if a in axes else x.shape[a] for a in range(x.ndim)))
    return P.astype(out, x.dtype)


def add_scaled(a, b, x, y, scale, out):
    """float16 ``x + scale * y`` as eager's kernel computes it: a float32 FMA in
    its vectorized loop, float16 arithmetic (``scale * y`` rounded first) in the
    loop's scalar remainder."""
    fused = P.astype(fused_multiply_add(y, scale, x), D.DTYPES[out])
    shape = torch.broadcast_shapes(*(tuple(t.shape) for t in (a, b)
                                     if isinstance(t, torch.Tensor)))
    tail = scalar_remainder(shape, (a, b))
    if tail is False:
        return fused
    plain = P.astype(x + P.astype(P.astype(y * scale, D.DTYPES[out]), D.float32),
                      D.DTYPES[out])
    return plain if tail is True else S.where(tail, plain, fused)


def vectorized_rsqrt(x, out):
    """rsqrt: eager's float16 vector loop rounds ``1 / sqrt(x)`` once, its scalar
    remainder rounds ``sqrt(x)`` to float16 first."""
    one = _f32(1.0)
    vector = correctly_rounded(P.rsqrt)(x)
    tail = scalar_remainder(x.shape, (), torch.float16)
    if tail is False:
        return vector
    scalar = one / P.astype(P.astype(P.sqrt(x), D.DTYPES[out]), D.float32)
    return scalar if tail is True else S.where(tail, scalar, vector)
