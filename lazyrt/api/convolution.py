"""Convolution and pooling over the trailing 1, 2 or 3 spatial axes of an
(N, C, *spatial) tensor, built from the op table's gather, scatter_add and
matmul, so every backend runs them and the planner fuses their neighbours.

A window is read by one gather per spatial axis: along an axis of (padded)
size P, output position o and kernel tap j read index o * stride + j *
dilation, so the axis becomes (out, kernel) and the gathered tensor is
im2col's patch matrix. A convolution is that matrix times the weight's; its
input gradient (and a transposed convolution) is the product the other way
round, added back into the windows by one scatter_add per axis; its weight
gradient is the patch matrix times the output gradient. Pooling reduces over
the kernel axes of the same windows.

Weights are torch's layout, (out_channels, in_channels / groups, *kernel);
``padding`` is an int, a tuple per axis, "valid" or "same" (stride 1).
"""
from __future__ import annotations

import math

import numpy as np

from .. import _recorder_shapes as S
from .. import dtypes as D
from ..errors import ShapeError
from .creation import arange, as_tensor, asarray, full
from .indexing import scatter_add, take_along_axis
from .pointwise import astype
from .reductions import argmax, max as reduce_max, sum as reduce_sum
from .views import permute, reshape, setitem


def _tuple(name, what, value, nd):
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd
    if len(values) == 1:
        values *= nd
    if len(values) != nd or any(not isinstance(v, (int, np.integer)) for v in values):
        raise ShapeError(f"lazyrt.nn.{name}: {what} must be an int or {nd} ints, got {value!r}")
    return tuple(int(v) for v in values)


def _spatial(name, x, min_nd=1):
    nd = x.ndim - 2
    if not min_nd <= nd <= 3:
        raise ShapeError(f"lazyrt.nn.{name}: expected (N, C, *spatial) with 1 to 3 spatial axes, "
                         f"got shape {x.shape}")
    return nd


def _padding(name, padding, kernel, stride, dilation):
    """(before, after) per spatial axis."""
    nd = len(kernel)
    if padding == "valid":
        return [(0, 0)] * nd
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ShapeError(f"lazyrt.nn.{name}: padding='same' needs stride 1, got {stride}")
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in total]
    return [(p, p) for p in _tuple(name, "padding", padding, nd)]


def _out_sizes(name, shape, kernel, stride, pads, dilation, ceil_mode=False):
    out = []
    for size, k, s, (before, after), d in zip(shape, kernel, stride, pads, dilation):
        span = size + before + after - d * (k - 1) - 1
        if k < 1 or s < 1 or d < 1 or span < 0:
            raise ShapeError(f"lazyrt.nn.{name}: kernel {kernel} (dilation {dilation}) does not "
                             f"fit the padded input {shape} (padding {pads})")
        n = -(-span // s) + 1 if ceil_mode else span // s + 1
        if ceil_mode and (n - 1) * s >= size + before:  # the last window starts in the padding
            n -= 1
        out.append(n)
    return out


def pad(x, pads, value=0):
    """``x`` with ``pads[i] = (before, after)`` elements of ``value`` around its
    i-th spatial axis (the axes after the first two)."""
    x = as_tensor(x)
    if not any(b or a for b, a in pads):
        return x
    lead = x.ndim - len(pads)
    shape = list(x.shape[:lead]) + [n + b + a for n, (b, a) in zip(x.shape[lead:], pads)]
    out = full(tuple(shape), value, x.dtype)
    inner = tuple([slice(None)] * lead + [slice(b, b + n) for n, (b, a)
                                          in zip(x.shape[lead:], pads)])
    setitem(out, inner, x)
    return out


def _taps(out, k, s, d):
    """Indices o * s + j * d of a window axis, (out * k,) int64; None where the
    window is the axis itself (k = s = 1 over all of it)."""
    o = arange(out, dtype="int64") * s
    j = arange(k, dtype="int64") * d
    return reshape(reshape(o, (out, 1)) + reshape(j, (1, k)), (out * k,))


def _along(idx, ndim, axis):
    return reshape(idx, tuple(idx.shape[0] if a == axis else 1 for a in range(ndim)))


def gather_windows(x, taps, out, kernel):
    """(N, C, *P) read at ``taps[i]`` (an (out_i * kernel_i,) index, or None for
    the whole axis) along each spatial axis, as (N, C, O0, K0, O1, K1, ...)."""
    lead = x.ndim - len(out)
    for i, idx in enumerate(taps):
        if idx is not None:
            x = take_along_axis(x, _along(idx, x.ndim, lead + i), axis=lead + i,
                                negative_indices=False)
    shape = list(x.shape[:lead])
    for o, k in zip(out, kernel):
        shape += [o, k]
    return reshape(x, tuple(shape))


def scatter_windows(cols, taps, padded, out, kernel):
    """The adjoint of :func:`gather_windows`: (N, C, O0, K0, ...) added into a zero
    (N, C, *padded) tensor (overlapping windows sum)."""
    lead = cols.ndim - 2 * len(out)
    cur = list(cols.shape[:lead]) + [o * k for o, k in zip(out, kernel)]
    x = reshape(cols, tuple(cur))
    for i in reversed(range(len(out))):
        if taps[i] is None:
            continue
        cur[lead + i] = padded[i]
        x = scatter_add(full(tuple(cur), 0, x.dtype), _along(taps[i], x.ndim, lead + i), x,
                        axis=lead + i, negative_indices=False)
    return x


def _window_taps(size, out, kernel, stride, dilation):
    return [None if k == 1 and s == 1 and n == o else _taps(o, k, s, d)
            for n, o, k, s, d in zip(size, out, kernel, stride, dilation)]


def windows(xp, out, kernel, stride, dilation):
    """The windows of a padded (N, C, *P) tensor as (N, C, O0, K0, O1, K1, ...)."""
    taps = _window_taps(xp.shape[xp.ndim - len(out):], out, kernel, stride, dilation)
    return gather_windows(xp, taps, out, kernel)


def unwindows(cols, padded, out, kernel, stride, dilation):
    """The adjoint of :func:`windows`, into a zero (N, C, *padded) tensor."""
    taps = _window_taps(padded, out, kernel, stride, dilation)
    return scatter_windows(cols, taps, padded, out, kernel)


def _crop(x, pads):
    lead = x.ndim - len(pads)
    if not any(b or a for b, a in pads):
        return x
    return S.getitem(x, tuple([slice(None)] * lead + [slice(b, n - a) for n, (b, a)
                                                      in zip(x.shape[lead:], pads)]))


def _check_conv(name, x, wshape, groups):
    nd = _spatial(name, x)
    if len(wshape) != x.ndim:
        raise ShapeError(f"lazyrt.nn.{name}: weight of shape {tuple(wshape)} does not match the "
                         f"input of shape {x.shape} (expected {x.ndim} axes)")
    if groups < 1 or wshape[0] % groups:
        raise ShapeError(f"lazyrt.nn.{name}: groups={groups} must divide the weight's "
                         f"{wshape[0]} output channels")
    return nd


def _patches(name, x, wshape, stride, padding, dilation, groups):
    """The patch matrix (G, N * prod(out), C/G * prod(kernel)) and the output sizes."""
    nd = _check_conv(name, x, wshape, groups)
    kernel = tuple(wshape[2:])
    stride = _tuple(name, "stride", stride, nd)
    dilation = _tuple(name, "dilation", dilation, nd)
    pads = _padding(name, padding, kernel, stride, dilation)
    if x.shape[1] != wshape[1] * groups:
        raise ShapeError(f"lazyrt.nn.{name}: input of shape {x.shape} has {x.shape[1]} channels; "
                         f"the weight of shape {tuple(wshape)} with groups={groups} expects "
                         f"{wshape[1] * groups}")
    out = _out_sizes(name, x.shape[2:], kernel, stride, pads, dilation)
    cols = windows(pad(x, pads), out, kernel, stride, dilation)
    # (N, C, O0, K0, ...) -> (N, O0.., C, K0..) -> (G, N*O, C/G*K)
    perm = [0] + [2 + 2 * i for i in range(nd)] + [1] + [3 + 2 * i for i in range(nd)]
    rows = x.shape[0] * math.prod(out)
    cols = reshape(permute(cols, perm), (rows, groups, wshape[1] * math.prod(kernel)))
    return permute(cols, (1, 0, 2)), out


def _grouped_weight(weight, groups):
    """(O, C/G, *K) as (G, O/G, C/G * prod(K))."""
    return reshape(weight, (groups, weight.shape[0] // groups, math.prod(weight.shape[1:])))


def _to_channels_first(y, n, out):
    """(G, N * prod(out), O/G) -> (N, O, *out)."""
    g, _, og = y.shape
    y = reshape(y, (g, n, math.prod(out), og))
    return reshape(permute(y, (1, 0, 3, 2)), (n, g * og, *out))


def _from_channels_first(g, groups):
    """(N, O, *out) -> (G, N * prod(out), O/G)."""
    n, o = g.shape[:2]
    m = math.prod(g.shape[2:])  # explicit sizes: -1 is ambiguous for an empty batch
    y = reshape(g, (n, groups, o // groups, m))
    return reshape(permute(y, (1, 0, 3, 2)), (groups, n * m, o // groups))


def conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """N-d convolution (cross-correlation, as torch's ``conv1d/2d/3d``)."""
    x, weight = as_tensor(x), as_tensor(weight)
    cols, out = _patches("conv", x, weight.shape, stride, padding, dilation, groups)
    w = permute(_grouped_weight(weight, groups), (0, 2, 1))          # (G, C/G*K, O/G)
    y = _to_channels_first(S.matmul(cols, astype(w, cols.dtype)), x.shape[0], out)
    if bias is not None:
        y = y + reshape(as_tensor(bias), (weight.shape[0],) + (1,) * len(out))
    return y


def conv_input_grad(grad, weight, input_shape, stride=1, padding=0, dilation=1, groups=1):
    """d conv / d input: the output gradient (N, O, *out) times the weight, added
    back into each window, for an input of ``input_shape``."""
    grad, weight = as_tensor(grad), as_tensor(weight)
    nd = len(input_shape) - 2
    kernel = tuple(weight.shape[2:])
    stride = _tuple("conv", "stride", stride, nd)
    dilation = _tuple("conv", "dilation", dilation, nd)
    pads = _padding("conv", padding, kernel, stride, dilation)
    out = tuple(grad.shape[2:])
    w = _grouped_weight(weight, groups)                               # (G, O/G, C/G*K)
    cols = S.matmul(_from_channels_first(grad, groups), astype(w, grad.dtype))
    n, cg = grad.shape[0], weight.shape[1]
    cols = reshape(cols, (groups, n, *out, cg, *kernel))              # G N O.. Cg K..
    perm = [1, 0, 2 + nd]
    for i in range(nd):
        perm += [2 + i, 3 + nd + i]
    cols = reshape(permute(cols, perm), (n, groups * cg) + sum(((o, k) for o, k
                                                                in zip(out, kernel)), ()))
    padded = [s + b + a for s, (b, a) in zip(input_shape[2:], pads)]
    return _crop(unwindows(cols, padded, out, kernel, stride, dilation), pads)


def conv_weight_grad(x, grad, weight_shape, stride=1, padding=0, dilation=1, groups=1):
    """d conv / d weight: the patches of ``x`` times the output gradient."""
    x, grad = as_tensor(x), as_tensor(grad)
    cols, _ = _patches("conv", x, tuple(weight_shape), stride, padding, dilation, groups)
    gw = S.matmul(permute(cols, (0, 2, 1)), _from_channels_first(astype(grad, cols.dtype),
                                                                 groups))
    return reshape(permute(gw, (0, 2, 1)), tuple(weight_shape))      # (G, O/G, C/G*K)


def conv_transpose(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                   dilation=1):
    """Transposed convolution (torch's ``conv_transpose1d/2d/3d``): the input
    gradient of the convolution whose weight is ``weight`` (C_in, C_out/G, *K)."""
    x, weight = as_tensor(x), as_tensor(weight)
    nd = _check_conv("conv_transpose", x, weight.shape, groups)
    if x.shape[1] != weight.shape[0]:
        raise ShapeError(f"lazyrt.nn.conv_transpose: input of shape {x.shape} has {x.shape[1]} "
                         f"channels; the weight of shape {weight.shape} expects {weight.shape[0]}")
    kernel = tuple(weight.shape[2:])
    stride = _tuple("conv_transpose", "stride", stride, nd)
    dilation = _tuple("conv_transpose", "dilation", dilation, nd)
    extra = _tuple("conv_transpose", "output_padding", output_padding, nd)
    pads = _padding("conv_transpose", padding, kernel, stride, dilation)
    size = [(i - 1) * s - b - a + d * (k - 1) + e + 1 for i, s, (b, a), d, k, e
            in zip(x.shape[2:], stride, pads, dilation, kernel, extra)]
    if any(n <= 0 for n in size):
        raise ShapeError(f"lazyrt.nn.conv_transpose: the output size {size} is not positive")
    shape = (x.shape[0], weight.shape[1] * groups, *size)
    y = conv_input_grad(x, weight, shape, stride, tuple(b for b, _ in pads), dilation, groups)
    if bias is not None:
        y = y + reshape(as_tensor(bias), (shape[1],) + (1,) * nd)
    return y


# ---- pooling -------------------------------------------------------------------

def _pool_args(name, shape, kernel, stride, padding, dilation, ceil_mode):
    """kernel, stride, per-axis (before, after) padding, dilation and output sizes
    of pooling an input of ``shape``."""
    nd = len(shape) - 2
    if not 1 <= nd <= 3:
        raise ShapeError(f"lazyrt.nn.{name}: expected (N, C, *spatial) with 1 to 3 spatial axes, "
                         f"got shape {tuple(shape)}")
    kernel = _tuple(name, "kernel_size", kernel, nd)
    stride = kernel if stride is None or len(np.atleast_1d(stride)) == 0 else \
        _tuple(name, "stride", stride, nd)
    dilation = _tuple(name, "dilation", dilation, nd)
    p = _tuple(name, "padding", padding, nd)
    if any(2 * q > k for q, k in zip(p, kernel)):
        raise ShapeError(f"lazyrt.nn.{name}: padding {p} must be at most half the kernel {kernel}")
    out = _out_sizes(name, shape[2:], kernel, stride, [(q, q) for q in p], dilation, ceil_mode)
    # ceil_mode's last window may run past the padding: pad the right side to cover it
    pads = [(q, max(q, (o - 1) * s + d * (k - 1) + 1 - n - q))
            for q, o, s, d, k, n in zip(p, out, stride, dilation, kernel, shape[2:])]
    return kernel, stride, pads, dilation, out


def _kernel_last(cols, nd):
    """(N, C, O0, K0, ...) -> (N, C, O0, O1, ..., K0 * K1 * ...)."""
    perm = [0, 1] + [2 + 2 * i for i in range(nd)] + [3 + 2 * i for i in range(nd)]
    shape = cols.shape[:2] + tuple(cols.shape[2 + 2 * i] for i in range(nd))
    taps = math.prod(cols.shape[3 + 2 * i] for i in range(nd))
    return reshape(permute(cols, perm), shape + (taps,))


def _kernel_spread(g, out, kernel):
    """(N, C, *out) broadcast over each window: (N, C, O0, K0, O1, K1, ...)."""
    shape, full_shape = list(g.shape[:2]), list(g.shape[:2])
    for o, k in zip(out, kernel):
        shape += [o, 1]
        full_shape += [o, k]
    return reshape(g, tuple(shape)) + full(tuple(full_shape), 0, g.dtype)


def max_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False):
    """Max over each window (NaN propagates); with ``return_indices`` also each
    maximum's flat index into its input plane, as torch's ``max_pool*d``."""
    x = as_tensor(x)
    kernel, stride, pads, dilation, out = _pool_args("max_pool", x.shape, kernel_size, stride,
                                                     padding, dilation, ceil_mode)
    low = -math.inf if x._node.dtype in D.FLOATING else int(np.iinfo(x.dtype).min)
    cols = _kernel_last(windows(pad(x, pads, low), out, kernel, stride, dilation), len(out))
    y = reduce_max(cols, axis=-1)
    if not return_indices:
        return y
    k = argmax(cols, axis=-1)
    flat, plane = 0, 1
    for i in reversed(range(len(out))):
        taps, k = k % kernel[i], k // kernel[i]
        o = reshape(arange(out[i], dtype="int64"), (out[i],) + (1,) * (len(out) - 1 - i))
        flat = flat + (o * stride[i] - pads[i][0] + taps * dilation[i]) * plane
        plane *= x.shape[2 + i]
    return y, flat


def max_pool_grad(grad, indices, input_shape):
    """The adjoint of :func:`max_pool`: each output gradient added at its index."""
    grad, indices = as_tensor(grad), as_tensor(indices)
    n, c = input_shape[:2]
    z = full((n, c, math.prod(input_shape[2:])), 0, grad.dtype)
    m = math.prod(grad.shape[2:])
    added = scatter_add(z, reshape(indices, (n, c, m)), reshape(grad, (n, c, m)), axis=2,
                        negative_indices=False)
    return reshape(added, tuple(input_shape))


def _avg_divisor(shape, kernel, stride, pads, out, count_include_pad, like):
    """Each window's divisor by torch's rule (the window clipped to the padded
    input, or to the input), as a (*out) tensor of ``like``'s dtype."""
    div = np.ones((), np.float64)
    for n, k, s, (b, _), o in zip(shape, kernel, stride, pads, out):
        start = np.arange(o) * s - b
        end = np.minimum(start + k, n + b)
        size = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        div = np.multiply.outer(div, size.astype(np.float64))
    return astype(asarray(div), like.dtype)


def avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    """Mean over each window, as torch's ``avg_pool*d``."""
    x = as_tensor(x)
    kernel, stride, pads, dilation, out = _pool_args("avg_pool", x.shape, kernel_size, stride,
                                                     padding, 1, ceil_mode)
    cols = _kernel_last(windows(pad(x, pads), out, kernel, stride, dilation), len(out))
    total = reduce_sum(cols, axis=-1)
    if divisor_override:
        return total / divisor_override
    return total / _avg_divisor(x.shape[2:], kernel, stride, pads, out, count_include_pad, total)


def avg_pool_grad(grad, input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
                  count_include_pad=True, divisor_override=None):
    """The adjoint of :func:`avg_pool`."""
    grad = as_tensor(grad)
    kernel, stride, pads, dilation, out = _pool_args("avg_pool", input_shape, kernel_size,
                                                     stride, padding, 1, ceil_mode)
    if divisor_override:
        g = grad / divisor_override
    else:
        g = grad / _avg_divisor(input_shape[2:], kernel, stride, pads, out, count_include_pad,
                                grad)
    padded = [n + b + a for n, (b, a) in zip(input_shape[2:], pads)]
    return _crop(unwindows(_kernel_spread(g, out, kernel), padded, out, kernel, stride,
                           dilation), pads)


def _adaptive(size, out):
    """Torch's adaptive windows of an axis: [floor(i n / o), ceil((i + 1) n / o)),
    as taps (o * k,) clamped into the window, a 0/1 mask (o, k) and the counts."""
    i = np.arange(out)
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    k = int((end - start).max())
    j = np.arange(k)
    taps = np.minimum(start[:, None] + j, end[:, None] - 1)
    return taps.reshape(-1), (j < (end - start)[:, None]), (end - start), k


def _adaptive_args(name, shape, output_size):
    nd = len(shape) - 2
    if not 1 <= nd <= 3:
        raise ShapeError(f"lazyrt.nn.{name}: expected (N, C, *spatial) with 1 to 3 spatial axes, "
                         f"got shape {tuple(shape)}")
    sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * nd
    out = [n if o is None else int(o) for n, o in zip(shape[2:], sizes)]
    if len(sizes) != nd or any(o < 1 for o in out):
        raise ShapeError(f"lazyrt.nn.{name}: output_size {output_size!r} does not fit the input "
                         f"of shape {tuple(shape)}")
    return [_adaptive(n, o) for n, o in zip(shape[2:], out)], out


def _adaptive_weights(parts, like):
    """The windows' 0/1 mask over (O0, K0, O1, K1, ...) and the counts over (*out),
    both in ``like``'s dtype."""
    mask, count = np.ones(()), np.ones(())
    for _, m, c, _ in parts:
        mask = np.multiply.outer(mask, m.astype(np.float64))
        count = np.multiply.outer(count, c.astype(np.float64))
    return astype(asarray(mask), like.dtype), astype(asarray(count), like.dtype)


def adaptive_avg_pool(x, output_size):
    """Mean over torch's adaptive windows (``adaptive_avg_pool*d``)."""
    x = as_tensor(x)
    parts, out = _adaptive_args("adaptive_avg_pool", x.shape, output_size)
    kernel = [k for *_, k in parts]
    if all(n % o == 0 for n, o in zip(x.shape[2:], out)):  # equal windows: no mask needed
        k = [n // o for n, o in zip(x.shape[2:], out)]
        return avg_pool(x, k, k)
    taps = [asarray(t.astype(np.int64)) for t, *_ in parts]
    mask, count = _adaptive_weights(parts, x)
    cols = gather_windows(x, taps, out, kernel) * mask
    return reduce_sum(_kernel_last(cols, len(out)), axis=-1) / count


def adaptive_avg_pool_grad(grad, input_shape):
    """The adjoint of :func:`adaptive_avg_pool`."""
    grad = as_tensor(grad)
    parts, out = _adaptive_args("adaptive_avg_pool", input_shape, tuple(grad.shape[2:]))
    kernel = [k for *_, k in parts]
    taps = [asarray(t.astype(np.int64)) for t, *_ in parts]
    mask, count = _adaptive_weights(parts, grad)
    cols = _kernel_spread(grad / count, out, kernel) * mask
    return scatter_windows(cols, taps, list(input_shape[2:]), out, kernel)
