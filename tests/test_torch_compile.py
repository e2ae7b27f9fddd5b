"""``torch.compile(module, backend="lazyrt")`` on random modules: forward and backward
against eager (float64 within 1e-10, float32 within 1e-4 of each tensor's scale),
outputs and every parameter's gradient; a second call replays the recording (new
values, nothing recorded or compiled again); dynamic batch sizes; dropout's masks.
"""
import copy
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from torch_compile_fixtures import (CORE_BACKENDS, EVERY_BACKEND, REL, CountingBackend,
                                    assert_close_rel, fresh_dynamo, lazyrt_counts)

assert fresh_dynamo  # the autouse fixture, imported by name


class Residual(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


def random_module(seed: int, dtype) -> tuple[nn.Module, tuple, bool]:
    """A seeded random stack of layers, the input shape it takes, and whether it
    holds a BatchNorm (which refuses a batch of one in training)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)  # the layers' initial weights
    width = n_in = rng.choice([1, 3, 5, 8])
    batch = rng.choice([1, 2, 7])
    extra = rng.choice([(), (3,)])  # a (batch, seq, features) input: no BatchNorm then
    layers, has_bn = [], False
    for _ in range(rng.randint(3, 7)):
        kind = rng.choice(["linear", "relu", "gelu", "gelu_tanh", "tanh", "layernorm",
                           "softmax", "dropout0", "residual", "batchnorm"])
        if kind == "linear":
            out = rng.choice([2, 5, 6, 9])
            layers.append(nn.Linear(width, out, bias=rng.random() < 0.8))
            width = out
        elif kind == "residual":
            layers.append(Residual(nn.Sequential(nn.Linear(width, width), nn.Tanh())))
        elif kind == "batchnorm" and not extra:
            layers.append(nn.BatchNorm1d(width, momentum=rng.choice([0.1, 0.5])))
            has_bn = True
        else:
            layers.append({"relu": nn.ReLU(), "gelu": nn.GELU(),
                           "gelu_tanh": nn.GELU(approximate="tanh"), "tanh": nn.Tanh(),
                           "layernorm": nn.LayerNorm(width), "softmax": nn.Softmax(-1),
                           "dropout0": nn.Dropout(0.0)}.get(kind, nn.Identity()))
    layers.append(nn.Linear(width, 4))
    module = nn.Sequential(*layers).to(dtype)
    for m in module.modules():  # running statistics that are not the identity
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    if has_bn and batch == 1:
        batch = 3
    return module, (batch, *extra, n_in), has_bn


def _forward_backward(run, module, x, weight):
    """``run(x)``, and each of ``module``'s parameters' gradient of a weighted sum of it
    (a plain sum of a softmax has zero gradients: nothing to compare)."""
    module.zero_grad(set_to_none=True)
    y = run(x)
    (y * weight).sum().backward()
    return y, {n: p.grad for n, p in module.named_parameters()}


def _check_against_eager(compiled, module, eager, x, weight, rel, what):
    y, grads = _forward_backward(compiled, module, x, weight)
    y_ref, grads_ref = _forward_backward(eager, eager, x, weight)
    assert_close_rel(y, y_ref, rel, f"{what} output")
    assert grads.keys() == grads_ref.keys()
    # a gradient that is zero but for rounding (a bias before a BatchNorm) is held to
    # the scale of all of them, not to its own noise
    scale = max(g.abs().max().item() for g in grads_ref.values())
    for name in grads:
        assert grads[name] is not None, f"{what}: no gradient for {name}"
        assert_close_rel(grads[name], grads_ref[name], rel, f"{what} grad of {name}",
                         scale=scale)
    for (name, b), b_ref in zip(module.named_buffers(), eager.buffers()):
        if b.is_floating_point():  # BatchNorm's running statistics
            assert_close_rel(b, b_ref, rel, f"{what} buffer {name}")
        else:
            assert torch.equal(b, b_ref), f"{what} buffer {name}"


def _random_module_cases():
    """Six seeds in training and eval, float64 and float32, on numpy and c; two
    seeds in training on the slower backends (triton's interpreter, jax)."""
    for backend in EVERY_BACKEND:
        core = backend in CORE_BACKENDS
        for train in (True, False) if core else (True,):
            for seed in range(6 if core else 2):
                for dtype in (torch.float64, torch.float32):
                    yield pytest.param(train, seed, dtype, backend, id="-".join(
                        ("train" if train else "eval", str(seed), str(dtype)[6:], backend)))


@pytest.mark.parametrize("train,seed,dtype,backend", list(_random_module_cases()))
def test_random_module_forward_backward_matches_eager(backend, dtype, seed, train):
    module, shape, _ = random_module(seed, dtype)
    module.train(train)
    eager = copy.deepcopy(module)
    counting = CountingBackend(backend)
    compiled = torch.compile(module, backend=counting, fullgraph=True)
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(shape[:-1] + (4,), generator=gen, dtype=dtype)
    x = torch.randn(shape, generator=gen, dtype=dtype)
    lr.metrics.reset()
    _check_against_eager(compiled, module, eager, x, weight, REL[dtype], "call 1")
    assert lr.metrics.snapshot()["fallbacks"] == {}
    graphs, before = counting.graphs, lazyrt_counts()
    # a replay: new values, the same programs, nothing traced, recorded or compiled
    x2 = torch.randn(shape, generator=gen, dtype=dtype) * 3
    _check_against_eager(compiled, module, eager, x2, weight, REL[dtype], "call 2")
    after = lazyrt_counts()
    assert counting.graphs == graphs == 1
    assert after["ops_recorded"] == before["ops_recorded"]
    assert after["cache_misses"] == before["cache_misses"]
    assert after["compiles"] == before["compiles"]
    assert after["graphs_executed"] >= before["graphs_executed"] + 2  # forward, backward
    assert lr.metrics.snapshot()["fallbacks"] == {}


def _small_model(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(),
                         Residual(nn.Sequential(nn.Linear(8, 8), nn.Tanh())),
                         nn.Linear(8, 3)).to(dtype)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_module_forward_backward_on_every_backend(backend):
    module = _small_model()
    eager = copy.deepcopy(module)
    compiled = torch.compile(module, backend=lt.backend(backend), fullgraph=True)
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(5, 3, generator=gen)
    for call in range(2):
        x = torch.randn(5, 6, generator=gen)
        _check_against_eager(compiled, module, eager, x, weight, 1e-4, f"call {call}")


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_second_call_replays_with_new_values(backend):
    counting = CountingBackend(backend)
    f = torch.compile(lambda x, y: (x * 2 + y).relu().sum(0) / y.exp().mean(),
                      backend=counting, fullgraph=True)
    eager = lambda x, y: (x * 2 + y).relu().sum(0) / y.exp().mean()  # noqa: E731
    x, y = torch.randn(4, 5), torch.randn(5)
    torch.testing.assert_close(f(x, y), eager(x, y))
    before, unique = lazyrt_counts(), torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for k in range(3):
        x, y = torch.randn(4, 5) + k, torch.randn(5) - k
        torch.testing.assert_close(f(x, y), eager(x, y))
    after = lazyrt_counts()
    assert after["graphs_executed"] == before["graphs_executed"] + 3
    assert (after["ops_recorded"], after["cache_misses"], after["compiles"]) == (
        before["ops_recorded"], before["cache_misses"], before["compiles"])
    assert counting.graphs == 1
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == unique


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_outputs_of_a_replay_are_not_overwritten_by_the_next(backend):
    f = torch.compile(lambda x: x * 2 + 1, backend=lt.backend(backend), fullgraph=True)
    a = f(torch.ones(3))
    b = f(torch.full((3,), 5.0))
    c = f(torch.zeros(3))
    assert a.tolist() == [3.0] * 3 and b.tolist() == [11.0] * 3 and c.tolist() == [1.0] * 3


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_dynamic_batch_sizes_give_right_values(backend):
    module = _small_model(torch.float64)
    eager = copy.deepcopy(module)
    counting = CountingBackend(backend)
    compiled = torch.compile(module, backend=counting, dynamic=True)
    gen = torch.Generator().manual_seed(2)
    lr.metrics.reset()
    seen = set()
    for batch in (4, 7, 1, 4, 2, 7):
        before, graphs = lr.metrics.snapshot()["ops_recorded"], counting.graphs
        x = torch.randn(batch, 6, generator=gen, dtype=torch.float64)
        weight = torch.randn(batch, 3, generator=gen, dtype=torch.float64)
        _check_against_eager(compiled, module, eager, x, weight, 1e-10, f"batch {batch}")
        # lazyrt records once per size (a recording is specialized), then replays
        recorded = lr.metrics.snapshot()["ops_recorded"] > before
        assert recorded == (batch not in seen), batch
        seen.add(batch)
        # Dynamo's graphs serve every size but 0 and 1, which it specializes
        assert counting.graphs == graphs or len(seen) == 1 or batch == 1, batch
    assert lr.metrics.snapshot()["fallbacks"] == {}


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_dynamic_graph_is_one_dynamo_graph_for_every_size(backend):
    counting = CountingBackend(backend)
    f = torch.compile(lambda x: (x.softmax(-1) * x.shape[0]).sum(0), backend=counting,
                      dynamic=True)
    for n in (3, 5, 8, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x), (x.softmax(-1) * n).sum(0))
    assert counting.graphs == 1


# --- dropout: a fresh mask per call, reproducible from torch.manual_seed ------------------

@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_dropout_draws_a_fresh_mask_each_call(backend):
    f = torch.compile(lambda x: F.dropout(x, 0.5, training=True), backend=lt.backend(backend))
    x = torch.ones(4096)
    masks = [f(x) for _ in range(3)]
    for y in masks:
        assert set(y.unique().tolist()) <= {0.0, 2.0}
        assert 0.45 < (y == 0).float().mean().item() < 0.55
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_manual_seed_reproduces_dropout(backend):
    f = torch.compile(lambda x: F.dropout(x, 0.3, training=True) * 2,
                      backend=lt.backend(backend))
    x = torch.randn(1000)
    torch.manual_seed(7)
    first = [f(x), f(x)]
    torch.manual_seed(7)
    again = [f(x), f(x)]
    torch.manual_seed(8)
    other = f(x)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[0], other)


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_dropout_backward_uses_the_forward_mask(backend):
    module = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.4))
    compiled = torch.compile(module, backend=lt.backend(backend))
    seen = []
    for _ in range(3):
        x = torch.randn(8, 16, requires_grad=True)
        hidden = module[0](x).detach()
        y = compiled(x)
        kept = y != 0
        # kept entries are scaled by 1/(1-p); dropped ones get no gradient
        torch.testing.assert_close(y[kept], hidden[kept] / 0.6)
        g = torch.randn(8, 64)
        y.backward(g)
        want = (g * kept / 0.6) @ module[0].weight
        torch.testing.assert_close(x.grad, want, rtol=1e-5, atol=1e-5)
        seen.append(kept)
    assert not torch.equal(seen[0], seen[1])
    module.eval()  # eval: dropout is the identity
    x = torch.randn(8, 16)
    torch.testing.assert_close(compiled(x), module[0](x))


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_seed_gives_the_same_mask_recording_or_replaying(backend):
    # the recording's run and a replay bind the same seed the same way (and every
    # backend draws the same Philox stream from it)
    f = torch.compile(lambda x: F.dropout(x, 0.5, training=True), backend=lt.backend(backend))
    g = torch.compile(lambda x: F.dropout(x, 0.5, training=True), backend=lt.backend("numpy"))
    x = torch.ones(257)
    torch.manual_seed(11)
    recorded = f(x)
    torch.manual_seed(11)
    replayed = f(x)
    torch.manual_seed(11)
    oracle = g(x)
    assert torch.equal(recorded, replayed) and torch.equal(replayed, oracle)


# --- what the lazy front-end lowers is lowered here too, not run eagerly ------------------

@pytest.mark.parametrize("backend", CORE_BACKENDS)
@pytest.mark.parametrize("fn", [
    lambda x: x + torch.arange(4, dtype=x.dtype),  # a factory with a device kwarg
    lambda x: x + torch.zeros(4, dtype=x.dtype) + torch.eye(4, dtype=x.dtype),
    lambda x: x.float() * 2 + x.to(torch.int64),  # dtype casts: _to_copy on the CPU
], ids=["arange", "zeros_eye", "casts"])
def test_factories_and_casts_are_lowered_not_run_eagerly(backend, fn):
    f = torch.compile(fn, backend=lt.backend(backend), fullgraph=True)
    lr.metrics.reset()
    for k in range(2):
        x = torch.randn(4, 4, dtype=torch.float64) + k
        torch.testing.assert_close(f(x), fn(x), rtol=0, atol=0)
    assert lr.metrics.snapshot()["fallbacks"] == {}
