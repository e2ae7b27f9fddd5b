"""``torch.compile(backend="lazyrt")`` and state: inputs a graph mutates (BatchNorm's
running statistics, ``x.add_``, an optimizer's parameters and moments) are written
back into the caller's tensors, which keep their identity and memory; a tensor
learning rate moved by a scheduler recompiles nothing; an op lazyrt cannot lower runs
eagerly between programs, counted per call and warned once; eager's checks are
raised; ``backend="lazyrt"`` is found by name in a process that never imported lazyrt.
"""
import copy
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.errors import PerformanceWarning
from lazyrt.torch import fx_program
from torch_compile_fixtures import (CORE_BACKENDS, EVERY_BACKEND, NUMPY_POW, CountingBackend,
                                    assert_close_rel, fresh_dynamo, lazyrt_counts)

assert fresh_dynamo  # the autouse fixture, imported by name

F64 = torch.float64


# --- inputs a graph mutates ------------------------------------------------------------

@pytest.mark.parametrize("backend", CORE_BACKENDS)
@pytest.mark.parametrize("momentum", [0.3, None], ids=["momentum", "cumulative"])
def test_batchnorm_running_stats_match_eager_after_steps(backend, momentum):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6, momentum=momentum), nn.ReLU(),
                           nn.Linear(6, 2)).to(F64)
    eager = copy.deepcopy(module)
    # momentum=None reads num_batches_tracked as a Python float: Dynamo breaks the graph
    compiled = torch.compile(module, backend=lt.backend(backend),
                             fullgraph=momentum is not None)
    buffers = {name: (b, b.data_ptr()) for name, b in module.named_buffers()}
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        x = torch.randn(8, 5, generator=gen, dtype=F64) * (step + 1) + step
        compiled(x).pow(2).sum().backward()
        eager(x).pow(2).sum().backward()
        for (name, b), b_ref in zip(module.named_buffers(), eager.buffers()):
            if b.is_floating_point():
                assert_close_rel(b, b_ref, 1e-12, f"step {step} {name}")
            else:
                assert torch.equal(b, b_ref), (name, b, b_ref)
    assert module[1].num_batches_tracked.item() == 4
    for name, b in module.named_buffers():  # written in place, never replaced
        assert buffers[name][0] is b and buffers[name][1] == b.data_ptr(), name
    # the first Linear's bias gets zero but for rounding (a BatchNorm follows it):
    # each gradient is held to the scale of them all
    scale = max(p.grad.abs().max().item() for p in eager.parameters())
    for p, p_ref in zip(module.parameters(), eager.parameters()):
        assert_close_rel(p.grad, p_ref.grad, 1e-10, "accumulated grad", scale=scale)
    module.eval()
    eager.eval()
    x = torch.randn(3, 5, generator=gen, dtype=F64)
    assert_close_rel(compiled(x), eager(x), 1e-12, "eval output")


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_in_place_ops_on_inputs_are_written_back(backend):
    def f(x, y, base):
        x.add_(1)
        y[1:].mul_(2)
        base[:, ::2].sub_(x[:1])  # through a strided view of an input
        return x * y.sum()

    compiled = torch.compile(f, backend=lt.backend(backend), fullgraph=True)
    gen = torch.Generator().manual_seed(3)
    for call in range(3):  # the recording, then replays
        x, y = torch.randn(2, 3, generator=gen), torch.randn(4, generator=gen)
        base = torch.randn(2, 6, generator=gen)
        x0, y0, base0 = x.clone(), y.clone(), base.clone()
        pointers = (x.data_ptr(), y.data_ptr(), base.data_ptr())
        out = compiled(x, y, base)
        want = f(x0, y0, base0)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(x, x0)
        torch.testing.assert_close(y, y0)
        torch.testing.assert_close(base, base0)
        assert (x.data_ptr(), y.data_ptr(), base.data_ptr()) == pointers


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_a_strided_input_view_is_mutated_in_its_base(backend):
    compiled = torch.compile(lambda v: v.mul_(10), backend=lt.backend(backend), fullgraph=True)
    for call in range(2):
        base = torch.arange(12.0).reshape(3, 4) + call
        want = base.clone()
        want[:, 1::2] *= 10
        compiled(base[:, 1::2])
        torch.testing.assert_close(base, want)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_an_in_place_result_is_returned(backend):
    # the graph returns the copy_ into its input: eager returns that input itself
    compiled = torch.compile(lambda v: v.mul_(10), backend=lt.backend(backend), fullgraph=True)
    for call in range(3):
        x = torch.arange(4.0) + call
        out = compiled(x)
        assert torch.equal(x, (torch.arange(4.0) + call) * 10) and torch.equal(out, x)


def _parameters():
    torch.manual_seed(0)
    return [nn.Parameter(torch.randn(4, 3, dtype=F64)), nn.Parameter(torch.randn(3, dtype=F64))]


def _optimizer(kind, params, lr):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=0.01, foreach=True)
    capturable = isinstance(lr, torch.Tensor)  # a tensor lr needs it with foreach
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, weight_decay=0.1, foreach=True, capturable=capturable)


def _train_steps(kind, backend, lr, steps=6, with_scheduler=True):
    """Parameters, optimizer state and (Dynamo graphs, lazyrt counts) per step of a
    compiled ``opt.step`` (``backend`` None: eager) on fixed gradients."""
    params = _parameters()
    opt = _optimizer(kind, params, lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, 0.7) if with_scheduler else None
    counting = None if backend in (None, "aot_eager") else CountingBackend(backend)
    step = opt.step if backend is None else torch.compile(opt.step, backend=counting or backend)
    pointers = [p.data_ptr() for p in params]
    gen = torch.Generator().manual_seed(5)
    trace = []
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=F64)
        step()
        if sched is not None:
            sched.step()
        trace.append((counting.graphs if counting else 0, lazyrt_counts()))
    assert [p.data_ptr() for p in params] == pointers  # updated in place
    state = [{k: v.clone() for k, v in opt.state[p].items()} for p in params]
    return params, state, trace


def _backend_kind_cases(kinds, pow_cases):
    return [pytest.param(b, k, marks=[NUMPY_POW] if b == "numpy" and k in pow_cases else [])
            for b in CORE_BACKENDS for k in kinds]


@pytest.mark.parametrize("backend,kind", _backend_kind_cases(("sgd", "adam", "adamw"),
                                                             ("adam", "adamw")))
def test_tensor_lr_scheduler_steps_match_and_never_recompile(backend, kind):
    params, state, trace = _train_steps(kind, backend, torch.tensor(0.05, dtype=F64))
    torch._dynamo.reset()
    ref_params, ref_state, _ = _train_steps(kind, "aot_eager", torch.tensor(0.05, dtype=F64))
    for p, q in zip(params, ref_params):
        assert_close_rel(p, q, 1e-12, f"{kind} parameter")
    for s, r in zip(state, ref_state):
        assert s.keys() == r.keys()
        for k in s:
            assert_close_rel(s[k], r[k], 1e-12, f"{kind} state {k}")
    # the first step makes the state (its own graph); from the second on, the lr the
    # scheduler moves is a value: no Dynamo graph, no lazyrt program, nothing recorded
    settled = trace[1]
    for graphs, counts in trace[2:]:
        assert graphs == settled[0]
        assert counts["cache_misses"] == settled[1]["cache_misses"]
        assert counts["ops_recorded"] == settled[1]["ops_recorded"]
    assert trace[-1][1]["graphs_executed"] > settled[1]["graphs_executed"]


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_sgd_with_tensor_lr_matches_eager(backend):
    # eager CPU takes a tensor lr in SGD (Adam's needs capturable, which it refuses)
    params, state, _ = _train_steps("sgd", backend, torch.tensor(0.05, dtype=F64))
    ref_params, ref_state, _ = _train_steps("sgd", None, torch.tensor(0.05, dtype=F64))
    for p, q in zip(params, ref_params):
        assert_close_rel(p, q, 1e-12, "parameter")
    for s, r in zip(state, ref_state):
        assert_close_rel(s["momentum_buffer"], r["momentum_buffer"], 1e-12, "momentum")


@pytest.mark.parametrize("backend,kind", _backend_kind_cases(("adam", "adamw"),
                                                             ("adam", "adamw")))
def test_float_lr_without_scheduler_matches_aot_eager_and_eager(backend, kind):
    params, state, trace = _train_steps(kind, backend, 0.05, with_scheduler=False)
    torch._dynamo.reset()
    ref_params, ref_state, _ = _train_steps(kind, "aot_eager", 0.05, with_scheduler=False)
    eager_params, _, _ = _train_steps(kind, None, 0.05, with_scheduler=False)
    for p, q, e in zip(params, ref_params, eager_params):
        assert_close_rel(p, q, 1e-12, f"{kind} parameter")
        # compiled, torch computes the bias corrections from the float32 step count
        # (eager, from a Python float): ~1e-5 apart after a few steps, aot_eager too
        assert_close_rel(p, e, 1e-4, f"{kind} parameter vs eager")
    for s, r in zip(state, ref_state):
        for k in ("exp_avg", "exp_avg_sq"):
            assert_close_rel(s[k], r[k], 1e-12, f"{kind} state {k}")
    assert trace[-1][0] == trace[1][0]  # nothing compiled after the second step


@pytest.mark.parametrize("backend", CORE_BACKENDS)
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW], ids=["adam", "adamw"])
def test_fused_optimizer_step_runs_and_matches_eager(backend, cls):
    # torch.compile runs _fused_adam(w) eagerly (Dynamo is disabled on it): the compiled
    # step must still update the parameters in place, as eager does
    def run(compiled):
        params = _parameters()
        opt = cls(params, lr=0.05, weight_decay=0.1, fused=True)
        step = torch.compile(opt.step, backend=lt.backend(backend)) if compiled else opt.step
        gen = torch.Generator().manual_seed(5)
        for _ in range(4):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen, dtype=F64)
            step()
        return params
    for p, q in zip(run(True), run(False)):
        assert_close_rel(p, q, 1e-12, "parameter")


# --- an op lazyrt cannot lower -------------------------------------------------------

@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_unsupported_op_runs_eagerly_counted_per_call_and_warned_once(backend, monkeypatch):
    monkeypatch.setattr(fx_program, "_warned", set())  # warned once per process
    def f(x):
        y = torch.special.bessel_j0(x * 2)  # no lowering, no decomposition
        return (y + x).exp().sum(0)

    compiled = torch.compile(f, backend=lt.backend(backend), fullgraph=True)
    lr.metrics.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call in range(3):
            x = torch.randn(5, 3, dtype=F64) + call
            assert_close_rel(compiled(x), f(x), 1e-12, f"call {call}")
            assert lr.metrics.snapshot()["fallbacks"] == {
                "aten.special_bessel_j0.default": call + 1}
    warned = [w for w in caught if issubclass(w.category, PerformanceWarning)]
    assert len(warned) == 1, [str(w.message) for w in warned]
    message = str(warned[0].message)
    assert "aten.special_bessel_j0.default" in message and __file__ in message
    # the lazyrt programs on either side of it ran too
    assert lr.metrics.snapshot()["graphs_executed"] >= 4


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_unsupported_op_in_a_backward_graph(backend, monkeypatch):
    monkeypatch.setattr(fx_program, "_warned", set())
    module = nn.Linear(4, 3).to(F64)
    eager = copy.deepcopy(module)
    compiled = torch.compile(lambda x: torch.digamma(module(x).exp() + 1).sum(),
                             backend=lt.backend(backend), fullgraph=True)
    lr.metrics.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerformanceWarning)
        for call in range(2):
            x = torch.randn(6, 4, dtype=F64)
            module.zero_grad()
            eager.zero_grad()
            compiled(x).backward()
            torch.digamma(eager(x).exp() + 1).sum().backward()
            for p, q in zip(module.parameters(), eager.parameters()):
                assert_close_rel(p.grad, q.grad, 1e-10, f"call {call} grad")
    fallbacks = lr.metrics.snapshot()["fallbacks"]
    assert fallbacks.get("aten.digamma.default") == 2  # the forward, once per call
    assert fallbacks.get("aten.polygamma.default") == 2  # its derivative, in the backward


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_index_out_of_range_raises_on_a_replay(backend):
    compiled = torch.compile(lambda x, i: x[i] * 2, backend=lt.backend(backend), fullgraph=True)
    x = torch.randn(5, 2)
    torch.testing.assert_close(compiled(x, torch.tensor([0, 4])), x[[0, 4]] * 2)
    with pytest.raises(IndexError, match="out of bounds|out of range"):
        compiled(x, torch.tensor([1, 5]))
    torch.testing.assert_close(compiled(x, torch.tensor([-5, 3])), x[[-5, 3]] * 2)


# --- found by name --------------------------------------------------------------------

ENTRY_POINT_SCRIPT = """
import sys, torch
assert "lazyrt" not in sys.modules
f = torch.compile(lambda x: (x * 2 + 1).relu().sum(), backend="lazyrt", fullgraph=True)
out = f(torch.arange(-2.0, 3.0))
assert out.item() == 9.0, out
out = f(torch.arange(0.0, 5.0))  # a replay
assert out.item() == 25.0, out
import lazyrt
assert lazyrt.metrics.snapshot()["graphs_executed"] == 1  # the replay's run
print("ok")
"""


def test_backend_is_found_by_name_in_a_fresh_process():
    done = subprocess.run([sys.executable, "-c", ENTRY_POINT_SCRIPT], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
