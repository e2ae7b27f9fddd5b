"""Memoized reference checks for the in-place ops functionalization runs on meta.

Before torch's functionalization turns ``p.addcmul_(g, g, value=v)`` into its
out-of-place op, it runs the in-place op once on meta tensors to raise eager's
errors (``a.add_(b)`` where ``b`` broadcasts past ``a``, a float result into an
int tensor). For the elementwise in-place ops those meta kernels are PyTorch's
Python references: 20 to 400 µs a call, measured here, against ~10 µs for lazyrt
to record the op itself, and an AdamW step makes six such calls per parameter.

A meta kernel sees no values, only metadata: for these ops its outcome is a pure
function of each tensor's shape, strides, dtype and device and of each other
argument's *type* (an ``alpha`` float on an int tensor fails whatever its value).
So each kernel is wrapped with a memo of the argument signatures it has accepted:
a signature seen before returns ``self`` at once, as the kernel would; anything
else (a first call, a rejected call, symbolic shapes, an unhashable argument) runs
torch's own kernel. Errors are never memoized, so they are raised every time.

The wrapper replaces torch's Meta registration of these overloads for the whole
process (FakeTensor and ``torch.compile`` use it too), with identical results.
Only ops whose meta checks depend on types alone are wrapped: ``pow_`` (a negative
integer exponent), ``fill_`` and ``masked_fill_`` (a value's range) are not.
"""
from __future__ import annotations

import torch
from torch._C import DispatchKey

aten = torch.ops.aten

#: base names whose in-place overloads (``add_``, ``_foreach_add_``...) are wrapped
ELEMENTWISE = ("add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "rsqrt",
               "neg", "abs", "exp", "log", "reciprocal", "sigmoid", "tanh", "relu",
               "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "sign", "zero")
#: signatures kept per op before the memo starts over (a guard against shape churn)
LIMIT = 4096

_lib = None
WRAPPED: dict = {}


def _signature(x):
    if isinstance(x, torch.Tensor):
        return (x.shape, x.stride(), x.dtype, x.device.type)
    if isinstance(x, (list, tuple)):
        return tuple(_signature(y) for y in x)
    if x is None or isinstance(x, (str, torch.dtype)):
        return x
    return type(x)


def _small_sizes(args):
    """Each tensor size of ``args`` mapped to a small one with the same relations:
    0 and 1 stay, every other size becomes 2, 3... in order. Broadcasting (and so
    every shape check of an elementwise op) sees the same equalities."""
    sizes = sorted({d for a in args if isinstance(a, torch.Tensor) for d in a.shape} - {0, 1})
    small = {0: 0, 1: 1}
    small.update((d, i + 2) for i, d in enumerate(sizes))
    return small


def _eager_check(op, args, kwargs):
    """Run ``op`` eagerly on the CPU on ones of the arguments' dtypes and small
    sizes, and raise what it raises. torch's meta references miss checks its CPU
    kernels make (``int64.mul_(float32)``: "result type Float can't be cast to the
    desired output type Long" in eager, accepted on meta), and eager CPU is
    lazyrt's reference. Only plain meta tensors (what functionalization passes)
    are checked: a FakeTensor stands for another device, whose rules may differ."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors or any(t.device.type != "meta" for t in tensors):
        return
    small = _small_sizes(args)

    def stand_in(x):
        if isinstance(x, torch.Tensor):
            return torch.ones([small[d] for d in x.shape], dtype=x.dtype, device="cpu")
        return x
    try:
        op(*[stand_in(a) for a in args], **{k: stand_in(v) for k, v in kwargs.items()})
    except RuntimeError as exc:
        raise RuntimeError(str(exc)) from None


def _memoized(op, kernel):
    seen: set = set()

    def meta(*args, **kwargs):
        try:
            key = (tuple(_signature(a) for a in args),
                   tuple((k, _signature(v)) for k, v in kwargs.items()))
            hit = key in seen  # hashing raises for symbolic sizes: not memoized
        except (TypeError, RuntimeError):
            return kernel(*args, **kwargs)
        if hit:
            return args[0]
        out = kernel(*args, **kwargs)
        _eager_check(op, args, kwargs)
        if len(seen) >= LIMIT:
            seen.clear()
        seen.add(key)
        return out
    meta.kernel = kernel
    meta.seen = seen
    return meta


def _inplace_overloads():
    names = [n + "_" for n in ELEMENTWISE] + [f"_foreach_{n}_" for n in ELEMENTWISE]
    for name in names:
        packet = getattr(aten, name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            # torch registers a Python Meta kernel for exactly these (not for composite
            # ops, which decompose before reaching Meta)
            if (op._schema.is_mutable and DispatchKey.Meta in op.py_kernels
                    and not torch._C._dispatch_has_kernel_for_dispatch_key(
                        op.name(), "CompositeImplicitAutograd")):
                yield op


def install():
    """Wrap the Meta kernels of the in-place elementwise ops (once per process)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    for op in _inplace_overloads():
        wrapped = _memoized(op, op.py_kernels[DispatchKey.Meta])
        _lib.impl(op, wrapped, "Meta")
        WRAPPED[op] = wrapped
