"""Barriers: aten calls whose value must be computed, tried before any lowering.

``_local_scalar_dense`` (``item()``, ``bool()``) and ``_to_copy`` to another
device (``cpu()``, ``print``) run the graph; ``lift_fresh`` wraps the tensor
``torch.tensor(data, device="lazy")`` builds. (``cpu_tensor.copy_(lazy)`` is a
barrier too, at the autograd key: :func:`..dispatch.install_cross_device_copy`.)
"""
from __future__ import annotations

import torch

from ..registry import LOWERINGS, register_barrier
from ..tensor import LazyTensor, compute, count_materialization, depth, to_torch_cpu

aten = torch.ops.aten


@register_barrier(aten._local_scalar_dense.default)
def _item(a):
    count_materialization()
    return compute(a.value).reshape(()).item()


@register_barrier(aten._to_copy.default)
def _to_copy(a, *, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if device is None or torch.device(device).type == "lazy":
        return LazyTensor(LOWERINGS[aten._to_copy.default](a, dtype=dtype))
    count_materialization()
    out = to_torch_cpu(a.value)
    return out.to(device=device, dtype=dtype or out.dtype)


@register_barrier(aten.lift_fresh.default)
def _lift_fresh(a):
    # torch.tensor(data, device="lazy") builds a raw lazy tensor below functionalization,
    # then lifts it: from user code, the lift wraps it as every user tensor is wrapped
    # (depth 1: called by torch itself, not from inside a lowering or decomposition)
    if depth() == 1:
        return torch._to_functional_tensor(LazyTensor(a.value))
    return LazyTensor(a.value)
