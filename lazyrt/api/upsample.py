"""Resampling of the trailing spatial axes (torch's ``interpolate``): nearest,
nearest-exact and (bi/tri)linear, forward and adjoint, as the window gathers of
:mod:`.convolution`: each output position reads one source (nearest) or two
weighted sources (linear) per axis, so a resize is one fused gather per axis
and its gradient adds back by scatter_add.

Source positions follow ATen's rules: the scale is ``1 / scale_factor`` when a
scale factor is given, else ``in / out`` (``(in - 1) / (out - 1)`` with
``align_corners``); nearest reads ``floor(o * scale)``, nearest-exact
``floor((o + 0.5) * scale)``, linear interpolates at ``(o + 0.5) * scale - 0.5``
clamped at 0 (``o * scale`` with ``align_corners``).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from .convolution import gather_windows, scatter_windows
from .creation import as_tensor, asarray
from .pointwise import astype
from .reductions import sum as reduce_sum
from .views import permute, reshape

MODES = ("nearest", "nearest-exact", "linear")


def _scale(n_in, n_out, factor, align_corners):
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / factor if factor else n_in / n_out


def _axis(mode, n_in, n_out, factor, align_corners):
    """Sources (n_out * taps,) and weights (n_out, taps) of one axis."""
    scale = np.float32(_scale(n_in, n_out, factor, align_corners))  # eager's float math
    o = np.arange(n_out, dtype=np.float32)
    if mode == "nearest":
        return np.minimum(np.floor(o * scale).astype(np.int64), n_in - 1), None
    if mode == "nearest-exact":
        return np.minimum(np.floor((o + np.float32(0.5)) * scale).astype(np.int64), n_in - 1), \
            None
    real = o * scale if align_corners else np.maximum((o + np.float32(0.5)) * scale
                                                      - np.float32(0.5), np.float32(0))
    i0 = np.minimum(np.floor(real).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    w1 = (real - i0).astype(np.float32)
    return np.stack([i0, i1], 1).reshape(-1), np.stack([np.float32(1) - w1, w1], 1)


def _plan(name, shape, size, mode, scale_factors, align_corners):
    nd = len(shape) - 2
    if mode not in MODES:
        raise ValueError(f"lazyrt.nn.{name}: mode must be one of {MODES}, got {mode!r}")
    if not 1 <= nd <= 3 or len(size) != nd or any(s < 1 for s in size):
        raise ShapeError(f"lazyrt.nn.{name}: output size {tuple(size)} does not fit the input of "
                         f"shape {tuple(shape)} ((N, C, *spatial) with 1 to 3 spatial axes)")
    factors = list(scale_factors) if scale_factors else [None] * nd
    axes = [_axis(mode, n, o, f, align_corners) for n, o, f in zip(shape[2:], size, factors)]
    return [src for src, _ in axes], [w for _, w in axes], 1 if mode != "linear" else 2


def _weights(weights, like):
    """The taps' weights over (O0, T0, O1, T1, ...) in ``like``'s dtype."""
    w = np.ones((), np.float32)
    for a in weights:
        w = np.multiply.outer(w, a)
    return astype(asarray(w), like.dtype)


def _taps_last(cols, nd):
    perm = [0, 1] + [2 + 2 * i for i in range(nd)] + [3 + 2 * i for i in range(nd)]
    shape = cols.shape[:2] + tuple(cols.shape[2 + 2 * i] for i in range(nd))
    taps = math.prod(cols.shape[3 + 2 * i] for i in range(nd))
    return reshape(permute(cols, perm), shape + (taps,))


def interpolate(x, size, mode="nearest", align_corners=False, scale_factors=None):
    """``x`` (N, C, *spatial) resampled to ``size``; ``scale_factors``, when
    given, set the source scale as torch's ``scale_factor`` does."""
    x = as_tensor(x)
    size = tuple(int(s) for s in size)
    sources, weights, taps = _plan("interpolate", x.shape, size, mode, scale_factors,
                                   align_corners)
    cols = gather_windows(x, sources, size, [taps] * len(size))
    if taps == 1:
        return reshape(cols, x.shape[:2] + size)
    return reduce_sum(_taps_last(cols * _weights(weights, cols), len(size)), axis=-1)


def interpolate_grad(grad, input_shape, mode="nearest", align_corners=False, scale_factors=None):
    """The adjoint of :func:`interpolate`: each output gradient added back, by
    its weight, at the positions it was read from."""
    grad = as_tensor(grad)
    size = tuple(grad.shape[2:])
    sources, weights, taps = _plan("interpolate", input_shape, size, mode, scale_factors,
                                   align_corners)
    shape = list(grad.shape[:2])
    for o in size:
        shape += [o, 1]
    g = reshape(grad, tuple(shape))
    if taps == 2:
        g = g * _weights(weights, g)
    return scatter_windows(g, sources, list(input_shape[2:]), size, [taps] * len(size))
