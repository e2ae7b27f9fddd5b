"""Neural-network functions with torch-like signatures, built from lazyrt ops
so the planner can fuse them (softmax is max, sub, exp, sum, div)."""
from __future__ import annotations

import math

from . import pointwise as P
from .convolution import (adaptive_avg_pool, avg_pool, conv, conv_transpose,  # noqa: F401
                          max_pool)
from .upsample import interpolate  # noqa: F401
from . import random as Rn
from . import reductions as Rd
from .creation import as_tensor
from .views import reshape
from ..errors import ShapeError
from .operands import check_probability, require_float


def relu(x):
    """max(x, 0); NaN stays NaN."""
    x = as_tensor(x)
    return P.maximum(x, 0)


def gelu(x, approximate="none"):
    """x * Φ(x), exact (erf) or with torch's tanh approximation."""
    x = as_tensor(x)
    require_float("gelu", x)
    if approximate == "none":
        return 0.5 * x * (1.0 + P.erf(x * (1.0 / math.sqrt(2.0))))
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))
        return 0.5 * x * (1.0 + P.tanh(inner))
    raise ValueError(f"lazyrt.nn.gelu: approximate must be 'none' or 'tanh', "
                     f"not {approximate!r}")


def silu(x):
    """x * sigmoid(x)."""
    x = as_tensor(x)
    require_float("silu", x)
    return x * P.sigmoid(x)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, as torch.nn.functional.softplus: x itself
    where beta x > threshold (pass threshold=math.inf for the exact function)."""
    x = as_tensor(x)
    require_float("softplus", x)
    if beta == 1.0:
        soft = P.softplus(x)
    else:
        soft = P.softplus(x * beta) / beta
    if threshold == math.inf:
        return soft
    return P.where(x * beta > threshold, x, soft)


def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) along ``axis``."""
    x = as_tensor(x)
    require_float("softmax", x)
    e = P.exp(x - Rd.max(x, axis, keepdims=True))
    return e / Rd.sum(e, axis, keepdims=True)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along ``axis``, computed stably."""
    x = as_tensor(x)
    require_float("log_softmax", x)
    shifted = x - Rd.max(x, axis, keepdims=True)
    return shifted - P.log(Rd.sum(P.exp(shifted), axis, keepdims=True))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` axes, then scale and shift."""
    x = as_tensor(x)
    require_float("layer_norm", x)
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k == 0 or x.shape[-k:] != normalized_shape:
        raise ShapeError(f"lazyrt.nn.layer_norm: normalized_shape {normalized_shape} does "
                         f"not match the trailing dimensions of input shape {x.shape}")
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = Rd.mean(x, axes, keepdims=True)
    d = x - mu
    var = Rd.mean(d * d, axes, keepdims=True)
    out = d * P.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
               training=False, momentum=0.1, eps=1e-5):
    """Normalize each channel (axis 1) of (N, C, *spatial) over the other axes,
    as torch's ``F.batch_norm``: with ``training`` (or no running statistics)
    by the batch's mean and biased variance, and the running statistics, when
    given, updated in place with ``momentum`` and the unbiased variance, in the
    same graph; otherwise by the running statistics."""
    x = as_tensor(x)
    require_float("batch_norm", x)
    if x.ndim < 2:
        raise ShapeError(f"lazyrt.nn.batch_norm: expected (N, C, ...) input, got shape {x.shape}")
    c = x.shape[1]
    shape = (1, c) + (1,) * (x.ndim - 2)
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and tuple(as_tensor(t).shape) != (c,):
            raise ShapeError(f"lazyrt.nn.batch_norm: {name} must have shape ({c},) for input "
                             f"of shape {x.shape}, got {tuple(as_tensor(t).shape)}")
    if training or running_mean is None or running_var is None:
        axes = (0,) + tuple(range(2, x.ndim))
        mean = Rd.mean(x, axes, keepdims=True)
        d = x - mean
        var = Rd.mean(d * d, axes, keepdims=True)
        count = x.size // c
        if count < 2 and training:
            raise ShapeError(f"lazyrt.nn.batch_norm: expected more than 1 value per channel "
                             f"when training, got input of shape {x.shape}")
        if training and running_mean is not None and running_var is not None:
            unbiased = reshape(var, (c,)) * (count / max(count - 1, 1))
            running_mean[...] = (1 - momentum) * running_mean + momentum * reshape(mean, (c,))
            running_var[...] = (1 - momentum) * running_var + momentum * unbiased
    else:
        mean, var = reshape(as_tensor(running_mean), shape), reshape(as_tensor(running_var), shape)
        d = x - mean
    out = d * P.rsqrt(var + eps)
    if weight is not None:
        out = out * reshape(as_tensor(weight), shape)
    if bias is not None:
        out = out + reshape(as_tensor(bias), shape)
    return out


def dropout(x, p=0.5, *, seed, offset=0, training=True):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``:
    ``where(keep, x * (1 / (1 - p)), 0)`` with ``keep = lr.random.dropout_mask(x.shape,
    p, seed=seed, offset=offset)`` (Philox, counter-based: one kernel with its
    consumers; ``seed``/``offset`` are runtime scalars, so a fresh mask every step
    compiles nothing). Advance ``offset`` by ``lr.random.words(x.shape)``.
    ``training=False`` or ``p == 0`` returns ``x``; ``p == 1`` gives zeros."""
    x = as_tensor(x)
    require_float("dropout", x)
    check_probability(p, "nn.dropout")
    if not training or p == 0:
        return x
    keep = Rn.dropout_mask(x.shape, p, seed=seed, offset=offset)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - float(p))
    return P.where(keep, x * scale, 0)

