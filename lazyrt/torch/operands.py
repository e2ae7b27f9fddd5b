"""Turning the arguments of an aten call into lazyrt operands, with torch's
type promotion (not NumPy's) and torch's device rule.

Every tensor operand of a lowering goes through :func:`operand`: a lazy
tensor becomes its lazyrt value cast to the op's computation dtype; a Python
number or a 0-d CPU tensor becomes a *runtime scalar* of that dtype (its
value is a graph parameter, so a changing learning rate never recompiles);
any other CPU tensor is the same error eager torch raises for cpu/cuda.

Half precision follows eager's "opmath" rule, not NumPy's: an aten op on
:data:`REDUCED_PRECISION` floats computes in float32 (:func:`promoted` says so)
and rounds its result once, where lazyrt's native API rounds after every
primitive. The lowerings record that as casts (up, the op in float32, down once),
so the graph itself carries the rule and no backend needs to know of it.
"""
from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as KIND
from torch._prims_common import elementwise_dtypes

from .. import _recorder as R
from .. import dtypes as D
from .tensor import CODE_OF_TORCH, LazyTensor, code_of, number_of, runtime_scalar

__all__ = ["KIND", "REDUCED_PRECISION", "operand", "promoted", "value", "check_devices",
           "cpu_scalar", "opmath", "up", "down"]

_NUMBER = (bool, int, float)

#: torch's reduced-precision floats: eager computes an op on them in float32 and
#: rounds once (``at::opmath_type``). The one place a new one (bfloat16) is named.
REDUCED_PRECISION = frozenset({torch.float16, torch.bfloat16})
_REDUCED = frozenset(CODE_OF_TORCH[t] for t in REDUCED_PRECISION if t in CODE_OF_TORCH)


def opmath(code: int) -> int:
    """The dtype eager computes an op on dtype ``code`` in: float32 for the reduced
    floats, ``code`` itself otherwise."""
    return D.FLOAT32 if code in _REDUCED else code


def up(x):
    """A lazyrt value in the dtype eager computes it in (:func:`opmath`)."""
    code = x._node.dtype
    return x if code not in _REDUCED else R.wrap(R.cast(x._node, D.FLOAT32))


def down(x, code: int):
    """A value computed in :func:`opmath` dtype rounded once to ``code``."""
    return x if x._node.dtype == code else R.wrap(R.cast(x._node, code))


def value(x):
    """The lazyrt tensor behind a raw lazy tensor argument."""
    if type(x) is LazyTensor:
        return x.value
    raise TypeError(f"lazyrt.torch: expected a lazy tensor, got {_describe(x)}")


def _describe(x):
    if isinstance(x, torch.Tensor):
        return f"a tensor on {x.device} (shape {tuple(x.shape)}, dtype {x.dtype})"
    return f"{type(x).__name__} {x!r}"


def check_devices(op, args):
    """Eager torch's rule: a lazy tensor meets CPU tensors only when they are 0-d."""
    for a in args:
        t = type(a)
        if t is LazyTensor or t in _NUMBER:
            continue
        if t is list or t is tuple:
            check_devices(op, a)
        elif isinstance(a, torch.Tensor) and a.dim() != 0:
            raise RuntimeError(
                f"lazyrt.torch: {op}: expected all tensors to be on the same device, but "
                f"found at least two devices, lazy and {a.device} (a {a.device} tensor of "
                f"shape {tuple(a.shape)}); move it with .to('lazy') or the result with .cpu()")


def operand(x, code: int, via: int | None = None):
    """``x`` (lazy tensor, 0-d CPU tensor, Python number) as a lazyrt tensor of
    dtype ``code``; rounded to dtype ``via`` on the way where given (eager's
    kernels for ``add``, ``pow``, comparisons... round a float16 op's scalar to
    float16, those for ``mul``, ``div``... keep it in float32)."""
    t = type(x)
    if t is LazyTensor:
        v = x.value
        if via is not None and v._node.dtype != via:
            v = R.wrap(R.cast(v._node, via))
        return v if v._node.dtype == code else R.wrap(R.cast(v._node, code))
    if t in _NUMBER:
        return runtime_scalar(x if via is None else number_of(x, via), code)
    if isinstance(x, torch.Tensor):
        number = cpu_scalar(x)
        if number is not None:
            return runtime_scalar(number if via is None else number_of(number, via), code)
        raise RuntimeError(f"lazyrt.torch: expected a lazy tensor or a 0-d CPU tensor, "
                           f"got {_describe(x)}")
    raise TypeError(f"lazyrt.torch: cannot use {_describe(x)} as a tensor operand")


def cpu_scalar(t: torch.Tensor):
    """The number in a 0-d CPU tensor (known when the op is recorded), else None."""
    return t.item() if t.dim() == 0 and t.device.type == "cpu" else None


#: (kind, default dtype, operand signatures) -> (computation code, result code)
_PROMOTIONS: dict = {}


def _signature(x):
    # all torch's rule looks at: a tensor's dtype and whether it is 0-d, a number's type
    # (a lazy tensor's from its lazyrt node: torch's own attributes cost more)
    t = type(x)
    if t is LazyTensor:
        node = x.value._node
        return node.dtype, not node.shape
    if isinstance(x, torch.Tensor):
        return CODE_OF_TORCH.get(x.dtype, x.dtype), x.dim() == 0
    return t


def promoted(kind, *args):
    """``(computation code, result code)`` of an elementwise op under torch's
    promotion rule (dimensioned tensors over 0-d tensors over Python numbers).
    The computation dtype of a float16 op is float32 (:func:`opmath`), except
    for ``KIND.NO_OPMATH``.

    torch's own ``elementwise_dtypes`` decides; its answer is cached by the
    operands' signatures (it costs a few microseconds, a lookup far less)."""
    if len(args) == 2:  # most calls: spelled out, no generator per call
        key = (kind, torch.get_default_dtype(), _signature(args[0]), _signature(args[1]))
    else:
        key = (kind, torch.get_default_dtype()) + tuple(map(_signature, args))
    found = _PROMOTIONS.get(key)
    if found is None:
        comp, result = elementwise_dtypes(*args, type_promotion_kind=kind)
        found = code_of(comp), code_of(result)
        _PROMOTIONS[key] = found
    return found
