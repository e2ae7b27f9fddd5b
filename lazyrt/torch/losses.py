"""``nll_loss`` (what ``F.cross_entropy`` reaches) as a one-hot mask.

Picking ``logp[i, target[i]]`` is a one-hot mask, ``arange(C) == target[:, None]``,
and a masked sum over the class axis: pointwise + reduction, which the planner
fuses with the log-softmax that produced ``logp`` (a gather would need ``logp``
materialized, (N, C) written and read once more). The backward is the same mask,
scaled. ``weight``, ``ignore_index`` and the three reductions are eager torch's
(mean divides by the total weight of the counted targets).

The targets reach the mask through a gather from ``arange(C)``, which checks
them: a target outside [0, C) that is not ``ignore_index`` raises IndexError
when the loss is computed, as eager's "Target 5 is out of bounds" does, where a
bare mask would pick nothing and silently count the row as a zero loss. The
gather is per row and fuses into the loss's kernels.
"""
from __future__ import annotations

import torch

from .. import _recorder_shapes as S
from ..api import creation as C
from ..api import indexing as IX
from ..api import pointwise as P
from ..api import views as V
from .lowerings import LOWERINGS
from .operands import value
from .tensor import runtime_scalar

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2


def _parts(self, target, weight, ignore_index):
    """Rows (N, C) of ``self``, the one-hot mask of the targets and each row's weight
    (0 where the target is ``ignore_index``)."""
    x, t = value(self), value(target)
    if x.ndim == 1:
        x, t = V.unsqueeze(x, 0), V.unsqueeze(t, 0)
    n_class = x.shape[1]
    t = P.astype(t, "int64")
    ignored = t == ignore_index
    classes = C.arange(n_class)
    # each row's class, checked against [0, C) by the gather; -1 (no class) if ignored
    picked = IX.take_along_axis(classes, S.where(ignored, runtime_scalar(0, t._node.dtype), t),
                                axis=0, negative_indices=False)
    picked = S.where(ignored, runtime_scalar(-1, t._node.dtype), picked)
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
    LOWERINGS[_op] = _forward
for _op in (aten.nll_loss_backward.default,):
    LOWERINGS[_op] = _backward
