"""``nll_loss`` (what ``F.cross_entropy`` reaches) as a one-hot mask.

Picking ``logp[i, target[i]]`` is a one-hot mask, ``arange(C) == target[:, None]``,
and a masked sum over the class axis: pointwise + reduction, which the planner
fuses with the log-softmax that produced ``logp`` (a gather would need ``logp``
materialized, (N, C) written and read once more). The backward is the same mask,
scaled. ``weight``, ``ignore_index`` and the three reductions are eager torch's
(mean divides by the total weight of the counted targets).

A target outside [0, C) that is not ``ignore_index`` raises eager's IndexError
("Target 5 is out of bounds"), where a bare mask would pick nothing and silently
count the row as a zero loss: at the call when the targets are known then, at
the barrier that computes them otherwise (``indexing.checked_index``).
"""
from __future__ import annotations

import torch

from ... import _recorder_shapes as S
from ... import dtypes as D
from ...api import creation as C
from ...api import pointwise as P
from ...api import views as V
from ..operands import value
from ..registry import register_lowering
from ..tensor import runtime_scalar
from .indexing import checked_index, host_array

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2


def _parts(self, target, weight, ignore_index):
    """Rows (N, C) of ``self``, the one-hot mask of the targets and each row's weight
    (0 where the target is ``ignore_index``)."""
    x, t = value(self), value(target)
    known = host_array(t)
    if known is not None:
        known = known.reshape(-1)
    if x.ndim == 1:
        x, t = V.unsqueeze(x, 0), V.unsqueeze(t, 0)
    n_class = x.shape[1]
    t = P.astype(t, "int64")
    ignored = t == ignore_index
    classes = C.arange(n_class)
    # each row's class, checked against [0, C); -1 (no class) if ignored
    if known is not None:
        counted = known[known != ignore_index]
        bad = counted[(counted < 0) | (counted >= n_class)]
        if bad.size:
            raise IndexError(f"lazyrt.torch: nll_loss(): Target {bad[0]} is out of bounds "
                             f"(input of shape {tuple(value(self).shape)}, {n_class} classes)")
        picked = t
    else:
        picked = checked_index(S.where(ignored, runtime_scalar(0, D.INT64), t), n_class,
                               op="nll_loss", dim=1, shape=x.shape, negative=False,
                               error=IndexError, words=lambda b: f"Target {b} is out of bounds")
    picked = S.where(ignored, runtime_scalar(-1, D.INT64), picked)
    onehot = classes == V.unsqueeze(picked, -1)
    code = x._node.dtype
    zero = runtime_scalar(0, code)
    if weight is None:
        w = P.astype(~ignored, x.dtype)
    else:
        w = S.sum(S.where(onehot, V.unsqueeze(value(weight), 0), zero), -1)
        w = S.where(ignored, zero, w)
    return x, onehot, w, zero


def _forward(self, target, weight, reduction, ignore_index):
    x, onehot, w, zero = _parts(self, target, weight, ignore_index)
    picked = S.sum(S.where(onehot, x, zero), -1)
    per = -(picked * w)
    total = S.sum(w)
    if reduction == NONE:
        return (per if value(self).ndim == 2 else S.reshape(per, ())), total
    if reduction == SUM:
        return S.sum(per), total
    return S.sum(per) / total, total


def _backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    x, onehot, w, zero = _parts(self, target, weight, ignore_index)
    g = value(grad_output)
    coeff = -w
    if reduction == MEAN:
        coeff = coeff / value(total_weight)
    if reduction == NONE and g.ndim == 1:
        coeff = coeff * g
    else:
        coeff = coeff * S.reshape(g, ())
    grad = S.where(onehot, V.unsqueeze(coeff, -1), zero)
    return grad if value(self).ndim == 2 else S.reshape(grad, x.shape[1:])


for _op in (aten.nll_loss_forward.default,):
    register_lowering(_op)(_forward)
for _op in (aten.nll_loss_backward.default,):
    register_lowering(_op)(_backward)
