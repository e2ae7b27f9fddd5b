"""``lazyrt.torch``: unmodified PyTorch code on lazy tensors.

Tensors on device ``lazy`` record every aten op into lazyrt's recorder (the
same graph as the native API): forward, autograd backward and the optimizer
step of a training loop become one graph per :func:`mark_step`, compiled once
and then a cache hit every step.

>>> import torch, lazyrt.torch as lt
>>> x = torch.arange(4.0).to("lazy")
>>> (x * 2 + 1).sum().item()
16.0

This is the only module that imports ``torch``: ``import lazyrt`` stays torch-free.
"""
from __future__ import annotations

import copy
import sys

import torch
from torch.utils._pytree import tree_leaves, tree_map

from .._source_lines import skip_source_dir as _skip_source_dir
from . import autocast as _autocast
from . import dispatch as _dispatch
from . import factories as _factories
from . import meta as _meta
from . import optim as _optim
from .lowerings import activations as _activations
from .lowerings.random import eager_random, eager_random_enabled
from .tensor import _TORCH_DIR, DEVICE, is_lazy, to_torch_cpu, unwrap, count_materialization
from .tensor import sync as _sync

__all__ = ["lazy", "to_cpu", "eager", "save", "mark_step", "device", "is_lazy",
           "eager_random", "backend", "compile_backend"]

_factories.install()
_dispatch.install_cross_device_copy()  # cpu_tensor.copy_(lazy_tensor) is a barrier
_activations.install()  # silu_backward reaches the lazy dispatcher whole (lowerings/activations.py)
_meta.install()  # functionalization's in-place checks, memoized (see meta.py)
_optim.install()  # optimizers take the multi-tensor path on lazy parameters (optim.py)
_autocast.install()  # torch.autocast("cpu") casts lazy tensors as eager's CPU policy (autocast.py)
# a node's source line is the user's model or training code, not torch's module
_skip_source_dir(_TORCH_DIR)


def device() -> torch.device:
    """The lazy device, ``torch.device("lazy")``."""
    return DEVICE


def lazy(obj):
    """``obj`` on the lazy device: a tensor becomes a new lazy tensor; a module
    is converted in place (parameters and buffers, as ``module.to`` does) and
    returned, so optimizers created before or after both see lazy parameters."""
    if isinstance(obj, torch.nn.Module):
        return _move_module(obj, DEVICE)
    if isinstance(obj, torch.Tensor):
        return obj if is_lazy(obj) else obj.to(DEVICE)
    raise TypeError(f"lazyrt.torch.lazy: expected a torch.Tensor or nn.Module, "
                    f"got {type(obj).__name__}")


def _move_module(module, device):
    """``module.to(device)`` keeping each Parameter object (its tensor swapped in
    place), so an optimizer made before the move steps the moved parameters."""
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        return module.to(device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)


def eager(t: torch.Tensor) -> torch.Tensor:
    """A lazy tensor's value as a new CPU tensor outside autograd (a barrier,
    counted with your line); ``t.cpu()`` is the differentiable move."""
    if not is_lazy(t):
        raise TypeError(f"lazyrt.torch.eager: expected a lazy tensor, got one on {t.device}")
    count_materialization()
    return to_torch_cpu(unwrap(t))


def to_cpu(obj):
    """``obj`` back on the CPU: a tensor → CPU tensor (a barrier); a module →
    the same module with CPU parameters and buffers; a container (a
    ``state_dict``, an optimizer's ``state_dict()``, lists, tuples) → the same
    structure with every lazy tensor replaced by its CPU value.

    Every pending tensor in a container is computed in one graph."""
    if isinstance(obj, torch.nn.Module):
        return _move_module(obj, torch.device("cpu"))
    if isinstance(obj, torch.Tensor):
        return eager(obj) if is_lazy(obj) else obj
    leaves = [t for t in tree_leaves(obj) if is_lazy(t)]
    _sync(*(unwrap(t) for t in leaves))  # one graph for them all
    return tree_map(lambda t: eager(t) if is_lazy(t) else t, obj)


def save(obj, f, **kwargs):
    """``torch.save`` of ``obj`` with every lazy tensor saved as its CPU value, as
    ``torch.save`` users expect of a checkpoint (``torch.load`` gives CPU tensors).
    Every pending tensor in ``obj`` is computed in one graph, and nothing else is;
    ``torch.save`` itself also writes CPU values (see :func:`_reduce_ex`)."""
    if isinstance(obj, torch.nn.Module):
        raise TypeError("lazyrt.torch.save: save module.state_dict(), not the module")
    torch.save(to_cpu(obj), f, **kwargs)


def _reduce_ex(self, proto, _original=torch.Tensor.__reduce_ex__):
    # Pickling (torch.save, pickle) reduces a lazy tensor to its CPU value: a
    # checkpoint torch.load reads back as plain CPU tensors, with no lazyrt import.
    # A lazy tensor has no storage to write (torch would fail on its data pointer).
    # A pending one is computed with every other pending tensor, as mark_step does:
    # a state dict of N pending tensors is then one graph, not N.
    if self.device.type == "lazy":
        if sys._getframe(1).f_code is _SHALLOW_COPY:
            # copy.copy reduces without pickling: it gets what eager's gives, a
            # tensor sharing the value (an alias), on the lazy device
            return torch.Tensor.requires_grad_, (self.detach(), self.requires_grad)
        value = unwrap(self)
        if value.is_pending:
            _sync()
        count_materialization()
        self = to_torch_cpu(value).requires_grad_(self.requires_grad)
    return _original(self, proto)


_SHALLOW_COPY = copy.copy.__code__
torch.Tensor.__reduce_ex__ = _reduce_ex


def _restore_on_lazy(storage, location):
    # torch.load(map_location="lazy") asks for storages on the lazy device, which has none
    if location == "lazy":
        raise RuntimeError("lazyrt.torch: torch.load cannot place a checkpoint on the lazy "
                           "device (it has no storages): load it on the CPU, then move it "
                           "with lt.lazy(tensor) or .to('lazy'), or load_state_dict it into "
                           "a lazy model")
    return None


torch.serialization.register_package(30, lambda storage: None, _restore_on_lazy)


def mark_step():
    """The step barrier: compute every pending lazy tensor in one graph."""
    _sync()


def _numpy(self, *, force=False, _original=torch.Tensor.numpy):
    # torch refuses .numpy() off the CPU; a lazy tensor hands over a computed CPU copy
    if self.device.type == "lazy":
        return eager(self.detach()).numpy()
    return _original(self, force=force)


torch.Tensor.numpy = _numpy


def __getattr__(name):
    # the torch.compile backend loads functorch.compile (most of a second): only
    # when asked for, so `import lazyrt.torch` stays as quick as before
    if name in ("backend", "compile_backend"):
        from . import dynamo
        return getattr(dynamo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
