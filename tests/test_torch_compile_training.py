"""The MLP and a 2-layer transformer encoder (``bench/torch_models.py``, at tiny
sizes) trained 20 steps with AdamW and with SGD through ``torch.compile(backend=
"lazyrt")``: the compiled model (forward and backward) and the compiled optimizer
step. Losses and weights match the same program run by torch (``aot_eager``)
tightly and eager loosely; after the first steps nothing is compiled again.
"""
import pytest
import torch

import lazyrt as lr
from bench.torch_models import MLP, TinyEncoder, token_loss
from torch_compile_fixtures import (CORE_BACKENDS, EVERY_BACKEND, NUMPY_POW,
                                    CountingBackend, assert_close_rel, fresh_dynamo,
                                    lazyrt_counts)

assert fresh_dynamo  # the autouse fixture, imported by name

STEPS = 20


def _mlp():
    torch.manual_seed(0)
    model = MLP(12, 24, 5)
    g = torch.Generator().manual_seed(1)
    batch = torch.randn(16, 12, generator=g), torch.randint(0, 5, (16,), generator=g)
    return model, batch, torch.nn.functional.cross_entropy


def _transformer():
    torch.manual_seed(0)
    model = TinyEncoder(vocab=32, d_model=16, heads=2, d_ff=32, layers=2)
    g = torch.Generator().manual_seed(2)
    batch = (torch.randint(0, 32, (2, 8), generator=g), torch.randint(0, 32, (2, 8), generator=g))
    return model, batch, token_loss


MODELS = {"mlp": _mlp, "transformer": _transformer}


def _optimizer(kind, params):
    if kind == "adamw":
        # eps 1e-6, not 1e-8: a gradient that is zero but for rounding (a bias whose
        # batch terms cancel) would otherwise take a full step of random sign, and
        # 20 steps would compare noise; real gradients here are far above it
        return torch.optim.AdamW(params, lr=1e-2, eps=1e-6, weight_decay=0.01, foreach=True)
    return torch.optim.SGD(params, lr=5e-2, momentum=0.9, weight_decay=1e-3, foreach=True)


def train(name, kind, backend, dtype=torch.float32):
    """Losses per step, final weights and per-step (Dynamo graphs, lazyrt counts);
    ``backend`` None is eager, ``"aot_eager"`` torch running the same graphs."""
    model, (x, y), loss_fn = MODELS[name]()
    model = model.to(dtype)
    x = x.to(dtype) if x.is_floating_point() else x
    opt = _optimizer(kind, list(model.parameters()))
    counting = CountingBackend(backend) if backend not in (None, "aot_eager") else None
    if backend is None:
        forward, step = model, opt.step
    else:
        forward = torch.compile(model, backend=counting or backend)
        step = torch.compile(opt.step, backend=counting or backend)
    losses, trace = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)
        loss.backward()
        step()
        losses.append(loss.item())
        trace.append((counting.graphs if counting else 0, lazyrt_counts()))
    return torch.tensor(losses, dtype=torch.float64), \
        {n: p.detach().clone() for n, p in model.named_parameters()}, trace


def _check(name, kind, backend, dtype, rel_same_graph, rel_eager):
    losses, weights, trace = train(name, kind, backend, dtype)
    torch._dynamo.reset()
    ref_losses, ref_weights, _ = train(name, kind, "aot_eager", dtype)
    eager_losses, eager_weights, _ = train(name, kind, None, dtype)
    assert losses[-1] < losses[0] * 0.9, losses  # it learns
    assert_close_rel(losses, ref_losses, rel_same_graph, "losses vs aot_eager")
    assert_close_rel(losses, eager_losses, rel_eager, "losses vs eager")
    for n in weights:
        assert_close_rel(weights[n], ref_weights[n], rel_same_graph, f"{n} vs aot_eager")
        assert_close_rel(weights[n], eager_weights[n], rel_eager, f"{n} vs eager")
    # steps 1-2 compile (the optimizer makes its state on the first); then replays only
    settled = trace[2]
    for graphs, counts in trace[3:]:
        assert graphs == settled[0]
        assert counts["cache_misses"] == settled[1]["cache_misses"]
        assert counts["ops_recorded"] == settled[1]["ops_recorded"]
    assert trace[-1][1]["graphs_executed"] >= settled[1]["graphs_executed"] + 3 * (STEPS - 3)
    assert lr.metrics.snapshot()["fallbacks"] == {}


@pytest.mark.parametrize("name,kind,backend", [
    pytest.param(n, k, b, marks=[NUMPY_POW] if (k, b) == ("adamw", "numpy") else [])
    for n in ("mlp", "transformer") for k in ("adamw", "sgd") for b in CORE_BACKENDS])
def test_training_matches_eager_float64(name, kind, backend):
    lr.metrics.reset()
    # float64: the same graph within 1e-10; eager within 1e-6 (its own kernels, its
    # fused attention), or 1e-4 for AdamW: compiled, torch computes the bias
    # corrections from the float32 step count (eager, from a Python float)
    _check(name, kind, backend, torch.float64, 1e-10, 1e-4 if kind == "adamw" else 1e-6)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_mlp_training_matches_eager_float32(backend):
    lr.metrics.reset()
    _check("mlp", "adamw", backend, torch.float32, 1e-4, 1e-3)
