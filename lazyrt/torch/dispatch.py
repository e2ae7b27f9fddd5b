"""The order every aten call on a lazy tensor is tried in.

1. barriers (``BARRIERS``): ``_local_scalar_dense`` (``item()``, ``bool()``) and
   ``_to_copy`` to another device (``cpu()``, ``print``) compute the value, and so
   does a ``copy_`` into a CPU tensor (:func:`install_cross_device_copy`: it runs
   before functionalization, at the autograd key);
2. native lowerings (``LOWERINGS``), then random draws and dropout (``RANDOM``:
   Philox, or torch's draws in eager-mask mode);
3. in-place ops on raw lazy tensors (inside decompositions only; user tensors are
   functionalized) as their out-of-place op, rebound;
4. ``_foreach_*`` unrolled into one call per tensor;
5. ``func.decompose()`` for composite ops;
6. PyTorch's decomposition tables (core ATen plus chosen entries);
7. a counted fallback: inputs computed, the op run eagerly on the CPU, the
   result fed back in as data; counted per op in
   ``lazyrt.metrics.snapshot()["fallbacks"]`` and warned once per op with the
   user's line.

The tables are :mod:`lazyrt.torch.registry`'s, filled by importing
:mod:`lazyrt.torch.lowerings`; importing this module installs :func:`dispatch` as
where every aten call on a lazy tensor goes.
"""
from __future__ import annotations

import warnings

import torch
from torch._decomp import core_aten_decompositions, decomposition_table
from torch.utils._pytree import tree_map

from .. import _recorder as R
from .._source_lines import source_line
from .. import dtypes as D
from ..api import creation as C
from ..errors import DTypeError, PerformanceWarning, ShapeError
from ..metrics import metrics
from . import lowerings as _lowerings  # noqa: F401  (fills the registry's tables)
from .operands import check_devices
from .registry import BARRIERS, KEEP_DECOMPOSITION, LOWERINGS, RANDOM
from .tensor import (LazyTensor, code_of, from_cpu, install_dispatch, site, to_torch_cpu,
                     user_frame)
from .tensor import depth  # noqa: F401  (read as dispatch.depth() by the benchmarks)
from .tensor import dispatch_state as _state

aten = torch.ops.aten
#: ops that take CPU tensors beside lazy ones, as eager torch lets them beside cuda:
#: copy_ moves data between devices; index tensors may live on the CPU
CROSS_DEVICE = frozenset({aten.copy.default, aten.index.Tensor, aten.index_put.default,
                          aten.index_put_.default})


def _lazy(out):
    if isinstance(out, R.TensorBase):
        return LazyTensor(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_lazy(o) for o in out)
    return out


def dispatch(func, args, kwargs):
    pure = _PURE.get(id(func))
    if pure is not None and not kwargs:
        try:
            out = pure(*args)
        except Exception:  # noqa: BLE001  the full path below raises it as eager torch does
            out = NotImplemented
        if out is not NotImplemented:
            return LazyTensor(out)
    state = _state
    level = getattr(state, "depth", 0)
    state.depth = level + 1
    try:
        return _dispatch(func, args, kwargs)
    finally:
        state.depth = level


#: per overload, keyed by ``id`` (an OpOverload hashes in Python, so looking it up
#: in each table costs more than the rest of a lowered call): what every step below
#: needs to know of it, and the overload itself (kept alive, so its id stays its
#: own). Filled on first use; the tables are complete once this module is imported.
_PLANS: dict = {}


#: the fast lane, keyed as ``_PLANS``: overloads whose lowering records and returns
#: one lazyrt tensor and never calls back into torch (views, pointwise, matmul), so
#: none of the steps below can apply and no nesting depth is needed. About two
#: thirds of a transformer step's ops (most of them views functionalization
#: replays) take it; a call with keywords, one the lowering declines, and any
#: error go the full way (which checks devices first and words errors as eager
#: torch does).
_PURE: dict = {}
PURE_OPS = (
    aten.view_copy.default, aten._unsafe_view.default, aten.t_copy.default,
    aten.permute_copy.default, aten.expand_copy.default, aten.detach_copy.default,
    aten.alias_copy.default, aten.transpose_copy.int, aten.unsqueeze_copy.default,
    aten.squeeze_copy.dim, aten.squeeze_copy.dims, aten.squeeze_copy.default,
    aten.select_copy.int, aten.slice_copy.Tensor,
    aten.mm.default, aten.bmm.default, aten.addmm.default, aten.sum.dim_IntList,
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.mul.Tensor, aten.mul.Scalar,
    aten.div.Tensor, aten.neg.default, aten.exp.default, aten.tanh.default,
    aten.relu.default, aten.threshold_backward.default, aten.where.self)


def _plan(func):
    name = func._schema.name
    plan = (BARRIERS.get(func), LOWERINGS.get(func), func in CROSS_DEVICE, RANDOM.get(func),
            name.endswith("_"), name.startswith("aten::_foreach_"), DECOMPOSITIONS.get(func),
            func)
    _PLANS[id(func)] = plan
    return plan


def _dispatch(func, args, kwargs):
    barrier, lower, cross_device, random, inplace, foreach, decomp, _ = \
        _PLANS.get(id(func)) or _plan(func)
    if barrier is not None:
        return barrier(*args, **kwargs)
    if lower is not None:
        if not cross_device:
            check_devices(func, args)
        try:
            out = lower(*args, **kwargs)
        except (ShapeError, DTypeError) as exc:
            if isinstance(exc, IndexError):  # a dim out of range: IndexError in eager too
                raise
            # eager torch raises RuntimeError for bad shapes and dtypes; code catches that
            raise RuntimeError(f"lazyrt.torch: {func}: {exc}") from exc
        if out is not NotImplemented:  # a form the lowering does not take: go on
            return LazyTensor(out) if isinstance(out, R.TensorBase) else _lazy(out)
    if random is not None:
        return random(*args, **kwargs)
    if inplace and args and type(args[0]) is LazyTensor:
        out = _inplace(func, args, kwargs)
        if out is not NotImplemented:
            return out
    if foreach:
        return _foreach(func, args, kwargs)
    out = func.decompose(*args, **kwargs)
    if out is not NotImplemented:
        return out
    if decomp is not None:
        return decomp(*args, **kwargs)
    return fallback(func, args, kwargs)


# --- cpu_tensor.copy_(lazy_tensor), at the autograd key ------------------------------

#: the autograd kernel every backend's ``copy_`` runs (torch's VariableType one), taken
#: before :func:`install_cross_device_copy` puts its own in front of it for lazy tensors
_COPY_AUTOGRAD = torch._C._dispatch_get_computed_kernel_for_dispatch_key(
    "aten::copy_", torch._C.DispatchKey.AutogradLazy)
_copy_library = None


def _copy_(keyset, self, src, non_blocking=False):
    """``aten::copy_`` on lazy tensors, at their autograd key (the first one a call
    that involves a lazy tensor reaches). ``cpu.copy_(lazy)`` is a barrier: torch's
    functionalization refuses to write a functional tensor into a plain one (an
    internal assert), so the value comes to the destination's device first and
    the copy is the destination device's own (dtype conversion, broadcasting,
    strided destinations, views and autograd as eager; counted at the user's line).
    Every other ``copy_`` goes on to torch's autograd kernel as before."""
    if self.device.type != "lazy" and src.device.type == "lazy":
        return self.copy_(src.to(self.device), non_blocking)
    return _COPY_AUTOGRAD.call_boxed(keyset, self, src, non_blocking)


def install_cross_device_copy():
    """Register :func:`_copy_` (once): ``cpu_tensor.copy_(lazy_tensor)``,
    ``cpu[...] = lazy`` and ``load_state_dict`` of a lazy state dict into an eager
    model then fill the CPU tensor, as eager does across devices."""
    global _copy_library
    if _copy_library is None:
        _copy_library = torch.library.Library("aten", "IMPL")
        _copy_library.impl("copy_", _copy_, "AutogradLazy", with_keyset=True)


# --- in-place on raw lazy tensors, and _foreach_ ---------------------------------------------

def out_of_place(func):
    """The out-of-place twin of in-place overload ``func`` (``add_.Tensor`` →
    ``add.Tensor``), or None."""
    packet = getattr(aten, func._schema.name[len("aten::"):-1], None)
    if packet is None or func._overloadname not in packet.overloads():
        return None
    return getattr(packet, func._overloadname)


def _inplace(func, args, kwargs):
    functional = out_of_place(func)
    if functional is None:
        return NotImplemented
    out = dispatch(functional, args, kwargs)
    targets = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
    results = out if isinstance(out, (list, tuple)) else [out]
    for t, r in zip(targets, results):
        v = r.value
        if v._node.dtype != code_of(t.dtype):
            v = R.wrap(R.cast(v._node, code_of(t.dtype)))
        t.value = v
    return args[0]


_FOREACH_BASE = {"List": ("Tensor", "default"), "Scalar": ("Scalar", "Tensor", "default"),
                 "ScalarList": ("Scalar", "Tensor", "default"), "Tensor": ("Tensor", "default"),
                 "default": ("default",), "ScalarAndTensor": ("Scalar",)}
_VALUE_LAST = {"addcmul", "addcdiv"}  # their scalar is the keyword ``value``


def _foreach(func, args, kwargs):
    name = func._schema.name[len("aten::_foreach_"):]
    if name.endswith("_"):
        return _inplace(func, args, kwargs) if out_of_place(func) else fallback(func, args,
                                                                                  kwargs)
    packet = getattr(aten, name, None)
    overload = func._overloadname
    if name in ("lerp",) and overload == "List":
        choices = ("Tensor",)
    else:
        choices = _FOREACH_BASE.get(overload, ())
    base = next((getattr(packet, o) for o in choices
                 if packet is not None and o in packet.overloads()), None)
    if base is None:
        return fallback(func, args, kwargs)
    n = len(next(a for a in args if isinstance(a, (list, tuple))))  # pow's scalar comes first
    args = list(args)
    if name in _VALUE_LAST and len(args) == 4:
        scalars = args.pop()
        if isinstance(scalars, torch.Tensor):
            scalars = scalars.tolist()
        kwargs = dict(kwargs)
        per = scalars if isinstance(scalars, (list, tuple)) else [scalars] * n
    else:
        per = None
    out = []
    for i in range(n):
        a = [x[i] if isinstance(x, (list, tuple)) else x for x in args]
        kw = kwargs if per is None else dict(kwargs, value=per[i])
        out.append(dispatch(base, a, kw))
    return out


# --- decomposition tables ----------------------------------------------------------------------

def _decompositions():
    table = dict(core_aten_decompositions())
    chosen = [aten._softmax.default, aten._log_softmax.default,
              aten._softmax_backward_data.default, aten.native_layer_norm.default,
              aten.native_layer_norm_backward.default, aten.embedding.default,
              aten.embedding_dense_backward.default, aten.native_dropout.default,
              aten.native_dropout_backward.default, aten.linalg_vector_norm.default,
              aten.gelu_backward.default, aten.silu.default,
              aten.silu_backward.default, aten._native_batch_norm_legit.default,
              aten._native_batch_norm_legit.no_stats,
              aten._native_batch_norm_legit_no_training.default,
              aten._native_batch_norm_legit_functional.default,
              aten.native_batch_norm_backward.default, aten.elu.default,
              aten.native_group_norm.default]
    for op in chosen:
        if op in decomposition_table:
            table[op] = decomposition_table[op]
    for op in LOWERINGS:
        if op not in KEEP_DECOMPOSITION:
            table.pop(op, None)
    return table


DECOMPOSITIONS = _decompositions()
_PURE.update((id(op), LOWERINGS[op]) for op in PURE_OPS)


# --- the counted fallback ----------------------------------------------------------------------

_warned: set = set()


def fallback(func, args, kwargs):
    """Run ``func`` eagerly on the CPU on computed inputs; feed the results back as data
    (or, while this thread records a graph for replay, call its ``refuse_fallback``)."""
    refuse = getattr(_state, "refuse_fallback", None)
    if refuse is not None:
        return refuse(func, args, kwargs)
    name = str(func)
    frame = user_frame()
    code, offset = site(frame)
    metrics.fallbacks[name] += 1
    metrics.fallback_at[(name, code, offset)] += 1
    if name not in _warned:
        _warned.add(name)
        where = source_line(code, offset) or "<unknown>"
        message = (f"lazyrt.torch: {name} has no lazy lowering; it ran eagerly on the CPU "
                   f"(inputs computed, result fed back as data), from {where}. Each call is "
                   f"counted in lazyrt.metrics.snapshot()['fallbacks'].")
        if frame is None:
            warnings.warn(message, PerformanceWarning, stacklevel=2)
        else:  # reported at the user's line, not at this one
            warnings.warn_explicit(message, PerformanceWarning, code.co_filename,
                                   frame.f_lineno, module=frame.f_globals.get("__name__"),
                                   registry=frame.f_globals.setdefault("__warningregistry__",
                                                                       {}))
    if func not in CROSS_DEVICE:
        check_devices(func, args)

    def to_cpu(x):
        if type(x) is LazyTensor:
            return to_torch_cpu(x.value)
        if isinstance(x, torch.device) and x.type == "lazy":
            return torch.device("cpu")
        return x

    cpu_args, cpu_kwargs = tree_map(to_cpu, args), tree_map(to_cpu, kwargs)
    out = func(*cpu_args, **cpu_kwargs)
    # write back what the op mutated (in-place and out= arguments)
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            pair = ((args[i], cpu_args[i]) if i < len(args) and not arg.kwarg_only
                    else (kwargs.get(arg.name), cpu_kwargs.get(arg.name)))
            lazy, cpu = pair
            if type(lazy) is LazyTensor:
                lazy.value = from_cpu(cpu)
    mutated = {id(c): a for a, c in zip(args, cpu_args) if type(a) is LazyTensor}

    def back(x):
        if isinstance(x, torch.Tensor) and x.device.type == "cpu":
            if id(x) in mutated:
                return mutated[id(x)]
            return LazyTensor(from_cpu(x))
        return x
    return tree_map(back, out)


def empty_value(shape, dtype):
    """A lazy value of ``shape`` and torch ``dtype`` (zeros: never uninitialized)."""
    return C.full(tuple(shape), 0, D.DTYPES[code_of(dtype)])


install_dispatch(dispatch)
