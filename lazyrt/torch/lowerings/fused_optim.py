"""torch's fused Adam ops (``_fused_adam``, ``_fused_adamw``) as lazyrt lowerings:
one aten call records a whole optimizer step.

``torch.optim.Adam/AdamW(fused=True)`` make one ``_fused_adam(w)_`` call per step
for all parameters; functionalization turns it into the functional op lowered
here, which returns every updated list. Recording the step this way costs one
trip through torch's dispatcher and functionalization per step instead of one
per parameter per ``_foreach_`` op (ten for AdamW): the graph is the same
arithmetic either way and the planner fuses it the same way.

The arithmetic follows torch's multi-tensor (``foreach``) implementation op for
op, so a lazy step rounds as torch's ``foreach`` and for-loop steps do:

- the step counts may be CPU tensors (what the ``foreach`` path keeps): the bias
  corrections are then Python floats, as there, passed as runtime scalars; or
  lazy tensors (what ``fused=True`` keeps): computed in the graph in float64;
- ``lr`` and the other hyper-parameters are runtime scalars, so a learning-rate
  schedule never recompiles;
- ``grad_scale`` divides the gradients and a nonzero ``found_inf`` keeps every
  tensor as it was (AMP's contract for these ops);
- float16 parameters take eager's ops themselves (the lowerings of ``lerp``,
  ``addcmul``, ``addcdiv``...), so each rounds once as eager's does: the step
  matches eager's for-loop and ``foreach`` steps bit for bit.

:mod:`lazyrt.torch.optim` routes Adam/AdamW's ``foreach`` path here on lazy
parameters. (``_fused_sgd_`` has no Meta kernel in torch, so functionalization
cannot take it: SGD's ``fused=True`` takes the multi-tensor path there.)
"""
from __future__ import annotations

import torch

from ... import _recorder as R
from ... import dtypes as D
from ...api import pointwise as P
from ... import _recorder_shapes as S
from ..operands import opmath, value
from ..opmath import fused_multiply_add
from ..registry import LOWERINGS, register_lowering
from ..tensor import LazyTensor, raw, runtime_scalar

aten = torch.ops.aten


def _eager(overload, *args, **kwargs):
    """``overload``'s lowering on lazyrt values (and numbers): one eager op, rounded
    as eager rounds it."""
    return LOWERINGS[overload](*(raw(a) if isinstance(a, R.TensorBase) else a
                                 for a in args), **kwargs)


def _fused_reduced_step(x, g, m, v, vmax, step, *, lr, beta1, beta2, weight_decay, eps,
                        decoupled):
    """One float16 parameter's step as eager's fused CPU kernel takes it: in float32
    throughout (lerp's multiply-add fused), each stored tensor rounded once."""
    code = x._node.dtype
    f32 = D.float32
    sc = _Scalars(D.FLOAT32)
    p, g, m, v = (P.astype(t, f32) for t in (x, g, m, v))
    if weight_decay != 0:
        if decoupled:
            p = p * (sc(1 - lr * weight_decay) if isinstance(lr, float)
                     else P.astype(runtime_scalar(1.0, D.FLOAT64) - P.astype(lr, D.float64)
                                   * runtime_scalar(weight_decay, D.FLOAT64), f32))
        else:
            g = g + p * sc(weight_decay)
    m = fused_multiply_add(sc(1 - beta1), g - m, m)
    v = v * sc(beta2) + sc(1 - beta2) * g * g
    step_size, bc2_sqrt = _step_size_and_bc2(step, lr, beta1, beta2, D.FLOAT32, sc)
    if vmax is not None:
        vmax = P.maximum(P.astype(vmax, f32), v)
    denom = P.sqrt(v if vmax is None else vmax) / bc2_sqrt + sc(eps)
    p = p + step_size * m / denom
    out = D.DTYPES[code]
    return (P.astype(p, out), P.astype(m, out), P.astype(v, out),
            None if vmax is None else P.astype(vmax, out))


def _reduced_step(x, g, m, v, vmax, step, *, lr, beta1, beta2, weight_decay, eps,
                  decoupled):
    """One float16 parameter's step, op for op as torch's for-loop and ``foreach``
    Adam run it (each op an eager op): ``(param, exp_avg, exp_avg_sq, max)``."""
    if weight_decay != 0:
        if decoupled:
            x = _eager(aten.mul.Tensor, x, 1 - lr * weight_decay if isinstance(lr, float)
                       else raw(runtime_scalar(1.0, lr._node.dtype)
                                - lr * runtime_scalar(weight_decay, lr._node.dtype)))
        else:
            g = _eager(aten.add.Tensor, g, x, alpha=weight_decay)
    m = _eager(aten.lerp.Scalar, m, g, 1 - beta1)
    v = _eager(aten.addcmul.default, _eager(aten.mul.Tensor, v, beta2), g, g,
               value=1 - beta2)
    s = step.item()
    bc1, bc2_sqrt = 1 - beta1 ** s, (1 - beta2 ** s) ** 0.5
    step_size = -(lr / bc1) if isinstance(lr, float) else raw(-(lr / runtime_scalar(
        bc1, lr._node.dtype)))
    if vmax is not None:
        vmax = _eager(aten.maximum.default, vmax, v)
    denom = _eager(aten.sqrt.default, v if vmax is None else vmax)
    denom = _eager(aten.add.Tensor, _eager(aten.div.Tensor, denom, bc2_sqrt), eps)
    x = _eager(aten.addcdiv.default, x, m, denom, value=step_size)
    return x, m, v, vmax


class _Scalars:
    """Runtime scalars of one dtype, made once per call (a value shared by every
    parameter is one graph parameter, not one per tensor)."""

    def __init__(self, code: int):
        self.code = code
        self._made: dict = {}

    def __call__(self, x):
        key = (type(x), x)
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = runtime_scalar(x, self.code)
        return found


def _lr_value(lr):
    """``lr`` as a Python float or a lazyrt tensor (the ``tensor_lr`` overloads)."""
    if isinstance(lr, torch.Tensor):
        if type(lr) is LazyTensor:
            return value(lr)
        return lr.item()  # a CPU tensor: its value now, as the eager kernel reads it
    return lr


def _as(x, code, scalars):
    """A Python number or a lazyrt tensor as an operand of dtype ``code``."""
    if isinstance(x, (int, float)):
        return scalars(x)
    return x if x._node.dtype == code else P.astype(x, D.DTYPES[code])


def _step_size_and_bc2(step, lr, beta1, beta2, code, scalars):
    """``(-lr / (1 - beta1**step), sqrt(1 - beta2**step))`` as operands of dtype
    ``code``, computed in double as torch's multi-tensor path computes them in
    Python: from a CPU step count, Python floats; from a lazyrt one, float64 graph
    values rounded to ``code`` at the end (runtime values: no recompiles)."""
    if isinstance(step, torch.Tensor):
        s = step.item()
        if isinstance(lr, float):
            return scalars((lr / (1 - beta1 ** s)) * -1), scalars((1 - beta2 ** s) ** 0.5)
        bc1, bc2_sqrt = 1 - beta1 ** s, (1 - beta2 ** s) ** 0.5
        return -(_as(lr, code, scalars) / scalars(bc1)), scalars(bc2_sqrt)
    f64 = D.float64
    s = P.astype(step, f64)
    one = runtime_scalar(1.0, D.FLOAT64)
    bc1 = one - P.power(runtime_scalar(beta1, D.FLOAT64), s)
    bc2_sqrt = P.sqrt(one - P.power(runtime_scalar(beta2, D.FLOAT64), s))
    lr64 = runtime_scalar(lr, D.FLOAT64) if isinstance(lr, float) else P.astype(lr, f64)
    step_size = P.negative(lr64 / bc1)
    return P.astype(step_size, D.DTYPES[code]), P.astype(bc2_sqrt, D.DTYPES[code])


def adam_values(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, *, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, decoupled, grad_scale=None,
                found_inf=None):
    """One Adam (``decoupled``: AdamW) step on lazyrt values: the new parameters,
    first and second moments, (``amsgrad``) maximal second moments and gradients,
    as lists. The gradients change only with ``grad_scale``: torch's fused kernels
    leave them unscaled (divided by it) unless ``found_inf`` skips the step.

    ``steps`` holds each parameter's step count, already incremented: a CPU torch
    tensor or a lazyrt value. ``lr`` is a Python float or a lazyrt value;
    ``grad_scale`` and ``found_inf`` are lazyrt values or None."""
    out_p, out_m, out_v, out_max, out_g = [], [], [], [], []
    by_code: dict = {}
    skip = None
    if found_inf is not None:  # AMP: where found_inf is nonzero the step changes nothing
        skip = found_inf != runtime_scalar(0, found_inf._node.dtype)

    def kept(new, old):
        return new if skip is None else S.where(skip, old, new)
    for i, old_p in enumerate(params):
        g, m, v = grads[i], exp_avgs[i], exp_avg_sqs[i]
        code = old_p._node.dtype
        sc = by_code.get(code) or by_code.setdefault(code, _Scalars(code))
        x = old_p
        if grad_scale is not None:
            g = g / _as(grad_scale, code, sc)
        out_g.append(kept(g, grads[i]))
        if maximize:
            g = P.negative(g)
        if code != opmath(code):
            step_of = _reduced_step if isinstance(steps[i], torch.Tensor) else \
                _fused_reduced_step
            x, m_new, v_new, big = step_of(
                x, g, m, v, max_exp_avg_sqs[i] if amsgrad else None, steps[i], lr=lr,
                beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps,
                decoupled=decoupled)
            if amsgrad:
                out_max.append(kept(big, max_exp_avg_sqs[i]))
            out_p.append(kept(x, old_p))
            out_m.append(kept(m_new, m))
            out_v.append(kept(v_new, v))
            continue
        if weight_decay != 0:
            if decoupled:
                x = x * _as(1 - lr * weight_decay if isinstance(lr, float)
                            else sc(1.0) - lr * sc(weight_decay), code, sc)
            else:
                g = g + x * sc(weight_decay)
        # lerp(m, g, 1 - beta1), torch's branch for a weight below 0.5
        w = 1 - beta1
        m_new = m + sc(w) * (g - m) if abs(w) < 0.5 else g - (g - m) * sc(1 - w)
        v_new = v * sc(beta2) + sc(1 - beta2) * (g * g)
        step_size, bc2_sqrt = _step_size_and_bc2(steps[i], lr, beta1, beta2, code, sc)
        if amsgrad:
            big = P.maximum(max_exp_avg_sqs[i], v_new)
            out_max.append(kept(big, max_exp_avg_sqs[i]))
            denom = P.sqrt(big)
        else:
            denom = P.sqrt(v_new)
        denom = denom / bc2_sqrt + sc(eps)
        x = x + step_size * (m_new / denom)
        out_p.append(kept(x, old_p))
        out_m.append(kept(m_new, m))
        out_v.append(kept(v_new, v))
    return out_p, out_m, out_v, out_max, out_g


def _values(tensors):
    return [value(t) for t in tensors]


def _adam(decoupled):
    def lower(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr,
              beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
              found_inf=None):
        steps = [value(s) if type(s) is LazyTensor else s for s in state_steps]
        out_p, out_m, out_v, out_max, out_g = adam_values(
            _values(params), _values(grads), _values(exp_avgs), _values(exp_avg_sqs),
            _values(max_exp_avg_sqs) if amsgrad else [], steps, lr=_lr_value(lr),
            beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=amsgrad,
            maximize=maximize, decoupled=decoupled,
            grad_scale=None if grad_scale is None else value(grad_scale),
            found_inf=None if found_inf is None else value(found_inf))
        if not amsgrad:  # not read, not changed
            out_max = _values(max_exp_avg_sqs)
        return out_p, out_g, out_m, out_v, out_max
    return lower


for _overload in ("default", "tensor_lr"):
    register_lowering(getattr(aten._fused_adam, _overload))(_adam(decoupled=False))
    register_lowering(getattr(aten._fused_adamw, _overload))(_adam(decoupled=True))
