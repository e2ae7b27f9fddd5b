"""The replay of a recorded torch.compile graph (:mod:`.fx_program` records it):
steps over numbered slots (the graph's inputs, then the values the steps make).

A :class:`ProgramStep` binds its program's parameters (the user's tensors,
zero-copy, as NumPy views; constants kept from the recording; a fresh Philox
seed where a random draw recorded one), runs it and hands its outputs back as
torch tensors over the program's own result arrays; an :class:`EagerStep` is an
aten call lazyrt does not lower, run by torch. :class:`Replay` runs the steps
and writes mutated inputs back. No aten op, dispatcher or recorder runs here.
"""
from __future__ import annotations

from time import perf_counter

import numpy as np
import torch
from torch.utils._pytree import tree_map

from .. import debug_sink
from .. import dtypes as D
from .. import runtime
from ..metrics import metrics
from .lowerings.random import draw_seed


# --- converting values between torch and the programs -----------------------------------

_NUMPY = torch._C.TensorBase.numpy  # torch's own (lazyrt.torch wraps Tensor.numpy)
_BFLOAT16 = torch.bfloat16


def host_array(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's memory as a C-contiguous NumPy array (a view when it is one)."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype is _BFLOAT16:  # torch has no NumPy bfloat16: hand over its bits
        return _NUMPY(t.view(torch.uint16)).view(D.bfloat16)
    return _NUMPY(t)


def torch_of(array) -> torch.Tensor:
    """A program's result as a torch tensor over the same memory (a host backend's
    results are fresh, writable arrays each run; a device backend's are copied)."""
    if type(array) is not np.ndarray:  # a device backend's array (jax)
        array = np.array(array)
    elif not array.flags.writeable or min(array.strides, default=0) < 0:
        array = array.copy()  # torch takes neither read-only memory nor negative strides
    if array.dtype == D.bfloat16:
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return _FROM_NUMPY(array)


_FROM_NUMPY = torch.from_numpy


def result_converter(array, inputs=()):
    """What turns this program output into a torch tensor on every run: NumPy's
    own arrays of a dtype torch shares go straight to ``torch.from_numpy``. An
    output the program hands back over one of its inputs' memory (``x.clone()`` is
    ``x`` to lazyrt) is copied: the graph's output must not alias the user's input
    (AOTAutograd makes the outputs that should alias one from the input itself)."""
    if any(isinstance(a, np.ndarray) and np.shares_memory(array, a) for a in inputs):
        return _copied
    if type(array) is np.ndarray and array.dtype != D.bfloat16 and array.flags.writeable \
            and min(array.strides, default=0) >= 0:
        return _FROM_NUMPY
    return torch_of


def _copied(array) -> torch.Tensor:
    return torch_of(np.array(array))


# --- the steps of a replay --------------------------------------------------------------

class ProgramStep:
    """One lazyrt program: reads slots, constants and fresh seeds; writes slots."""

    __slots__ = ("program", "sources", "outputs", "checks", "name", "_constants",
                 "_slots", "_seeds", "converters", "dead", "in_place", "backend")

    def __init__(self, program, sources, outputs, checks, name, backend):
        self.program = program
        self.sources = sources  # per parameter: slot number, ("const", v) or ("seed", g)
        self.outputs = outputs  # slot per program output (the checks' flags follow them)
        self.checks = checks  # (message, error type, "file:line") per deferred check
        self.name = name
        # per call: a copy of the constants, the slots' arrays and fresh seeds put in
        self._constants = [None if type(s) is int or s[0] != "const" else s[1]
                           for s in sources]
        self._slots = [(k, s) for k, s in enumerate(sources) if type(s) is int]
        self._seeds = [(k, s[1]) for k, s in enumerate(sources)
                       if type(s) is not int and s[0] == "seed"]
        self.converters = [(slot, torch_of) for slot in outputs]  # set by the first run
        self.backend = backend  # its name
        self.dead = ()  # parameters an output is written over (mutated inputs, in place)
        self.in_place = frozenset()  # their input slots

    def run(self, env):
        params = self._constants[:]
        for k, slot in self._slots:
            params[k] = host_array(env[slot])
        for k, generator in self._seeds:
            # a Python int: the C launcher binds an int scalar slot only from an int
            # (anything else is read as a double, which scrambles the seed's bits)
            params[k] = draw_seed(generator)
        if runtime._watcher is not None or debug_sink.watching():
            results, seconds = self.watched(params)
        else:
            t0 = perf_counter()
            results = self.program.run(params, None, self.dead) if self.dead else \
                self.program.run(params)
            seconds = perf_counter() - t0
        self.finish(env, results, seconds)

    def watched(self, params, graph=None, compile_s=0.0):
        """The program's run as a barrier of the lazy front-end reports itself: to
        the ``lazyrt`` CLI's observer (``explain``, ``kernels``, ``check``...) and at
        ``LAZYRT_DEBUG`` >= 1; ``graph``: it was compiled for this call (in
        ``compile_s``). Returns the results and the run's seconds."""
        watcher, level = runtime._watcher, debug_sink.level()
        report = debug_sink.report_launch if level >= 2 else None
        program, key = self.program, self.program.record.graph.key
        nodes = len(self.program.record.graph.nodes)
        t0 = perf_counter()
        if watcher is None:
            results = program.run(params, report, self.dead) if self.dead else \
                program.run(params, report)
        else:
            event = watcher.barrier_started(self.backend)
            event.captured(key, nodes)
            if graph is not None:
                watcher.compiling(event, graph)
                event.compiled(program.record)
            event.running()
            results = watcher.run(event, program, params, report) if not self.dead else \
                program.run(params, report, self.dead)  # (the observer runs no donation)
            event.ran()
            watcher.barrier_done(event, program)
        seconds = perf_counter() - t0
        if level >= 1:
            debug_sink.report_graph(key, nodes, program.kernels, graph is not None,
                                    f"{self.backend} (torch.compile)", seconds + compile_s)
        return results, seconds

    def finish(self, env, results, seconds):
        m = metrics
        m.execute_time_s += seconds
        m.graphs_executed += 1
        m.kernel_launches += self.program.kernels
        for (slot, convert), r in zip(self.converters, results):
            env[slot] = convert(r)
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
        fetch = lambda a: env[a.slot] if type(a) is Slot else a  # noqa: E731
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


class Slot:
    """A reference to slot ``slot`` inside an eager step's arguments."""
    __slots__ = ("slot",)

    def __init__(self, slot):
        self.slot = slot


class Replay:
    """The recorded steps of one input signature; ``run(args)`` replays them."""

    def __init__(self, n_slots, constants, steps, outputs, mutations, n_programs,
                 in_place=frozenset(), n_inputs=0):
        self.template = [None] * n_slots
        for slot, value in constants.items():
            self.template[slot] = value
        self.steps = steps
        self.outputs = outputs  # per graph output: ("slot", n) or ("value", v)
        # (input position, slot of its new value): copied back, or, for the inputs the
        # last program computes in place, copied only where it could not (a strided input)
        self.mutations = [m for m in mutations if m[0] not in in_place]
        self.in_place = [m for m in mutations if m[0] in in_place]
        self.programs = n_programs
        direct = _direct(self, n_inputs)  # the inputs' slots come first (placeholders)
        if direct is not None:
            self.run = direct

    def run(self, args):
        env = self.template[:]
        env[:len(args)] = args
        for step in self.steps:
            step.run(env)
        for i, slot in self.mutations:
            args[i].copy_(env[slot])
        for i, slot in self.in_place:
            if env[slot].data_ptr() != args[i].data_ptr():
                args[i].copy_(env[slot])
        return [env[v] if kind == "slot" else v for kind, v in self.outputs]


def _direct(replay: Replay, n_args: int):
    """``replay.run`` as one closure, for the common recording: a single program
    that reads only the graph's inputs and constants, whose outputs (and the
    inputs themselves) are the graph's outputs. It binds and runs the program
    with no slot list, no step objects, no per-step calls: a small graph's call
    costs what the program's own run does, plus the inputs' views. None where
    the recording has anything else (eager calls, several programs, a watch)."""
    if len(replay.steps) != 1 or type(replay.steps[0]) is not ProgramStep:
        return None
    step = replay.steps[0]
    if step.checks or any(slot >= n_args for _, slot in step._slots):
        return None
    position = {slot: j for j, slot in enumerate(step.outputs)}
    outputs = []  # per graph output: (output position or -1, input position or -1, value)
    for kind, v in replay.outputs:
        if kind != "slot":
            outputs.append((-1, -1, v))
        elif v in position:
            outputs.append((position[v], -1, None))
        elif v < n_args:
            outputs.append((-1, v, None))
        else:
            return None
    copies = [(i, position[slot]) for i, slot in replay.mutations if slot in position]
    checked = [(i, position[slot]) for i, slot in replay.in_place if slot in position]
    if len(copies) != len(replay.mutations) or len(checked) != len(replay.in_place):
        return None
    run_program, dead, constants = step.program.run, step.dead, step._constants
    slots, seeds, kernels = step._slots, step._seeds, step.program.kernels
    convert = [c for _, c in step.converters]
    m, watched = metrics, debug_sink.watching
    slow = replay.run

    def run(args):
        if runtime._watcher is not None or watched():
            return slow(args)
        params = constants[:]
        for k, i in slots:
            params[k] = host_array(args[i])
        for k, generator in seeds:
            params[k] = draw_seed(generator)
        t0 = perf_counter()
        results = run_program(params, None, dead) if dead else run_program(params)
        m.execute_time_s += perf_counter() - t0
        m.graphs_executed += 1
        m.kernel_launches += kernels
        made = [c(r) for c, r in zip(convert, results)]
        for i, j in copies:
            args[i].copy_(made[j])
        for i, j in checked:
            if made[j].data_ptr() != args[i].data_ptr():
                args[i].copy_(made[j])
        return [made[j] if j >= 0 else (args[i] if i >= 0 else v) for j, i, v in outputs]
    return run
