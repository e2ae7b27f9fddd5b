"""Activation backwards (``tanh_backward``, ``sigmoid_backward``,
``silu_backward``), with float16 rounded as eager's CPU kernels round it: tanh's
and silu's in float32 rounded once (silu's ``1 + x * (1 - s)`` fused), sigmoid's
in float16 arithmetic, each multiply rounded (its kernel computes in float16).

``silu_backward`` has CPU and CUDA kernels and, for other devices, a composite
(float16 arithmetic op by op) that torch would run above the lazy device;
:func:`install` registers a kernel on the ``Lazy`` key, so the op reaches the
lazy dispatcher whole and its lowering here."""
from __future__ import annotations

import torch

from ..operands import down, opmath, up, value
from ..opmath import correctly_rounded, fused_multiply_add
from ..registry import register_lowering
from ...api import pointwise as P
from ..tensor import runtime_scalar

aten = torch.ops.aten


@register_lowering(aten.tanh_backward.default)
def _tanh_backward(grad, out):
    g, y = up(value(grad)), up(value(out))
    return down(g * (runtime_scalar(1, y._node.dtype) - y * y), value(grad)._node.dtype)


@register_lowering(aten.sigmoid_backward.default)
def _sigmoid_backward(grad, out):
    g, y = value(grad), value(out)
    return g * (runtime_scalar(1, y._node.dtype) - y) * y


@register_lowering(aten.silu_backward.default, keep_decomposition=True)
def _silu_backward(grad, x):
    """float16 only (float32 and float64 take torch's decomposition): eager's
    ``dy * s * (1 + x * (1 - s))`` with ``s = 1 / (1 + exp(-x))``."""
    dy, v = value(grad), value(x)
    code = v._node.dtype
    if opmath(code) == code:
        return NotImplemented
    xf = up(v)
    one = runtime_scalar(1.0, xf._node.dtype)
    s = one / (one + correctly_rounded(P.exp)(P.negative(xf)))
    return down(up(dy) * s * fused_multiply_add(xf, one - s, one), code)




#: ops eager runs as one CPU kernel that torch would otherwise decompose, in
#: their own dtype, before the lazy device sees them
KEPT_WHOLE = ("silu_backward",)
_lib = None


def _unreachable(name):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"lazyrt.torch: aten.{name} reached torch's Lazy kernel, not "
                           f"lazyrt's dispatcher (a tensor that is not a lazyrt tensor?)")
    return kernel


def install():
    """Register the ``Lazy``-key kernels of :data:`KEPT_WHOLE` (once per process)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        for name in KEPT_WHOLE:
            _lib.impl(name, _unreachable(name), "Lazy")
