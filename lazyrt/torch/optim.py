"""torch's multi-tensor (``foreach``) optimizer path as the default on the lazy device.

``torch.optim`` and ``torch.nn.utils.clip_grad_norm_`` pick their implementation
from the parameters' device when ``foreach`` is not given: the multi-tensor one
on the devices torch lists as having foreach kernels (CUDA, XPU, ...), a
Python loop of single-tensor ops elsewhere. The lazy device belongs in that
list: a ``_foreach_*`` call reaches lazyrt once for all parameters and is
unrolled while recording (:mod:`lazyrt.torch.dispatch`), where the loop makes
every in-place op of every parameter a separate trip through torch's dispatcher
and functionalization. Both compute the same formulas; ``foreach=False`` still
picks the loop.

:func:`install` adds ``"lazy"`` to the list torch reads, in each module that
holds its own reference to the function that returns it.
"""
from __future__ import annotations

import importlib

#: the modules that look the device list up (by their own global name)
_READERS = ("torch.utils._foreach_utils", "torch.optim.optimizer", "torch.optim.swa_utils")
_NAME = "_get_foreach_kernels_supported_devices"


def _with_lazy(original):
    def devices() -> list:
        return [*original(), "lazy"]
    devices.__doc__ = original.__doc__
    devices.lazyrt_original = original  # marks it installed (and keeps torch's)
    return devices


def install():
    """Make foreach the default for lazy tensors (idempotent)."""
    for name in _READERS:
        module = importlib.import_module(name)
        current = getattr(module, _NAME, None)
        if current is None or hasattr(current, "lazyrt_original"):
            continue
        setattr(module, _NAME, _with_lazy(current))
