"""Softmax, log-softmax and layer norm, forward and backward, as lazyrt ops.

PyTorch's decompositions of these (``torch._decomp``) are correct but re-enter
the dispatcher once per primitive: measured on the benchmark transformer, a
``native_layer_norm_backward`` cost ~0.5 ms of tracing and ``_safe_softmax``
~0.75 ms. Here each is one Python function of lazyrt calls (tens of µs), and
the planner fuses the reductions and their pointwise neighbours as before.

float16 (:data:`.operands.REDUCED_PRECISION`) takes eager's CPU kernels'
roundings: ``log_softmax`` rounds the sum and its log to float16 before the
last subtraction, ``layer_norm`` returns float16 mean and rstd; the backwards go on
to torch's decompositions (float32 inside). Forms
these do not take (0-d or empty inputs) return ``NotImplemented`` and go on to
torch's decompositions, as before.
"""
from __future__ import annotations

import math

import torch

from ... import _recorder_shapes as S
from ... import dtypes as D
from ...api import pointwise as P
from ...api import reductions as RD
from ..operands import down, opmath, up, value
from ..opmath import correctly_rounded, fused_multiply_add
from ..registry import register_lowering
from ..tensor import code_of, runtime_scalar

aten = torch.ops.aten
#: dtypes computed here (float16 keeps eager's float32 accumulation in the decompositions)
_FLOATS = (D.FLOAT32, D.FLOAT64)


def _taken(*xs):
    """Whether every tensor is one of ``_FLOATS``, non-empty and not 0-d."""
    return all(x._node.dtype in _FLOATS and x.ndim and x.size for x in xs)


def _as(x, code):
    return x if x._node.dtype == code else P.astype(x, D.DTYPES[code])


@register_lowering(aten._softmax.default, keep_decomposition=True)
def _softmax(x, dim, half_to_float=False):
    x = value(x)
    if not half_to_float and _reduced(x):
        return _softmax_reduced(x, dim)
    if half_to_float or not _taken(x):
        return NotImplemented
    e = P.exp(x - S.max(x, dim, keepdims=True))
    return e / S.sum(e, dim, keepdims=True)


@register_lowering(aten._log_softmax.default, keep_decomposition=True)
def _log_softmax(x, dim, half_to_float=False):
    x = value(x)
    if not half_to_float and _reduced(x):
        return _log_softmax_reduced(x, dim)
    if half_to_float or not _taken(x):
        return NotImplemented
    shifted = x - S.max(x, dim, keepdims=True)
    return shifted - P.log(S.sum(P.exp(shifted), dim, keepdims=True))


def _softmax_reduced(x, dim):
    """eager's float16 kernel: ``exp(x - max)`` in float32, times ``1 / sum``."""
    e = correctly_rounded(P.exp)(up(x) - up(S.max(x, dim, keepdims=True)))
    total = P.astype(S.sum(e, dim, keepdims=True), D.float32)
    return down(e * (runtime_scalar(1.0, D.FLOAT32) / total), x._node.dtype)


def _reduced(x, empty=False):
    code = x._node.dtype
    return opmath(code) != code and x.ndim and (x.size or empty)


def _log_softmax_reduced(x, dim):
    """eager's float16 kernel: float32 throughout, but along the last axis the sum
    and its log are kept in float16 buffers (each rounded) before
    ``x - max - log(sum)``."""
    code = x._node.dtype
    shifted = up(x) - up(S.max(x, dim, keepdims=True))
    total = S.sum(P.exp(shifted), dim, keepdims=True)
    if dim % x.ndim != x.ndim - 1:  # eager's kernel for another axis keeps float32
        return down(shifted - P.log(total), code)
    return down(shifted - up(down(P.log(up(down(total, code))), code)), code)


@register_lowering(aten._safe_softmax.default, keep_decomposition=True)
def _safe_softmax(x, dim, dtype=None):
    """Softmax, with 0 (not NaN) for a row that is all ``-inf`` (attention's fully
    masked rows)."""
    v = value(x)
    if dtype is not None:
        if code_of(dtype) not in _FLOATS:
            return NotImplemented
        v = _as(v, code_of(dtype))
    if not _taken(v):
        return NotImplemented
    m = S.max(v, dim, keepdims=True)
    dead = m == -math.inf
    e = P.exp(v - S.where(dead, 0.0, m))
    return S.where(dead, 0.0, e / S.sum(e, dim, keepdims=True))


@register_lowering(aten._softmax_backward_data.default, keep_decomposition=True)
def _softmax_backward(grad, out, dim, input_dtype):
    g, y = value(grad), value(out)
    if not _taken(g, y) or code_of(input_dtype) not in _FLOATS:
        return NotImplemented
    gy = g * y
    return _as(gy - y * S.sum(gy, dim, keepdims=True), code_of(input_dtype))


@register_lowering(aten._log_softmax_backward_data.default, keep_decomposition=True)
def _log_softmax_backward(grad, out, dim, input_dtype):
    g, y = value(grad), value(out)
    if not _taken(g, y) or code_of(input_dtype) not in _FLOATS:
        return NotImplemented
    return _as(g - P.exp(y) * S.sum(g, dim, keepdims=True), code_of(input_dtype))


def _norm_axes(x, normalized_shape):
    k = len(normalized_shape)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != tuple(normalized_shape):
        return None
    return tuple(range(x.ndim - k, x.ndim))


@register_lowering(aten.native_layer_norm.default, keep_decomposition=True)
def _layer_norm(x, normalized_shape, weight, bias, eps):
    """(out, mean, rstd), mean and rstd keeping the normalized axes as size 1."""
    v = value(x)
    if _reduced(v, empty=True) and _norm_axes(v, normalized_shape) is not None:
        return _layer_norm_reduced(v, _norm_axes(v, normalized_shape), weight, bias, eps)
    axes = _norm_axes(v, normalized_shape) if _taken(v) else None
    if axes is None:  # a wrong normalized_shape gets eager's error from the decomposition
        return NotImplemented
    mean = RD.mean(v, axes, keepdims=True)
    d = v - mean
    rstd = P.rsqrt(RD.mean(d * d, axes, keepdims=True) + eps)
    out = d * rstd
    if weight is not None:
        out = out * _as(value(weight), v._node.dtype)
    if bias is not None:
        out = out + _as(value(bias), v._node.dtype)
    return out, mean, rstd


def _layer_norm_reduced(v, axes, weight, bias, eps):
    """eager's float16 kernel: moments in float32, ``(x * rstd - mean * rstd) * w + b``
    with its multiply-adds fused, rounded once; mean and rstd returned in float16."""
    code = v._node.dtype
    x = up(v)
    mean = RD.mean(P.astype(x, D.float64), axes, keepdims=True)
    d = P.astype(x, D.float64) - mean
    var = P.astype(RD.mean(d * d, axes, keepdims=True), D.float32)
    one = runtime_scalar(1.0, D.FLOAT32)
    rstd = one / P.sqrt(P.maximum(var, runtime_scalar(0.0, D.FLOAT32))
                        + runtime_scalar(eps, D.FLOAT32))
    mean = P.astype(mean, D.float32)
    shift = P.negative(rstd) * mean
    out = fused_multiply_add(x, rstd, shift)
    if weight is not None:
        w = up(value(weight))
        out = (fused_multiply_add(out, w, up(value(bias))) if bias is not None
               else out * w)
    elif bias is not None:
        out = out + up(value(bias))
    return down(out, code), down(mean, code), down(rstd, code)


@register_lowering(aten.native_layer_norm_backward.default, keep_decomposition=True)
def _layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight, bias, mask):
    g, v = value(grad_out), value(x)
    axes = _norm_axes(v, normalized_shape) if _taken(g, v) else None
    if axes is None:
        return NotImplemented
    mean, rstd = value(mean), value(rstd)
    x_hat = (v - mean) * rstd
    w = None if weight is None else value(weight)
    gw = g if w is None else g * w
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        n = math.prod(v.shape[a] for a in axes)
        grad_input = (rstd * (1.0 / n)) * (
            gw * float(n) - RD.sum(gw, axes, keepdims=True)
            - x_hat * RD.sum(gw * x_hat, axes, keepdims=True))
    batch = tuple(range(axes[0]))
    if mask[1] and w is not None:
        grad_weight = RD.sum(g * x_hat, batch) if batch else g * x_hat
    if mask[2] and bias is not None:
        grad_bias = RD.sum(g, batch) if batch else g
    return grad_input, grad_weight, grad_bias
