"""Python kernels on torch's ``Lazy`` dispatch key: the factories that have no
tensor argument to dispatch on (``torch.empty/zeros/ones/full/randn(...,
device="lazy")``, and ``.to("lazy")``, which starts from ``empty``).

From user code they return functional wrappers (what users hold); inside a
lowering or decomposition they return raw lazy tensors (what lowerings use).
Every other factory is composed from these plus a fill, copy or random draw.
"""
from __future__ import annotations

import torch

from . import dispatch as _dispatch
from .tensor import LazyTensor, from_cpu, wrap

_lib = None


def _user_facing():
    """Whether the caller wants a user tensor: not inside a lazy lowering, and not
    inside torch's functionalization (which wraps the result itself)."""
    return _dispatch.depth() == 0 and not torch._C._dispatch_tls_local_exclude_set().has(
        torch._C.DispatchKey.Functionalize)


def _out(value):
    return wrap(value) if _user_facing() else LazyTensor(value)


def _make(size, dtype):
    return _out(_dispatch.empty_value(size, dtype or torch.get_default_dtype()))


def _empty(size, *, dtype=None, layout=None, device=None, pin_memory=None,
           memory_format=None):
    return _make(size, dtype)


def _empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _make(size, dtype)


#: factories whose values are computed on the CPU by torch and enter as data
#: (as lazyrt's own ``arange`` does): integer ramps and identity matrices
CPU_COMPUTED = ("arange", "arange.start", "arange.start_step", "eye", "eye.m", "linspace", "scalar_tensor")


def _on_cpu(op):
    def kernel(*args, device=None, **kwargs):
        out = op(*args, device="cpu", **kwargs)
        return _out(from_cpu(out))
    return kernel


def _copy_from(src, dst, non_blocking=False):
    """A CPU tensor copied into a raw lazy tensor (``torch.tensor(data, device="lazy")``
    builds one below functionalization)."""
    if type(dst) is not LazyTensor:
        raise RuntimeError(f"lazyrt.torch: cannot copy into {type(dst).__name__} on "
                           f"{dst.device}; copy into a lazy tensor made by lazyrt")
    dst.value = from_cpu(src.to(dst.dtype).expand(dst.shape))
    return dst


def install():
    """Register the kernels (once per process)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "Lazy")
    lib.impl("empty_strided", _empty_strided, "Lazy")
    lib.impl("_copy_from", _copy_from, "Lazy")
    for name in CPU_COMPUTED:
        packet, _, overload = name.partition(".")
        lib.impl(name, _on_cpu(getattr(getattr(torch.ops.aten, packet), overload or "default")),
                 "Lazy")
    _lib = lib
