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

Replaying: the first call's recording is a list of steps over numbered slots
(the graph's inputs, then the values steps produce). A program step binds its
parameters (the user's tensors, zero-copy, as NumPy views; constants kept from
the recording; a fresh Philox seed where a random draw recorded one), runs, and
hands back its outputs as torch tensors over the program's own result arrays.
No aten op, no dispatcher and no recorder run on this path.

Inputs the graph mutates (``copy_`` into a placeholder: BatchNorm's running
statistics, an optimizer's parameters and state) are written back into the
caller's tensors after the last step, as eager would have left them.

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
from .. import dtypes as D
from .._capture import capture
from .._source_lines import source_line
from ..errors import PerformanceWarning
from ..graph import Graph
from ..metrics import metrics
from ..runtime import program_cache
from . import dispatch as _dispatch
from .lowerings.random import draw_seed, eager_random_enabled, seeds_drawn
from .registry import BARRIERS, RANDOM
from . import tensor as T
from .tensor import DEVICE, LazyTensor, dispatch_state, from_cpu
from .user_lines import at_line, frame_line

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


# --- converting values between torch and the programs -----------------------------------

def host_array(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's memory as a C-contiguous NumPy array (a view when it is one)."""
    t = t.detach()
    if t.dtype is torch.bfloat16:  # torch has no NumPy bfloat16: hand over its bits
        a = t.view(torch.uint16).numpy().view(D.bfloat16)
    else:
        a = t.numpy()
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def torch_of(array) -> torch.Tensor:
    """A program's result as a torch tensor over the same memory."""
    if type(array) is not np.ndarray:  # a device backend's array (jax)
        array = np.asarray(array)
    if not array.flags.writeable or min(array.strides, default=0) < 0:
        array = array.copy()  # torch takes neither read-only memory nor negative strides
    if array.dtype == D.bfloat16:
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


# --- the steps of a replay --------------------------------------------------------------

class ProgramStep:
    """One lazyrt program: reads slots, constants and fresh seeds; writes slots."""

    __slots__ = ("program", "sources", "outputs", "checks", "name")

    def __init__(self, program, sources, outputs, checks, name):
        self.program = program
        self.sources = sources  # per parameter: slot number, ("const", v) or ("seed", g)
        self.outputs = outputs  # slot per program output (the checks' flags follow them)
        self.checks = checks  # (message, error type, "file:line") per deferred check
        self.name = name

    def run(self, env):
        params = []
        for s in self.sources:
            if type(s) is int:
                params.append(host_array(env[s]))
            elif s[0] == "const":
                params.append(s[1])
            else:
                # a Python int: the C launcher binds an int scalar slot only from an int
                # (anything else is read as a double, which scrambles the seed's bits)
                params.append(draw_seed(s[1]))
        t0 = perf_counter()
        results = self.program.run(params)
        metrics.execute_time_s += perf_counter() - t0
        metrics.graphs_executed += 1
        metrics.kernel_launches += self.program.kernels
        for slot, r in zip(self.outputs, results):
            env[slot] = torch_of(r)
        if self.checks:
            raise_checks(self.checks, results[len(self.outputs):])


def raise_checks(checks, flags):
    """Raise the first deferred check (an error eager raises at its call, which only
    the program's values show) whose flag the run computed true."""
    for (message, error, where), flag in zip(checks, flags):
        found = np.asarray(flag).item()
        text = message(found) if callable(message) else (message if found else None)
        if text is not None:
            raise error(f"{text} (lazyrt: raised by the compiled graph, for the op at "
                        f"{where or '<unknown>'})")


class EagerStep:
    """One aten call lazyrt does not lower, run by torch on real tensors."""

    __slots__ = ("target", "args", "kwargs", "output", "name")

    def __init__(self, target, args, kwargs, output):
        self.target, self.args, self.kwargs, self.output = target, args, kwargs, output
        self.name = str(target)

    def run(self, env):
        fetch = lambda a: env[a.slot] if type(a) is _Slot else a  # noqa: E731
        args = tree_map(fetch, self.args)
        kwargs = tree_map(fetch, self.kwargs)
        metrics.fallbacks[self.name] += 1
        env[self.output] = self.target(*args, **kwargs)


class ItemStep:
    """``env[output] = env[source][index]``: one result of an eager call's tuple."""

    __slots__ = ("source", "index", "output")

    def __init__(self, source, index, output):
        self.source, self.index, self.output = source, index, output

    def run(self, env):
        env[self.output] = env[self.source][self.index]


class _Slot:
    """A reference to slot ``slot`` inside an eager step's arguments."""
    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot


class Replay:
    """The recorded steps of one input signature; ``run(args)`` replays them."""

    def __init__(self, n_slots, constants, steps, outputs, mutations, n_programs):
        self.template = [None] * n_slots
        for slot, value in constants.items():
            self.template[slot] = value
        self.steps = steps
        self.outputs = outputs  # per graph output: ("slot", n) or ("value", v)
        self.mutations = mutations  # (input position, slot) to copy back
        self.programs = n_programs

    def run(self, args):
        env = self.template[:]
        env[:len(args)] = args
        for step in self.steps:
            step.run(env)
        for i, slot in self.mutations:
            args[i].copy_(env[slot])
        return [env[v] if kind == "slot" else v for kind, v in self.outputs]


# --- recording ---------------------------------------------------------------------------

_warned: set = set()


def _warn_eager(name, why, node):
    metrics.fallbacks[name] += 1
    if name in _warned:
        return
    _warned.add(name)
    where = frame_line(node) or "<unknown>"
    warnings.warn(f"lazyrt (torch.compile): {name} runs eagerly between lazyrt programs "
                  f"({why}), from {where}. Each call is counted in "
                  f"lazyrt.metrics.snapshot()['fallbacks'].", PerformanceWarning, stacklevel=4)


def _cast_only(n):
    # a ``_to_copy`` that stays on the CPU changes only the dtype: the barrier records
    # it as a cast on the lazy device (it computes values only when leaving it)
    device = n.kwargs.get("device")
    return n.target is aten._to_copy.default and (
        device is None or torch.device(device).type == "cpu")


def _is_tensor(x):
    return isinstance(x, torch.Tensor)


class _Recording:
    """One pass over the graph on the first call's inputs (see the module's text)."""

    def __init__(self, gm, args, backend: str, eager_nodes: set):
        self.gm, self.args, self.eager_nodes = gm, args, eager_nodes
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
        fallback, _dispatch.fallback = _dispatch.fallback, _refuse_fallback
        T.refuse_reads[0] = _refuse_read
        try:
            out = at_line(n, self._lower, n.target, args, kwargs)
        except BaseException:
            del T._deferred[checks:]  # a check of a call that did not happen
            raise
        finally:
            _dispatch.fallback = fallback
            T.refuse_reads[0] = None
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
        return _Slot(self.slot[a]) if _is_tensor(v) or isinstance(v, (tuple, list)) else v

    def run_eager(self, i, n, why):
        self.flush(i, needs=set(n.all_input_nodes))
        args = tree_map(self._slot_arg, n.args)
        kwargs = tree_map(self._slot_arg, n.kwargs)
        step = EagerStep(n.target, args, kwargs, self.slot[n])
        env = {self.slot[a]: self.real[a] for a in n.all_input_nodes}
        fetch = lambda a: env[a.slot] if type(a) is _Slot else a  # noqa: E731
        self.real[n] = n.target(*tree_map(fetch, args), **tree_map(fetch, kwargs))
        self.steps.append(step)
        _warn_eager(step.name, why, n)

    def flush(self, i, needs=(), outputs=()):
        """Compute, as one lazyrt program, every pending value that ``needs`` or any
        node after ``i`` reads; they become real values in their slots."""
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
        program = program_cache.get(cap.key)
        if program is None:
            metrics.cache_misses += 1
            program = self.backend.compile(Graph.from_capture(cap))
            program_cache.put(cap.key, program)
            debug_sink.compiled(program.record, debug_sink.level())
        else:
            metrics.cache_hits += 1
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
                           f"program {self.programs}")
        self.programs += 1
        self.steps.append(step)
        results = program.run(list(cap.values))
        for slot, r in zip(slots, results):
            self.real[self.nodes[slot]] = torch_of(r)
        if checks:
            raise_checks(step.checks, results[len(slots):])

    def finish(self, i, n):
        outs = n.args[0]
        needed = {a for a in tree_flatten(outs)[0] if isinstance(a, torch.fx.Node)}
        needed |= {src for _, src in self.mutations}
        self.flush(i, needs=needed, outputs=needed)
        self.outputs = [("slot", self.slot[self.copied.get(a, a)]) if isinstance(a, torch.fx.Node)
                        and _is_tensor(self.real[a]) else
                        ("value", self.real[a] if isinstance(a, torch.fx.Node) else a)
                        for a in outs]
        self.mutations = [(slot, self.slot[src]) for slot, src in self.mutations]
        self.result = [self.real[a] if isinstance(a, torch.fx.Node) else a for a in outs]
        for slot, src in self.mutations:
            self.args[slot].copy_(self.real[self.nodes[src]])

    def replay(self) -> Replay:
        return Replay(len(self.nodes), self.constants, self.steps, self.outputs,
                      self.mutations, self.programs)


def record(gm, args, backend: str):
    """Record ``gm`` on ``args`` (its first call's inputs); returns the
    :class:`Replay` and this call's outputs. Nodes lazyrt cannot record run eagerly
    (the recording starts over with them marked)."""
    eager_nodes: dict = {}
    state = dispatch_state
    depth = getattr(state, "depth", 0)
    while True:
        state.depth = depth + 1  # factories return raw lazy tensors, as in a lowering
        try:
            rec = _Recording(gm, list(args), backend, eager_nodes).record()
        except _Restart as exc:
            if exc.node in eager_nodes:
                raise RuntimeError(f"lazyrt (torch.compile): recording {exc.node} again "
                                   f"after it ran eagerly: {exc.why}") from None
            eager_nodes[exc.node] = exc.why
            continue
        finally:
            state.depth = depth
        return rec.replay(), rec.result
