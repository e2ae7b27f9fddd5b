"""The benchmarked computations, each written once against a small namespace.

A namespace (``numpy_ops()``, ``torch_ops()``, ``jax_ops()``, ``lazyrt_ops()``)
maps a few names (relu, tanh, gelu, softmax, layer_norm, sum...) onto each
library's *own best* function — ``torch.nn.functional.gelu`` is one fused op in
torch, and a peer should be measured at its best. The workload bodies only use
operators and these names, so every library runs the same math.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

GELU_C = math.sqrt(2.0 / math.pi)


# --- the workloads ---------------------------------------------------------------

def triad(F, a, b):
    """STREAM triad: a + s*b with a Python scalar s."""
    return a + 3.0 * b


def chain5(F, x):
    """Five pointwise ops: relu(x*2+1)*0.5 - x."""
    return F.relu(x * 2.0 + 1.0) * 0.5 - x


def gelu(F, x):
    """GELU, tanh approximation."""
    return F.gelu_tanh(x)


def sum_squares(F, x):
    """sum(x*x) over everything: a reduction fed by a pointwise op."""
    return F.sum(x * x)


def softmax_rows(F, x):
    return F.softmax(x)


def layer_norm(F, x, w, b):
    return F.layer_norm(x, w, b)


def matmul_bias_gelu(F, x, w, b):
    """x @ w + b, then GELU (tanh): a matmul with a pointwise epilogue."""
    return F.gelu_tanh(x @ w + b)


def transpose_scale(F, x):
    """x.T * 0.5 stored row-major: a transpose with a pointwise op, the copy
    attention's head split makes (``F.transposed``: each library's row-major x.T)."""
    return F.transposed(x) * 0.5


def chain10(F, a, b):
    """Ten binary ops on operators only, so every library records the same ten ops."""
    y = a + b
    y = y * 2.0
    y = y - a
    y = y * b
    y = y + 1.0
    y = y / 3.0
    y = y - b
    y = y * a
    y = y + 0.5
    return y * b


# --- reference formulas (used where a library has no fused op) -------------------

def _gelu_formula(tanh):
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * (x * x * x))))
    return gelu_tanh


# --- namespaces --------------------------------------------------------------------

def numpy_ops():
    """Eager NumPy; float32 in, float32 out (Python scalars do not upcast)."""
    import numpy as np

    def softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def layer_norm_(x, w, b, eps=1e-5):
        mu = x.mean(axis=-1, keepdims=True)
        d = x - mu
        var = (d * d).mean(axis=-1, keepdims=True)
        return d / np.sqrt(var + eps) * w + b

    return SimpleNamespace(name="numpy", relu=lambda x: np.maximum(x, 0),
                           gelu_tanh=_gelu_formula(np.tanh), sum=lambda x: x.sum(),
                           softmax=softmax, layer_norm=layer_norm_,
                           transposed=lambda x: np.ascontiguousarray(x.T))


def torch_ops():
    import torch
    import torch.nn.functional as tf
    return SimpleNamespace(name="torch", relu=torch.relu,
                           gelu_tanh=lambda x: tf.gelu(x, approximate="tanh"),
                           sum=torch.sum, softmax=lambda x: torch.softmax(x, dim=-1),
                           layer_norm=lambda x, w, b: tf.layer_norm(x, (x.shape[-1],), w, b),
                           transposed=lambda x: x.t().contiguous())


def jax_ops():
    import jax
    import jax.numpy as jnp
    return SimpleNamespace(name="jax", relu=jax.nn.relu,
                           gelu_tanh=lambda x: jax.nn.gelu(x, approximate=True),
                           sum=jnp.sum, softmax=lambda x: jax.nn.softmax(x, axis=-1),
                           layer_norm=_jax_layer_norm, transposed=lambda x: x.T)


def _jax_layer_norm(x, w, b, eps=1e-5):
    import jax.numpy as jnp
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) * (1.0 / jnp.sqrt(var + eps)) * w + b


def lazyrt_ops():
    import lazyrt as lr
    return SimpleNamespace(name="lazyrt", relu=lr.nn.relu,
                           gelu_tanh=lambda x: lr.nn.gelu(x, approximate="tanh"),
                           sum=lambda x: x.sum(), softmax=lambda x: lr.nn.softmax(x, axis=-1),
                           layer_norm=lambda x, w, b: lr.nn.layer_norm(x, (x.shape[-1],), w, b),
                           transposed=lambda x: lr.permute_dims(x, (1, 0)))
