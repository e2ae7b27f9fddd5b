"""Eager torch's float32 formulas for float16 ops, where its CPU kernel is more
than "each primitive in float32, rounded once at the end".

Most float16 lowerings need only :func:`.operands.up` and :func:`.operands.down`.
Two kinds of eager kernels need more, since a float16 rounding can expose a
float32 difference of one bit:

- multiply-adds that eager's vectorized kernels compile to FMA instructions,
  one rounding for ``a * b + c`` (``lerp``, ``addcmul``, ``add`` and ``sub``
  with ``alpha``): :func:`fused_multiply_add`;
- ``F.gelu``'s erf, which eager's vectorized kernel computes with Abramowitz
  and Stegun's 7.1.26 polynomial (absolute error up to 1.5e-7): ``1 + erf(x)``
  for x below -2 amplifies that past a float16 rounding, so the float16 gelu
  follows the same polynomial (:func:`vectorized_erf`).

Measured against eager CPU torch 2.13 (AVX-512 kernels): bit-equal on 10,000
random float16 values each (``tests/test_torch_half.py``).
"""
from __future__ import annotations

from .. import dtypes as D
from ..api import pointwise as P
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
    tail = P.negative(P.exp(P.negative(x * x))) * t
    return P.copysign(fused_multiply_add(tail, r, one), x)
