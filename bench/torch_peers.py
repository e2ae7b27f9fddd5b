"""The three ways the torch suite runs one training step, one builder each.

A step is ``opt.zero_grad(); loss = loss_fn(model(x), y); loss.backward();
opt.step()`` with AdamW (lr 1e-3, torch's defaults otherwise: the for-loop
implementation on the CPU and on the lazy device), on one fixed batch:

* ``torch eager`` — the step as written.
* ``torch.compile`` — the model's forward and the loss compiled as one function
  (inductor, default mode; AOTAutograd compiles its backward too) and
  ``opt.step()`` compiled in a function of its own, as torch's optimizer
  tutorial does; ``zero_grad`` stays eager.
* ``lazyrt (torch.compile)`` — as ``torch.compile``, with ``backend=
  lazyrt.torch.backend("c")``: each AOT graph recorded once into lazyrt
  programs, replayed on every call (the user's CPU tensors, no lazy device).
* ``lazyrt-c`` — the step on lazy tensors through :mod:`lazyrt.torch`, then
  ``lt.mark_step()`` (one graph per step, the C backend). Each step records its
  *trace time*: from the step's start to ``mark_step``, less the kernel time of
  any graph computed before it (a counted fallback computes its inputs).

A builder that cannot run here returns a peer with ``error`` set (shown as
'n/a' with the reason), as bench/peers.py does.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from bench.peers import reason
from bench.timing import median
from bench.torch_models import ModelCase

LR = 1e-3
LAZY_BACKEND = "c"


@dataclass
class StepPeer:
    """One way to train one model: ``step()`` runs a whole step and returns the
    loss (computed); ``activate`` runs untimed before each timed sample."""
    name: str
    step: Optional[Callable[[], torch.Tensor]] = None
    activate: Callable[[], None] = lambda: None
    error: Optional[str] = None
    trace_s: list = field(default_factory=list)   # lazyrt only: one entry per step
    extra: dict = field(default_factory=dict)


def _training_step(model, opt, loss_fn, x, y, forward=None):
    forward = forward or (lambda a, b: loss_fn(model(a), b))

    def step():
        opt.zero_grad()
        loss = forward(x, y)
        loss.backward()
        opt.step()
        return loss
    return step


def eager_peer(case: ModelCase) -> StepPeer:
    try:
        model = case.build()
        x, y = case.batch()
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
    except Exception as e:  # a model that cannot be built is a row, not a crash
        return StepPeer("torch eager", error=reason(e))
    return StepPeer("torch eager", _training_step(model, opt, case.loss, x, y))


#: the lazy front-end's peer, and the torch.compile backend's
LAZY_PEER = f"lazyrt-{LAZY_BACKEND}"
REPLAY_PEER = "lazyrt (torch.compile)"


def compile_peer(case: ModelCase, backend: str = "inductor") -> StepPeer:
    name = "torch.compile" if backend == "inductor" else REPLAY_PEER
    try:
        from bench.peers import allow_many_compiles
        allow_many_compiles()
        if backend != "inductor":
            import lazyrt.torch as lt
            backend = lt.backend(LAZY_BACKEND)
        model = case.build()
        x, y = case.batch()
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        forward = torch.compile(lambda a, b: case.loss(model(a), b), backend=backend)
        opt_step = torch.compile(lambda: opt.step(), backend=backend)
    except Exception as e:
        return StepPeer(name, error=reason(e))

    def step():
        opt.zero_grad()
        loss = forward(x, y)
        loss.backward()
        opt_step()
        return loss
    return StepPeer(name, step)


def replay_peer(case: ModelCase) -> StepPeer:
    return compile_peer(case, backend="lazyrt")


def lazyrt_peer(case: ModelCase) -> StepPeer:
    name = LAZY_PEER
    try:
        import lazyrt as lr
        import lazyrt.torch as lt
        from lazyrt.metrics import metrics
        if LAZY_BACKEND not in lr.available_backends():
            raise RuntimeError(f"backend {LAZY_BACKEND!r} is not available here "
                               f"(available: {', '.join(lr.available_backends())})")
        lr.set_backend(LAZY_BACKEND)
        model = lt.lazy(case.build())
        x, y = (t.to("lazy") for t in case.batch())
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
    except Exception as e:
        return StepPeer(name, error=reason(e))
    inner = _training_step(model, opt, case.loss, x, y)
    peer = StepPeer(name, activate=lambda: lr.set_backend(LAZY_BACKEND))
    clock, trace = time.perf_counter, peer.trace_s

    def step():
        t0, run0 = clock(), metrics.execute_time_s
        loss = inner()
        t1, run1 = clock(), metrics.execute_time_s
        lt.mark_step()
        trace.append(t1 - t0 - (run1 - run0))
        return loss
    peer.step = step
    return peer


def build_peers(case: ModelCase, names) -> list[StepPeer]:
    """The peers of ``case`` named in ``names``, in a fixed order."""
    builders = {LAZY_PEER: lazyrt_peer, REPLAY_PEER: replay_peer,
                "torch eager": eager_peer, "torch.compile": compile_peer}
    return [builders[n](case) for n in builders if n in names]


# --- untimed counting passes --------------------------------------------------------

class _AtenCounter:
    """Counts the aten calls that reach the dispatcher below autograd, on tensors of
    one device type (for ``lazy``: what lazyrt's ``__torch_dispatch__`` traces,
    after functionalization; a fallback's own CPU ops are not counted)."""

    def __init__(self, device_type: str):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        counter = self

        def on_device(xs):
            return any(isinstance(t, torch.Tensor) and t.device.type == device_type
                       for t in tree_leaves(xs))

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                counter.n += on_device((args, kwargs)) or on_device(out)
                return out
        self.n, self.mode = 0, Mode()


def count_aten_ops(peer: StepPeer) -> Optional[int]:
    """Aten ops in one step of an eager or lazy peer (not torch.compile, whose
    compiled graphs do not dispatch op by op)."""
    if peer.error or peer.name in ("torch.compile", REPLAY_PEER):
        return None
    peer.activate()
    counter = _AtenCounter("lazy" if peer.name == LAZY_PEER else "cpu")
    try:
        with counter.mode:
            peer.step()
    except Exception as e:  # counting is information; its failure is reported
        peer.extra["aten_count_error"] = reason(e)
        return None
    return counter.n


def lazyrt_step_counters(peer: StepPeer) -> dict:
    """Graphs, kernel launches, recorded ops, compiles and fallbacks of one
    steady-state lazy step (differences of ``lazyrt.metrics.snapshot()``)."""
    import lazyrt as lr
    peer.activate()
    before = lr.metrics.snapshot()
    peer.step()
    after = lr.metrics.snapshot()
    out = {k: after[k] - before[k] for k in ("graphs_executed", "kernel_launches",
                                             "ops_recorded", "compiles", "cache_misses")}
    out["fallbacks"] = {op: n - before["fallbacks"].get(op, 0)
                        for op, n in after["fallbacks"].items()
                        if n - before["fallbacks"].get(op, 0)}
    return out


def trace_floor(peer: StepPeer, steps: int = 10) -> Optional[tuple]:
    """``(floor, trace)``: median traces of lazy steps that record nothing and of
    real ones, alternated so both see the same machine, each right after a real
    step's kernels.

    In a floor step every aten call reaching lazyrt's ``__torch_dispatch__`` from
    torch (and the Adam step's one-pass record) is answered from a tape of an
    earlier step's results, so no lowering runs and nothing is recorded. What is
    left is torch's machinery (the Python module code, autograd, functionalization)
    and lazyrt's Python dispatch path (torch's call into ``__torch_dispatch__``, one
    ``LazyTensor`` per result): the trace no recorder, however cheap, can go below
    while the per-op path is Python (:func:`cpp_floor` measures torch's part alone). Run last: the
    replayed steps write stale values into the model."""
    if peer.error or peer.name != LAZY_PEER:
        return None
    from lazyrt.torch import dispatch as lazy_dispatch
    from lazyrt.torch import optim as lazy_optim
    from lazyrt.torch import tensor as lazy_tensor
    from lazyrt.torch.tensor import LazyTensor
    real_dispatch, real_adam = lazy_tensor._dispatch, lazy_optim.adam_values
    tape, adam_tape = [], []

    def recording(func, args, kwargs):
        out = real_dispatch(func, args, kwargs)
        if lazy_dispatch.depth() == 0:
            tape.append(_values_of(out, LazyTensor))
        return out

    def adam_recording(*args, **kwargs):
        out = real_adam(*args, **kwargs)
        adam_tape.append(out)
        return out

    @contextlib.contextmanager
    def answering(dispatch, adam):
        lazy_tensor._dispatch, lazy_optim.adam_values = dispatch, adam
        try:
            yield
        finally:
            lazy_tensor._dispatch, lazy_optim.adam_values = real_dispatch, real_adam
    peer.activate()
    with answering(recording, adam_recording):
        peer.step()
    cursor = [0, 0]

    def replaying(func, args, kwargs):
        if lazy_dispatch.depth() or cursor[0] >= len(tape):
            return real_dispatch(func, args, kwargs)
        cursor[0] += 1
        return _rewrapped(tape[cursor[0] - 1], LazyTensor)

    def adam_replaying(*args, **kwargs):
        cursor[1] += 1
        return adam_tape[(cursor[1] - 1) % len(adam_tape)]
    first = len(peer.trace_s)
    floor, real = [], []
    try:
        for _ in range(steps):
            # a floor step's mark_step has nothing to compute (its values come from
            # the tape), so the step after it starts on warm caches: that one is not
            # timed. Both timed steps follow a real step's kernels, as in training.
            peer.activate()
            peer.step()
            peer.step()
            real.append(peer.trace_s[-1])
            cursor[0] = cursor[1] = 0
            with answering(replaying, adam_replaying):
                peer.step()
            floor.append(peer.trace_s[-1])
    except Exception as e:  # information only: a step the tape cannot answer
        peer.extra["trace_floor_error"] = reason(e)
        return None
    finally:
        del peer.trace_s[first:]
    return median(floor), median(real)


def cpp_floor(case: ModelCase, steps: int = 15) -> Optional[dict]:
    """What torch's own machinery costs per step with C++ kernels and no Python
    dispatch: ``case.twin`` (the same layers at tiny sizes, so the same aten ops
    with next to no compute), on the CPU, timed in parts:

    * forward and backward with every parameter and input wrapped in torch's C++
      functionalization, as lazyrt's user tensors are;
    * ``zero_grad`` and the optimizer step eager (lazyrt records Adam's step in one
      pass, outside functionalization).

    A lazy device whose whole per-op path is C++ (torch's LTC and PyTorch/XLA
    work that way) would trace about this much per step; the rest of lazyrt's trace
    is its Python path: ``__torch_dispatch__``, one ``LazyTensor`` per result, the
    lowering and the recording."""
    if case.twin is None:
        return None
    twin = case.twin()
    try:
        model = twin.build()
        x, y = twin.batch()
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        functional = twin.build()
        with torch.no_grad():
            for m in functional.modules():
                for k, p in list(m._parameters.items()):
                    if p is not None:
                        m._parameters[k] = torch.nn.Parameter(
                            torch._to_functional_tensor(p.detach()), requires_grad=True)
        fx, fy = torch._to_functional_tensor(x), torch._to_functional_tensor(y)
        clock = time.perf_counter
        optimizer, forward_backward = [], []
        for i in range(steps + 3):
            t0 = clock()
            opt.zero_grad()
            t1 = clock()
            twin.loss(model(x), y).backward()
            t2 = clock()
            opt.step()
            t3 = clock()
            functional.zero_grad()
            t4 = clock()
            twin.loss(functional(fx), fy).backward()
            t5 = clock()
            if i >= 3:  # the first steps create the optimizer's state
                optimizer.append(t1 - t0 + t3 - t2)
                forward_backward.append(t5 - t4)
    except Exception as e:  # information only
        return {"error": reason(e)}
    parts = {"optimizer": median(optimizer),
             "functional_forward_backward": median(forward_backward)}
    return {"floor_s": sum(parts.values()), "parts_s": parts}


def _values_of(out, lazy_type):
    if type(out) is lazy_type:
        return ("tensor", out.value)
    if isinstance(out, (list, tuple)):
        return (type(out), [_values_of(o, lazy_type) for o in out])
    return ("other", out)


def _rewrapped(taped, lazy_type):
    kind, v = taped
    if kind == "tensor":
        return lazy_type(v)
    if kind == "other":
        return v
    return kind(_rewrapped(t, lazy_type) for t in v)


def dynamo_graphs() -> int:
    """Graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])
