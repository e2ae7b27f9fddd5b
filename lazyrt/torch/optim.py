"""torch's optimizers on the lazy device: the multi-tensor path by default, and
one aten call per step for Adam and AdamW.

``torch.optim`` and ``torch.nn.utils.clip_grad_norm_`` pick their implementation
from the parameters' device when ``foreach`` is not given: the multi-tensor one
on the devices torch lists as having foreach kernels (CUDA, XPU, ...), a
Python loop of single-tensor ops elsewhere. The lazy device belongs in that
list: a ``_foreach_*`` call reaches lazyrt once for all parameters and is
unrolled while recording (:mod:`lazyrt.torch.dispatch`), where the loop makes
every in-place op of every parameter a separate trip through torch's dispatcher
and functionalization. Both compute the same formulas; ``foreach=False`` still
picks the loop.

The lazy device is also one of torch's fused-kernel devices (``fused=True``):
``_fused_adam`` and ``_fused_adamw`` are lowerings (:mod:`lazyrt.torch.lowerings.fused_optim`);
SGD's fused step takes its multi-tensor path. And Adam/AdamW's multi-tensor step on lazy
parameters records through ``_fused_adam(w)_`` with the same arithmetic in the
same order (the multi-tensor step makes ten ``_foreach_`` calls, each a trip
through functionalization per parameter; one fused call records the same graph).
The routing is taken only where the two are the same computation: every tensor
lazy and real, no ``capturable``, ``differentiable`` or AMP scaling, a float
learning rate. The step counts stay where the multi-tensor path keeps them (CPU
tensors in the optimizer's state); the fused op reads each as a runtime scalar
and computes the bias corrections in float64, as Python does there.

:func:`install` makes these changes in each torch module that holds its own
reference to what it changes, marking each replacement with ``lazyrt_original``.
"""
from __future__ import annotations

import importlib

import torch

from .lowerings.fused_optim import adam_values
from .tensor import DEVICE, LazyTensor, unwrap

#: (function name, the modules that look it up by their own global name)
_DEVICE_LISTS = (
    ("_get_foreach_kernels_supported_devices",
     ("torch.utils._foreach_utils", "torch.optim.optimizer", "torch.optim.swa_utils")),
    ("_get_fused_kernels_supported_devices",
     ("torch.utils._foreach_utils", "torch.optim.optimizer")),
)


def _with_lazy(original):
    def devices() -> list:
        return [*original(), "lazy"]
    devices.__doc__ = original.__doc__
    devices.lazyrt_original = original  # marks it installed (and keeps torch's)
    return devices


def _all_lazy(*lists) -> bool:
    return all(t.device == DEVICE and not t.is_complex() for ts in lists for t in ts)


def _assign(t, new_value):
    """Write ``new_value`` into the user tensor ``t`` as functionalization writes an
    in-place op's result, and bump ``t``'s version as an in-place op does for autograd.

    Where ``t`` shares its functional storage with another tensor (a view of a
    parameter, a ``.data`` alias, a tensor saved for a retained backward), the
    update is committed to the storage and every alias sees it, as
    functionalization's own in-place kernels do. Where ``t`` alone holds it (the
    usual case for a parameter after backward: the use count is 2, ``t`` and the
    storage object asked), ``t`` gets a fresh storage whose base is the new value
    instead: a storage with updates marks every view taken from it later as stale
    at birth, so each ``weight.t()`` of the next forward (and each view of it in
    backward) would be computed twice, once when taken and once more on first use
    (measured: 195 replayed view ops in the benchmark transformer's step)."""
    torch._functionalize_replace(t, LazyTensor(new_value))
    if torch._C._storage_Use_Count(t.untyped_storage()._cdata) == 2:
        torch._C._unsafe_reset_storage(t)
    else:
        torch._functionalize_commit_update(t)
        torch._functionalize_sync(t)
    torch.autograd.graph.increment_version(t)


def _record_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *,
                 amsgrad, beta1, beta2, lr, weight_decay, eps, maximize, decoupled,
                 grad_scale=None, found_inf=None):
    """One Adam/AdamW step on lazy tensors, recorded straight into lazyrt
    (:func:`lazyrt.torch.lowerings.fused_optim.adam_values`) and written back into the
    parameters and moments; the gradients are only read (unless AMP's
    ``grad_scale`` is given: torch's fused step leaves them unscaled)."""
    torch._foreach_add_(state_steps, 1)
    steps = [unwrap(s) if s.device.type == "lazy" else s for s in state_steps]
    if isinstance(lr, torch.Tensor):  # fused=True takes a tensor learning rate
        lr = unwrap(lr).reshape(()) if lr.device.type == "lazy" else float(lr.item())
    else:
        lr = float(lr)
    out_p, out_m, out_v, out_max, out_g = adam_values(
        [unwrap(t) for t in params], [unwrap(t) for t in grads],
        [unwrap(t) for t in exp_avgs], [unwrap(t) for t in exp_avg_sqs],
        [unwrap(t) for t in max_exp_avg_sqs] if amsgrad else [], steps, lr=lr,
        beta1=float(beta1), beta2=float(beta2), weight_decay=float(weight_decay),
        eps=float(eps), amsgrad=amsgrad, maximize=maximize, decoupled=decoupled,
        grad_scale=None if grad_scale is None else unwrap(grad_scale),
        found_inf=None if found_inf is None else unwrap(found_inf))
    written = [(params, out_p), (exp_avgs, out_m), (exp_avg_sqs, out_v),
               (max_exp_avg_sqs if amsgrad else (), out_max)]
    if grad_scale is not None:  # the fused kernels leave the gradients unscaled
        written.append((grads, out_g))
    for targets, values in written:
        for t, v in zip(targets, values):
            _assign(t, v)
    if found_inf is not None:  # a skipped step does not count, as in torch's
        torch._foreach_sub_(state_steps, [found_inf] * len(state_steps))


def _adam_path(original, fused: bool):
    """torch's ``_multi_tensor_adam`` (``fused=False``) or ``_fused_adam``, recorded
    through :func:`_record_adam` on lazy parameters where that is the same
    computation (see the module docstring), ``original`` elsewhere."""
    def step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
             grad_scale, found_inf, *, amsgrad, has_complex, beta1, beta2, lr,
             weight_decay, eps, maximize, capturable, differentiable, decoupled_weight_decay,
             **rest):
        kwargs = dict(amsgrad=amsgrad, has_complex=has_complex, beta1=beta1, beta2=beta2,
                      lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize,
                      capturable=capturable, differentiable=differentiable,
                      decoupled_weight_decay=decoupled_weight_decay, **rest)
        same = (not rest and params and not has_complex and not differentiable
                and (fused or (not capturable and grad_scale is None and found_inf is None))
                and all(isinstance(x, (int, float)) for x in (beta1, beta2))
                and (isinstance(lr, (int, float)) or (fused and isinstance(lr, torch.Tensor)
                                                      and lr.numel() == 1))
                and _all_lazy(params, grads, exp_avgs, exp_avg_sqs)
                and (fused or all(s.device.type == "cpu" for s in state_steps)))
        if not same:
            return original(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                            state_steps, grad_scale, found_inf, **kwargs)
        _record_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                     amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr,
                     weight_decay=weight_decay, eps=eps, maximize=maximize,
                     decoupled=decoupled_weight_decay, grad_scale=grad_scale,
                     found_inf=found_inf)
    step.lazyrt_original = original
    return step


def _sgd_path(original):
    """torch's ``_fused_sgd``; on lazy parameters, the multi-tensor step (the same
    formulas: torch has no Meta kernel for ``_fused_sgd_``, which functionalization
    needs). AMP's scaled steps have no lazy path: torch's own error stands."""
    def step(params, grads, momentum_buffer_list, grad_scale, found_inf, **kwargs):
        if grad_scale is None and found_inf is None and params and _all_lazy(params):
            from torch.optim import sgd
            return sgd._multi_tensor_sgd(params, grads, momentum_buffer_list, None, None,
                                         **kwargs)
        return original(params, grads, momentum_buffer_list, grad_scale, found_inf,
                        **kwargs)
    step.lazyrt_original = original
    return step


#: (module, function name, wrapper)
_PATHS = (("torch.optim.adam", "_multi_tensor_adam", lambda f: _adam_path(f, fused=False)),
          ("torch.optim.adam", "_fused_adam", lambda f: _adam_path(f, fused=True)),
          ("torch.optim.sgd", "_fused_sgd", _sgd_path))


def install():
    """Make foreach the default for lazy tensors, fused kernels available for them,
    and Adam's multi-tensor step one fused call on them (idempotent)."""
    for name, readers in _DEVICE_LISTS:
        for reader in readers:
            module = importlib.import_module(reader)
            current = getattr(module, name, None)
            if current is None or hasattr(current, "lazyrt_original"):
                continue
            setattr(module, name, _with_lazy(current))
    for reader, name, wrapper in _PATHS:
        module = importlib.import_module(reader)
        current = getattr(module, name, None)
        if current is not None and not hasattr(current, "lazyrt_original"):
            setattr(module, name, wrapper(current))
