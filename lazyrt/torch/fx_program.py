"""An aten FX graph (what Dynamo and AOTAutograd hand a ``torch.compile`` backend)
lowered ONCE into lazyrt programs, then replayed on every call.

Recording: the graph runs node by node on lazy tensors through the lazy
front-end's own dispatcher (:func:`lazyrt.torch.dispatch.dispatch`: the one aten
registry, its decompositions and random draws), on the first call's real inputs.
What lazyrt records between two places that need real values becomes one lazyrt
program (captured, planned, compiled, cached as any barrier's). A node lazyrt
cannot lower (one that would take the lazy front-end's fallback, read a value
while recording, or raise) runs eagerly on real tensors instead: the graph is
split into lazyrt programs and eager ATen calls, and each eager call is counted in
``lazyrt.metrics.snapshot()["fallbacks"]`` and warned once with the user's line.

The recording is a :class:`lazyrt.torch.replay.Replay`: steps over numbered
slots (the graph's inputs, then the values the steps make), which every later
call runs with no aten op, dispatcher or recorder (see :mod:`.replay`).

Inputs the graph mutates (``copy_`` into a placeholder: BatchNorm's running
statistics, an optimizer's parameters and state) are written back into the
caller's tensors after the last step, as eager would have left them; the last
program computes them in place where its backend can (:func:`in_place_params`).

Shapes: a recording is specialized to its inputs' shapes and dtypes and to the
values of its integer inputs (the symbolic sizes of a graph Dynamo made dynamic);
another signature records again (lazyrt's plan and kernel caches still apply).
"""
from __future__ import annotations

import operator
import warnings
from time import perf_counter

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_map

from .. import backends as B
from .. import debug_sink
from .. import runtime
from .._capture import capture
from .._source_lines import source_line
from ..errors import PerformanceWarning
from ..graph import Graph
from ..metrics import metrics
from ..runtime import program_cache
from . import dispatch as _dispatch
from . import tensor as T
from .lowerings.random import eager_random_enabled, seeds_drawn
from .registry import BARRIERS, RANDOM
from .replay import (EagerStep, ItemStep, ProgramStep, Replay, Slot, raise_checks,
                     result_converter, torch_of)
from .tensor import DEVICE, LazyTensor, dispatch_state, from_cpu
from .user_lines import at_line, frame_line, frame_of

aten = torch.ops.aten


class _Eager(BaseException):
    """Raised while recording: this node must run eagerly (the lazy front-end would
    have fallen back, or it reads a value). A ``BaseException``, so no lowering's own
    ``except Exception`` takes it for an error of its own."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class _Restart(Exception):
    """A lowering ran a barrier while recording: pending values were computed with
    this call's data, so the recording starts over with ``node`` run eagerly."""

    def __init__(self, node, why):
        super().__init__(why)
        self.node, self.why = node, why


def _refuse_fallback(func, args, kwargs):
    raise _Eager(f"{func} has no lazy lowering")


def _refuse_read(value):
    raise _Eager("its lowering reads a value")


# --- recording ---------------------------------------------------------------------------

_warned: set = set()


def _warn_eager(name, why, node):
    metrics.fallbacks[name] += 1
    if name in _warned:
        return
    _warned.add(name)
    where = frame_of(node)
    message = (f"lazyrt (torch.compile): {name} runs eagerly between lazyrt programs "
               f"({why}), from {frame_line(node) or '<unknown>'}. Each call is counted in "
               f"lazyrt.metrics.snapshot()['fallbacks'].")
    if where is None:
        warnings.warn(message, PerformanceWarning, stacklevel=2)
    else:  # at the user's line, as the lazy front-end's fallback warning is
        warnings.warn_explicit(message, PerformanceWarning, where[0], where[1])


#: what a graph Dynamo made dynamic asks of a tensor: answered while recording, from
#: the recorded (lazy) or real value; a recording is specialized to its signature
_SIZE_QUERIES = {
    aten.sym_size.int: lambda t, d: int(t.shape[d]),
    aten.sym_numel.default: lambda t: int(t.numel()),
    aten.sym_stride.int: lambda t, d: int(t.stride(d)),
    aten.sym_storage_offset.default: lambda t: int(t.storage_offset()),
}


def _cast_only(n):
    # a ``_to_copy`` that stays on the CPU changes only the dtype: the barrier records
    # it as a cast on the lazy device (it computes values only when leaving it)
    device = n.kwargs.get("device")
    return n.target is aten._to_copy.default and (
        device is None or torch.device(device).type == "cpu")


def _is_view(node) -> bool:
    """Whether FX ``node`` is a view op (its schema's result aliases its first
    argument): its value shares its base's memory in eager too."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    returns = node.target._schema.returns
    alias = returns[0].alias_info if len(returns) == 1 else None
    return alias is not None and not alias.is_write


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


class _Recording:
    """One pass over the graph on the first call's inputs (see the module's text)."""

    def __init__(self, gm, args, backend: str, eager_nodes: set, allow_eager=True):
        self.gm, self.args, self.eager_nodes = gm, args, eager_nodes
        self.allow_eager = allow_eager
        self.backend = B.get(backend)
        self.nodes = list(gm.graph.nodes)
        self.slot = {n: i for i, n in enumerate(self.nodes)}
        self.last_use = {}
        for i, n in enumerate(self.nodes):
            for a in n.all_input_nodes:
                self.last_use[a] = i
        self.real = {}  # fx node -> torch value (or Python value)
        self.lazy = {}  # fx node -> LazyTensor / tuple of them (pending in the segment)
        self.leaf_slot = {}  # id(lazyrt leaf node) -> slot it was made from
        self.leaves = {}  # fx node -> LazyTensor leaf made from its real value
        self.constants, self.steps, self.mutations = {}, [], []
        self.copied = {}  # fx node of a copy_ into an input -> that input
        self.programs = 0
        self.seeds = None
        self.checks_from = len(T._deferred)  # deferred checks recorded from here on are ours

    # values of fx nodes, as lazy tensors or real ones
    def lazy_of(self, a):
        if a in self.lazy:
            return self.lazy[a]
        v = self.real[a]
        if not _is_tensor(v):
            if isinstance(v, (tuple, list)) and any(_is_tensor(x) for x in v):
                raise _Eager("a list of real tensors")
            return v
        leaf = self.leaves.get(a)
        if leaf is None:
            leaf = LazyTensor(from_cpu(v))
            self.leaves[a] = leaf
            self.leaf_slot[id(leaf.value._node)] = self.slot[a]
        return leaf

    def real_of(self, a):
        return self.real[a]

    def record(self):
        with seeds_drawn() as self.seeds:
            for i, n in enumerate(self.nodes):
                self.step(i, n)
        return self

    def step(self, i, n):
        if n.op == "placeholder":
            self.real[n] = self.args[i]
        elif n.op == "get_attr":
            v = getattr(self.gm, n.target)
            self.real[n] = v
            self.constants[self.slot[n]] = v
        elif n.op == "call_function":
            self.call(i, n)
        elif n.op == "output":
            self.finish(i, n)
        else:
            raise NotImplementedError(f"lazyrt (torch.compile): FX node kind {n.op!r}")

    def call(self, i, n):
        target = n.target
        if target is operator.getitem:
            src, index = n.args
            if src in self.lazy:
                self.lazy[n] = self.lazy[src][index]
            else:
                self.real[n] = self.real[src][index]
                if _is_tensor(self.real[n]):  # an eager call's tuple: replayed too
                    self.steps.append(ItemStep(self.slot[src], index, self.slot[n]))
            return
        if target in _SIZE_QUERIES:  # a dynamic graph's sizes: this signature's own
            t = n.args[0]
            v = self.lazy[t] if t in self.lazy else self.real[t]
            self.real[n] = _SIZE_QUERIES[target](v, *n.args[1:])
            return
        if target is aten.copy_.default and n.args[0].op == "placeholder":
            # a mutation of an input (functionalization's epilogue): written back at the end
            self.mutations.append((self.slot[n.args[0]], n.args[1]))
            # it returns its destination (``return x.mul_(2)``): the caller's tensor
            self.copied[n] = n.args[0]
            self.real[n] = self.real[n.args[0]]
            return
        if not isinstance(target, torch._ops.OpOverload) or n in self.eager_nodes \
                or (target in BARRIERS and not _cast_only(n)) \
                or target._schema.name.endswith("_") \
                or (target in RANDOM and eager_random_enabled()):
            if isinstance(target, torch._ops.OpOverload) or any(
                    _is_tensor(self.real.get(a)) or a in self.lazy for a in n.all_input_nodes):
                return self.run_eager(i, n, "not lowered" if n not in self.eager_nodes
                                      else self.eager_nodes[n])
            # Python arithmetic on sizes (SymInt graphs)
            self.real[n] = target(*tree_map(self._py, n.args), **tree_map(self._py, n.kwargs))
            return
        try:
            self.lazy[n] = self.lower(n)
        except _Eager as exc:
            self.run_eager(i, n, exc.why)
        except _Restart:
            raise
        except Exception as exc:  # noqa: BLE001  eager raises the user's error, or computes it
            self.run_eager(i, n, f"its lowering raised {type(exc).__name__}: {exc}")

    def lower(self, n):
        """Record FX node ``n`` on lazy tensors; raises :class:`_Eager` where it cannot."""
        args = tree_map(self._lazy_arg, n.args)
        kwargs = dict(tree_map(self._lazy_arg, n.kwargs))  # FX's kwargs are immutable
        if "device" in kwargs:
            kwargs["device"] = DEVICE
        executed, checks = metrics.graphs_executed, len(T._deferred)
        state = dispatch_state
        state.refuse_fallback, state.refuse_reads = _refuse_fallback, _refuse_read
        try:
            out = at_line(n, self._lower, n.target, args, kwargs)
        except BaseException:
            del T._deferred[checks:]  # a check of a call that did not happen
            raise
        finally:
            state.refuse_fallback = state.refuse_reads = None
        if metrics.graphs_executed != executed:
            raise _Restart(n, "its lowering computed values while recording")
        return out

    def _lower(self, target, args, kwargs):
        if any(type(x) is LazyTensor for x in tree_flatten((args, kwargs))[0]):
            return _dispatch.dispatch(target, args, kwargs)
        return target(*args, **kwargs)  # a factory: the lazy device's kernels (factories.py)

    def _lazy_arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.lazy_of(a)
        if isinstance(a, torch.device) and a.type == "cpu":
            return DEVICE
        return a

    def _py(self, a):
        return self.real[a] if isinstance(a, torch.fx.Node) else a

    def _slot_arg(self, a):
        # a tensor is read from its slot on each call; a size or other Python value
        # computed while recording is this signature's own (the recording is specialized)
        if not isinstance(a, torch.fx.Node):
            return a
        v = self.real[a]
        return Slot(self.slot[a]) if _is_tensor(v) or isinstance(v, (tuple, list)) else v

    def run_eager(self, i, n, why):
        if not self.allow_eager:
            raise NotImplementedError(
                f"lazyrt (torch.compile): {n.target} (FX node {n.name}, from "
                f"{frame_line(n) or '<unknown>'}) cannot run in a lazyrt program ({why}), "
                f"and this backend was made with allow_eager=False")
        self.flush(i, needs=set(n.all_input_nodes))
        args = tree_map(self._slot_arg, n.args)
        kwargs = tree_map(self._slot_arg, n.kwargs)
        step = EagerStep(n.target, args, kwargs, self.slot[n])
        env = {self.slot[a]: self.real[a] for a in n.all_input_nodes}
        fetch = lambda a: env[a.slot] if type(a) is Slot else a  # noqa: E731
        self.real[n] = n.target(*tree_map(fetch, args), **tree_map(fetch, kwargs))
        self.steps.append(step)
        _warn_eager(step.name, why, n)

    def flush(self, i, needs=(), outputs=(), write_back=None):
        """Compute, as one lazyrt program, every pending value that ``needs`` or any
        node after ``i`` reads; they become real values in their slots.
        ``write_back`` (the last program only): slot of a value -> the input slot it
        is the new value of, which the program may then compute in place."""
        wanted = [a for a in self.lazy if a in needs or a in outputs
                  or self.last_use.get(a, -1) > i]
        tensors, slots = [], []
        for a in wanted:
            v = self.lazy[a]
            if type(v) is LazyTensor:  # a tuple's items are read through their getitems
                tensors.append(v)
                slots.append(self.slot[a])
        # what is not wanted is dead; a tuple stays (a later getitem re-records its item)
        self.lazy = {a: v for a, v in self.lazy.items() if type(v) is not LazyTensor}
        checks = T._deferred[self.checks_from:]
        del T._deferred[self.checks_from:]
        if not tensors and not checks:
            return
        cap = capture([t.value._node for t in tensors] + [c[0]._node for c in checks],
                      self.backend.salt)
        program, graph, t0 = program_cache.get(cap.key), None, perf_counter()
        if program is None:
            metrics.cache_misses += 1
            graph = Graph.from_capture(cap)
            program = self.backend.compile(graph)
            program_cache.put(cap.key, program)
            debug_sink.compiled(program.record, debug_sink.level())
        else:
            metrics.cache_hits += 1
        self.compile_s = perf_counter() - t0
        seeds = {}
        for seed, generator in self.seeds or ():
            seeds[seed] = generator
        sources = []
        for k, p in enumerate(cap.params):
            slot = self.leaf_slot.get(id(cap.nodes[p]))
            value = cap.values[k]
            if slot is not None:
                sources.append(slot)
            elif np.ndim(value) == 0 and isinstance(value, (int, np.integer, np.ndarray)) \
                    and np.asarray(value).dtype.kind == "i" and int(value) in seeds:
                sources.append(("seed", seeds[int(value)]))
            else:
                sources.append(("const", value))
        step = ProgramStep(program, sources, slots,
                           [(message, error, source_line(*site))
                            for _, message, error, site in checks],
                           f"program {self.programs}", self.backend.name)
        self.programs += 1
        self.steps.append(step)
        results, values = self.run_first(step, cap, write_back, graph)
        inputs = [values[k] for k, src in enumerate(sources)
                  if type(src) is int and k not in step.dead]
        # an output over an input's memory, or over an earlier output's (y and y.clone()
        # are one value to lazyrt), is copied: a graph's outputs alias only as eager's do.
        # A view in the graph too (a weight's transpose, a detached activation saved for
        # the backward) shares its base's memory in eager as well: it may stay one
        step.converters = [(slot, result_converter(
            r, () if _is_view(self.nodes[slot]) else inputs + list(results[:j])))
            for j, (slot, r) in enumerate(zip(slots, results))]
        for slot, r in zip(slots, results):
            self.real[self.nodes[slot]] = torch_of(r)
        if checks:
            raise_checks(step.checks, results[len(slots):])

    def run_first(self, step, cap, write_back, graph):
        """This call's run of ``step``'s program (``graph``: compiled for it). First it
        decides which mutated inputs the program computes in place from now on
        (:func:`in_place_params`), tried on copies: each such output must land in
        the very array of the input it updates."""
        values = list(cap.values)
        dead = in_place_params(step, write_back) if write_back else ()
        if dead:
            trial = [np.array(v) if k in dead else v for k, v in enumerate(values)]
            results = step.program.run(trial, None, dead)
            landed = {j: k for k in dead for j, r in enumerate(results)
                      if isinstance(r, np.ndarray) and np.shares_memory(r, trial[k])}
            if len(landed) == len(dead) and all(
                    step.sources[k] == write_back.get(step.outputs[j]) for j, k in landed.items()):
                step.dead = dead
                step.in_place = {step.sources[k] for k in dead}
                values = [np.array(v) if k in dead else v for k, v in enumerate(values)]
        if runtime._watcher is not None or debug_sink.watching():
            return step.watched(values, graph, self.compile_s)[0], values
        return (step.program.run(values, None, step.dead) if step.dead else
                step.program.run(values)), values

    def finish(self, i, n):
        outs = n.args[0]
        needed = {a for a in tree_flatten(outs)[0] if isinstance(a, torch.fx.Node)}
        needed |= {src for _, src in self.mutations}
        read_after = {self.slot[self.copied.get(a, a)] for a in needed
                      if self.copied.get(a, a).op == "placeholder"}
        write_back = {self.slot[src]: slot for slot, src in self.mutations
                      if isinstance(src, torch.fx.Node) and slot not in read_after}
        self.flush(i, needs=needed, outputs=needed, write_back=write_back)
        self.outputs = [("slot", self.slot[self.copied.get(a, a)]) if isinstance(a, torch.fx.Node)
                        and _is_tensor(self.real[a]) else
                        ("value", self.real[a] if isinstance(a, torch.fx.Node) else a)
                        for a in outs]
        self.mutations = [(slot, self.slot[src]) for slot, src in self.mutations]
        self.result = [self.real[a] if isinstance(a, torch.fx.Node) else a for a in outs]
        for slot, src in self.mutations:
            self.args[slot].copy_(self.real[self.nodes[src]])

    def replay(self) -> Replay:
        in_place = self.steps[-1].in_place if self.steps and \
            type(self.steps[-1]) is ProgramStep else frozenset()
        return Replay(len(self.nodes), self.constants, self.steps, self.outputs,
                      self.mutations, self.programs, in_place,
                      sum(n.op == "placeholder" for n in self.nodes))


def in_place_params(step, write_back) -> tuple:
    """Positions of the parameters of ``step``'s program that it may write an output
    over (its ``donations``): the parameter is input slot ``i`` and that output is
    the new value of input ``i`` (``write_back``), so a mutated parameter or
    optimizer state is updated in the user's own tensor, with no copy back."""
    program = step.program
    plan = getattr(program, "plan", None)
    if not getattr(program, "donations", None) or plan is None or \
            len(plan.outputs) < len(step.outputs):
        return ()
    writers: dict = {}  # output buffer -> the output positions stored in it
    for j, o in enumerate(plan.outputs):
        writers.setdefault(o.buffer, []).append(j)
    dead = []
    for k, buffer in program.donations:
        js = writers.get(buffer, ())
        if len(js) == 1 and js[0] < len(step.outputs) and k not in dead and \
                type(step.sources[k]) is int and \
                write_back.get(step.outputs[js[0]]) == step.sources[k]:
            dead.append(k)
    return tuple(dead)


def record(gm, args, backend: str, allow_eager: bool = True):
    """Record ``gm`` on ``args`` (its first call's inputs); returns the
    :class:`Replay` and this call's outputs. Nodes lazyrt cannot record run eagerly
    (the recording starts over with them marked), or, without ``allow_eager``,
    raise ``NotImplementedError`` naming the op, the FX node and the user's line."""
    eager_nodes: dict = {}
    state = dispatch_state
    depth = getattr(state, "depth", 0)
    while True:
        state.depth = depth + 1  # factories return raw lazy tensors, as in a lowering
        try:
            rec = _Recording(gm, list(args), backend, eager_nodes, allow_eager).record()
        except _Restart as exc:
            if exc.node in eager_nodes or not allow_eager:
                raise RuntimeError(f"lazyrt (torch.compile): recording {exc.node} again "
                                   f"after it ran eagerly: {exc.why}") from None
            eager_nodes[exc.node] = exc.why
            continue
        finally:
            state.depth = depth
        return rec.replay(), rec.result
