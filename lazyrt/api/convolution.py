"""Convolution and pooling over the trailing 1, 2 or 3 spatial axes of an
(N, C, *spatial) tensor, built from the op table's gather, matmul and (for the
pooling gradients) scatter_add, so every backend runs them and the planner
fuses their neighbours.

A window is read by one gather per spatial axis from a table of sources:
output position o and kernel tap j read o * stride + j * dilation - padding,
and a read in the padding is a select of the fill (0, or -inf for max
pooling), so padding costs no copy. The axis becomes (out, kernel): the
gathered tensor is im2col's patch matrix, and a convolution is that matrix
times the weight's. Its input gradient (and the transposed convolution) is the
same construction run backwards: a stride-1 correlation of the output
gradient, its outputs spread ``stride`` apart, with the flipped, transposed
weight, again one gather per axis and a matmul. Its weight gradient is the
patch matrix times the output gradient. Pooling reduces over the kernel axes
of the same windows; its gradients add back into the windows by scatter_add.

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
from .manipulation import flip
from .pointwise import astype, where
from .reductions import argmax, max as reduce_max, sum as reduce_sum
from .views import permute, reshape


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


def _conv_sources(size, out, k, s, d, before):
    """Where each (output, tap) of a window axis reads: o * s + j * d - before,
    -1 for a position in the padding."""
    src = (np.arange(out)[:, None] * s + np.arange(k)[None, :] * d - before).reshape(-1)
    return np.where((src >= 0) & (src < size), src, -1)


def _along(values, ndim, axis):
    return reshape(asarray(values), tuple(len(values) if a == axis else 1 for a in range(ndim)))


def _whole(src, n):
    return len(src) == n and bool((src == np.arange(n)).all())


def gather_windows(x, sources, out, kernel, fill=0, lead=None):
    """(N, C, *S) read along each spatial axis at ``sources[i]`` (an (out_i *
    kernel_i,) integer table; -1 reads ``fill``: padding, a masked tap), as
    (N, C, O0, K0, O1, K1, ...). One fused gather per axis; an axis read
    whole, in order, is left alone. ``lead``: the first spatial axis, when
    axes follow them ((N, *S, C) gives (N, O0, K0, ..., C))."""
    lead = x.ndim - len(out) if lead is None else lead
    tail = x.shape[lead + len(out):]
    for i, src in enumerate(sources):
        axis = lead + i
        if _whole(src, x.shape[axis]):
            continue
        valid = src >= 0
        x = take_along_axis(x, _along(np.where(valid, src, 0).astype(np.int64), x.ndim, axis),
                            axis=axis, negative_indices=False)
        if not valid.all():
            x = where(_along(valid, x.ndim, axis), x, fill)
    shape = list(x.shape[:lead])
    for o, k in zip(out, kernel):
        shape += [o, k]
    return reshape(x, tuple(shape) + tuple(tail))


def scatter_windows(cols, sources, size, out, kernel):
    """The adjoint of :func:`gather_windows`: (N, C, O0, K0, ...) added into a
    zero (N, C, *size) tensor (overlapping windows sum, fill reads drop)."""
    lead = cols.ndim - 2 * len(out)
    cur = list(cols.shape[:lead]) + [o * k for o, k in zip(out, kernel)]
    x = reshape(cols, tuple(cur))
    for i in reversed(range(len(out))):
        src, axis, n = sources[i], lead + i, size[i]
        if _whole(src, n):
            continue
        cur[axis] = n + 1  # a last slot takes what the padding read, then is cut off
        idx = _along(np.where(src >= 0, src, n).astype(np.int64), x.ndim, axis)
        x = scatter_add(full(tuple(cur), 0, x.dtype), idx, x, axis=axis,
                        negative_indices=False)
        x = S.getitem(x, tuple(slice(0, n) if a == axis else slice(None)
                               for a in range(x.ndim)))
        cur[axis] = n
    return x


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
    """The patch rows (G, N * prod(out), prod(kernel) * C/G) and the output sizes."""
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
    sources = [_conv_sources(n, o, k, st, d, b) for n, o, k, st, d, (b, _)
               in zip(x.shape[2:], out, kernel, stride, dilation, pads)]
    return _rows(_channels_last(x), sources, out, kernel, groups), out


def _channels_last(x):
    """(N, C, *S) -> (N, *S, C): a window's taps then read whole channel rows."""
    return permute(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _rows(xc, sources, out, kernel, groups):
    """Patch rows of a channels-last (N, *S, C) tensor: (G, N * prod(out),
    prod(kernel) * C/G), each row the window's taps in order, channels
    innermost (each tap a contiguous run of channels: a row copy)."""
    nd = len(out)
    cols = gather_windows(xc, sources, out, kernel, lead=1)         # N O0 K0 .. C
    n, c = xc.shape[0], xc.shape[-1]
    perm = [0] + [1 + 2 * i for i in range(nd)] + [2 + 2 * i for i in range(nd)] + [2 * nd + 1]
    rows, taps = n * math.prod(out), math.prod(kernel)
    cols = permute(cols, perm)                                         # N O.. K.. C
    if groups == 1:
        return reshape(cols, (1, rows, taps * c))
    cols = reshape(cols, (rows, taps, groups, c // groups))
    return reshape(permute(cols, (2, 0, 1, 3)), (groups, rows, taps * (c // groups)))


def _product(a, b):
    """Per-group products (G, m, k) @ (G, k, n); one group as a plain 2-d product
    (BLAS's own call, no batch loop)."""
    if a.shape[0] == 1:
        m, n = a.shape[1], b.shape[2]
        y = S.matmul(reshape(a, a.shape[1:]), reshape(b, b.shape[1:]))
        return reshape(y, (1, m, n))
    return S.matmul(a, b)


def _grouped_weight(weight, groups):
    """(O, C/G, *K) as (G, O/G, prod(K) * C/G), the patch rows' order."""
    o, cg, kernel = weight.shape[0], weight.shape[1], tuple(weight.shape[2:])
    nd = len(kernel)
    w = reshape(weight, (groups, o // groups, cg) + kernel)
    w = permute(w, (0, 1) + tuple(range(3, 3 + nd)) + (2,))           # G Og K.. Cg
    return reshape(w, (groups, o // groups, math.prod(kernel) * cg))


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
    y = _to_channels_first(_product(cols, astype(w, cols.dtype)), x.shape[0], out)
    if bias is not None:
        y = y + reshape(as_tensor(bias), (weight.shape[0],) + (1,) * len(out))
    return y


def _transposed_sources(size, out, k, s, d, before):
    """The input gradient of a window axis as a stride-1 correlation with the
    flipped kernel: input position i, tap j reads the output gradient at
    (i + j d - ((k - 1) d - before)) / s where that is a whole output index
    (the zeros a stride leaves between outputs, and the padding, read -1)."""
    t = np.arange(size)[:, None] + np.arange(k)[None, :] * d - ((k - 1) * d - before)
    src = t // s
    return np.where((t >= 0) & (t % s == 0) & (src < out), src, -1).reshape(-1)


def conv_input_grad(grad, weight, input_shape, stride=1, padding=0, dilation=1, groups=1):
    """d conv / d input for an input of ``input_shape``: the output gradient
    (N, O, *out), its outputs spread ``stride`` apart, correlated with the
    flipped, transposed weight (so no scatter: one gather per axis and a
    matmul, as the forward)."""
    grad, weight = as_tensor(grad), as_tensor(weight)
    nd = len(input_shape) - 2
    kernel = tuple(weight.shape[2:])
    stride = _tuple("conv", "stride", stride, nd)
    dilation = _tuple("conv", "dilation", dilation, nd)
    pads = _padding("conv", padding, kernel, stride, dilation)
    size, out = list(input_shape[2:]), list(grad.shape[2:])
    sources = [_transposed_sources(n, o, k, st, d, b) for n, o, k, st, d, (b, _)
               in zip(size, out, kernel, stride, dilation, pads)]
    n, o, cg = grad.shape[0], weight.shape[0], weight.shape[1]
    og = o // groups
    cols = _rows(_channels_last(grad), sources, size, kernel, groups)  # G, N*S, K*Og
    # weight (G*Og, Cg, *K) -> (G, *K flipped, Og, Cg): rows match cols' (K, Og)
    w = flip(reshape(weight, (groups, og, cg) + kernel), axis=tuple(range(3, 3 + nd)))
    w = reshape(permute(w, (0,) + tuple(range(3, 3 + nd)) + (1, 2)),
                (groups, math.prod(kernel) * og, cg))
    y = _product(cols, astype(w, cols.dtype))                          # G, N*S, Cg
    return _to_channels_first(y, n, size)


def conv_weight_grad(x, grad, weight_shape, stride=1, padding=0, dilation=1, groups=1):
    """d conv / d weight: the patches of ``x`` times the output gradient."""
    x, grad = as_tensor(x), as_tensor(grad)
    cols, _ = _patches("conv", x, tuple(weight_shape), stride, padding, dilation, groups)
    gw = _product(permute(cols, (0, 2, 1)), _from_channels_first(astype(grad, cols.dtype),
                                                                 groups))  # G, K*Cg, Og
    o, cg, kernel = weight_shape[0], weight_shape[1], tuple(weight_shape[2:])
    nd = len(kernel)
    gw = reshape(gw, (groups,) + kernel + (cg, o // groups))
    gw = permute(gw, (0, nd + 2, nd + 1) + tuple(range(1, nd + 1)))   # G Og Cg K..
    return reshape(gw, tuple(weight_shape))


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


def _pool_sources(shape, out, kernel, stride, dilation, pads):
    return [_conv_sources(n, o, k, s, d, b) for n, o, k, s, d, (b, _)
            in zip(shape[2:], out, kernel, stride, dilation, pads)]


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
    sources = _pool_sources(x.shape, out, kernel, stride, dilation, pads)
    cols = _kernel_last(gather_windows(x, sources, out, kernel, low), len(out))
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
    sources = _pool_sources(x.shape, out, kernel, stride, dilation, pads)
    cols = _kernel_last(gather_windows(x, sources, out, kernel), len(out))
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
    sources = _pool_sources(input_shape, out, kernel, stride, dilation, pads)
    return scatter_windows(_kernel_spread(g, out, kernel), sources, list(input_shape[2:]), out,
                           kernel)


def _adaptive(size, out):
    """Torch's adaptive windows of an axis, [floor(i n / o), ceil((i + 1) n / o)):
    the sources (o * k,) with -1 past a shorter window's end, the counts, k."""
    i = np.arange(out)
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    k = int((end - start).max())
    src = start[:, None] + np.arange(k)[None, :]
    return np.where(src < end[:, None], src, -1).reshape(-1), end - start, k


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
    parts = [_adaptive(n, o) for n, o in zip(shape[2:], out)]
    count = np.ones(())
    for _, c, _ in parts:
        count = np.multiply.outer(count, c.astype(np.float64))
    return [src for src, _, _ in parts], count, out, [k for *_, k in parts]


def adaptive_avg_pool(x, output_size):
    """Mean over torch's adaptive windows (``adaptive_avg_pool*d``)."""
    x = as_tensor(x)
    sources, count, out, kernel = _adaptive_args("adaptive_avg_pool", x.shape, output_size)
    cols = gather_windows(x, sources, out, kernel)
    return reduce_sum(_kernel_last(cols, len(out)), axis=-1) / astype(asarray(count), x.dtype)


def adaptive_avg_pool_grad(grad, input_shape):
    """The adjoint of :func:`adaptive_avg_pool`."""
    grad = as_tensor(grad)
    sources, count, out, kernel = _adaptive_args("adaptive_avg_pool", input_shape,
                                                 tuple(grad.shape[2:]))
    g = grad / astype(asarray(count), grad.dtype)
    return scatter_windows(_kernel_spread(g, out, kernel), sources, list(input_shape[2:]), out,
                           kernel)
