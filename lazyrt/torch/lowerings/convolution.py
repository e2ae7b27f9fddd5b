"""Convolutions and pooling (``convolution`` and its backward, max/avg pooling
with their backwards, adaptive average pooling) and resampling (nearest,
nearest-exact, (bi/tri)linear upsampling and their backwards) as lazyrt's
gather-based windows and matmuls (:mod:`lazyrt.api.convolution`,
:mod:`lazyrt.api.upsample`), so a CNN's (or a U-Net's) step stays one graph.
float16 and bfloat16 compute in float32 and round once, as eager's CPU kernels
accumulate."""
from __future__ import annotations

import torch

from ...api import convolution as CV
from ...api import reductions as RD
from ...api import upsample as UP
from ..operands import down, up, value
from ..registry import register_lowering

aten = torch.ops.aten


def _opt(x):
    return None if x is None else up(value(x))


def _padding(padding, nd):
    p = list(padding)
    return p * nd if len(p) == 1 else p


@register_lowering(aten.convolution.default)
def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    v = value(x)
    nd = v.ndim - 2
    xs, w, b = up(v), up(value(weight)), _opt(bias)
    if transposed:
        y = CV.conv_transpose(xs, w, b, stride, _padding(padding, nd), output_padding, groups,
                              dilation)
    else:
        y = CV.conv(xs, w, b, stride, _padding(padding, nd), dilation, groups)
    return down(y, v._node.dtype)


@register_lowering(aten.convolution_backward.default)
def _convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    g, v, w = up(value(grad)), value(x), up(value(weight))
    xs = up(v)
    nd = v.ndim - 2
    pads = _padding(padding, nd)
    code, wcode = v._node.dtype, value(weight)._node.dtype
    gi = gw = gb = None
    if transposed:  # y = input grad of conv(., w): its grads are conv(g, w), the weight grad
        if output_mask[0]:
            gi = down(CV.conv(g, w, None, stride, pads, dilation, groups), code)
        if output_mask[1]:
            gw = down(CV.conv_weight_grad(g, xs, w.shape, stride, pads, dilation, groups), wcode)
    else:
        if output_mask[0]:
            gi = down(CV.conv_input_grad(g, w, v.shape, stride, pads, dilation, groups), code)
        if output_mask[1]:
            gw = down(CV.conv_weight_grad(xs, g, w.shape, stride, pads, dilation, groups), wcode)
    if output_mask[2]:
        gb = down(RD.sum(g, axis=(0,) + tuple(range(2, g.ndim))), value(grad)._node.dtype)
    return gi, gw, gb


def _max_pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    v = value(x)
    y, idx = CV.max_pool(v, kernel_size, stride or None, padding, dilation, ceil_mode,
                         return_indices=True)
    return y, idx


def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    v = value(x)
    return down(CV.max_pool_grad(up(value(grad)), value(indices), v.shape), v._node.dtype)


register_lowering(aten.max_pool2d_with_indices.default,
                  aten.max_pool3d_with_indices.default)(_max_pool)
register_lowering(aten.max_pool2d_with_indices_backward.default,
                  aten.max_pool3d_with_indices_backward.default)(_max_pool_backward)


def _avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    v = value(x)
    y = CV.avg_pool(up(v), kernel_size, stride or None, padding, ceil_mode, count_include_pad,
                    divisor_override)
    return down(y, v._node.dtype)


def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override):
    v = value(x)
    g = CV.avg_pool_grad(up(value(grad)), v.shape, kernel_size, stride or None, padding,
                         ceil_mode, count_include_pad, divisor_override)
    return down(g, v._node.dtype)


register_lowering(aten.avg_pool2d.default, aten.avg_pool3d.default)(_avg_pool)
register_lowering(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)(
    _avg_pool_backward)


def _adaptive_avg_pool(x, output_size):
    v = value(x)
    return down(CV.adaptive_avg_pool(up(v), tuple(output_size)), v._node.dtype)


def _adaptive_avg_pool_backward(grad, x):
    v = value(x)
    return down(CV.adaptive_avg_pool_grad(up(value(grad)), v.shape), v._node.dtype)


register_lowering(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)(
    _adaptive_avg_pool)
register_lowering(aten._adaptive_avg_pool2d_backward.default,
                  aten._adaptive_avg_pool3d_backward.default)(_adaptive_avg_pool_backward)


# ---- resampling (F.interpolate) ------------------------------------------------

def _scales(scales, nd):
    """ATen's optional per-axis scale factors (None where the sizes decide)."""
    scales = list(scales)[-nd:] if scales else []
    return scales if len(scales) == nd and all(s is not None for s in scales) else None


def _upsample(mode, align=None):
    def lower(x, output_size, *rest):
        v = value(x)
        align_corners = rest[0] if align else False
        factors = _scales(rest[1:] if align else rest, v.ndim - 2)
        y = UP.interpolate(up(v), output_size, mode, align_corners, factors)
        return down(y, v._node.dtype)
    return lower


def _upsample_backward(mode, align=None):
    def lower(grad, output_size, input_size, *rest):
        g = value(grad)
        align_corners = rest[0] if align else False
        factors = _scales(rest[1:] if align else rest, g.ndim - 2)
        y = UP.interpolate_grad(up(g), tuple(input_size), mode, align_corners, factors)
        return down(y, g._node.dtype)
    return lower


def _upsample_vec(mode, align=None):
    """The ``.vec`` overloads (what ``F.interpolate`` calls): an output size, or
    scale factors that give it (floor(in * scale)) and set the source scale."""
    def lower(x, output_size, *rest):
        v = value(x)
        align_corners = rest[0] if align else False
        factors = rest[1] if align else rest[0]
        if output_size is None:
            output_size = [int(n * f) for n, f in zip(v.shape[2:], factors)]
        y = UP.interpolate(up(v), output_size, mode, align_corners, factors)
        return down(y, v._node.dtype)
    return lower


for _nd, _linear in ((1, "linear1d"), (2, "bilinear2d"), (3, "trilinear3d")):
    register_lowering(getattr(aten, f"upsample_nearest{_nd}d").default)(_upsample("nearest"))
    register_lowering(getattr(aten, f"upsample_nearest{_nd}d").vec)(_upsample_vec("nearest"))
    register_lowering(getattr(aten, f"_upsample_nearest_exact{_nd}d").vec)(
        _upsample_vec("nearest-exact"))
    register_lowering(getattr(aten, f"upsample_{_linear}").vec)(_upsample_vec("linear", True))
    register_lowering(getattr(aten, f"_upsample_nearest_exact{_nd}d").default)(
        _upsample("nearest-exact"))
    register_lowering(getattr(aten, f"upsample_{_linear}").default)(_upsample("linear", True))
    register_lowering(getattr(aten, f"upsample_nearest{_nd}d_backward").default)(
        _upsample_backward("nearest"))
    register_lowering(getattr(aten, f"_upsample_nearest_exact{_nd}d_backward").default)(
        _upsample_backward("nearest-exact"))
    register_lowering(getattr(aten, f"upsample_{_linear}_backward").default)(
        _upsample_backward("linear", True))
