"""Random draws on the lazy device: lazyrt's Philox op keyed by a seed drawn from
torch's generator (dropout's forward and backward share one mask; a fresh mask
every step compiles nothing; torch.manual_seed reproduces a run), and
eager-mask mode, which matches eager torch exactly."""
import copy
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch.testing import assert_same, backends
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)


FLOATS = [torch.float16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_backward_uses_the_forward_mask(torch_backend, dtype, p):
    torch.manual_seed(11)
    x = (torch.rand(60, 70, dtype=dtype) + 0.5).to("lazy").requires_grad_()
    w = torch.randn(60, 70, dtype=dtype).to("lazy")
    lr.metrics.reset()
    y = F.dropout(x, p, training=True)
    (y * w).sum().backward()
    out, grad = lt.to_cpu(y).detach(), lt.to_cpu(x.grad)
    xs, ws = lt.to_cpu(x).detach(), lt.to_cpu(w)
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert out.dtype == grad.dtype == dtype
    kept = out != 0                                   # x is never 0: zero means dropped
    scale = torch.tensor(1 / (1 - p), dtype=dtype)
    assert torch.equal(grad == 0, ~kept | (ws == 0))  # zero gradient exactly where dropped
    torch.testing.assert_close(out[kept], (xs * scale)[kept], rtol=1e-3 if dtype == torch.float16
                               else 0, atol=0)
    torch.testing.assert_close(grad[kept], (ws * scale)[kept],
                               rtol=1e-3 if dtype == torch.float16 else 1e-6, atol=0)
    n = out.numel()                                   # the keep rate within 5 sigma
    assert abs(kept.double().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)


def test_dropout_draws_a_fresh_mask_each_call_and_eval_keeps_all(torch_backend):
    x = torch.ones(100, 40).to("lazy")
    a, b = lt.to_cpu(F.dropout(x, 0.5)), lt.to_cpu(F.dropout(x, 0.5))
    assert not torch.equal(a, b)
    assert torch.equal(lt.to_cpu(F.dropout(x, 0.5, training=False)), torch.ones(100, 40))
    assert torch.equal(lt.to_cpu(F.dropout(x, 0.0)), torch.ones(100, 40))
    assert torch.equal(lt.to_cpu(F.dropout(x, 1.0)), torch.zeros(100, 40))
    out, mask = torch.native_dropout(x, 1.0, True)
    assert torch.equal(lt.to_cpu(out), torch.zeros(100, 40)) and not lt.to_cpu(mask).any()
    out, mask = torch.native_dropout(x, 0.3, False)
    assert torch.equal(lt.to_cpu(out), torch.ones(100, 40)) and lt.to_cpu(mask).all()
    assert lt.to_cpu(F.dropout(torch.ones(0, 3).to("lazy"), 0.5)).shape == (0, 3)


def test_dropout_refuses_integer_tensors_and_bad_probabilities(torch_backend):
    with pytest.raises(RuntimeError, match="native_dropout.*int64"):
        torch.native_dropout(torch.ones(3, dtype=torch.int64).to("lazy"), 0.5, True)
    with pytest.raises(ValueError, match="probability has to be between 0 and 1"):
        F.dropout(torch.ones(3).to("lazy"), 1.5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_draw_statistics(torch_backend, dtype):
    torch.manual_seed(4)
    n = 40000
    u = lt.to_cpu(torch.rand(200, 200, device="lazy", dtype=dtype)).double()
    z = lt.to_cpu(torch.randn(n, device="lazy", dtype=dtype)).double()
    v = lt.to_cpu(torch.empty(n, device="lazy", dtype=dtype).uniform_(-2, 3)).double()
    g = lt.to_cpu(torch.empty(n, device="lazy", dtype=dtype).normal_(5, 0.5)).double()
    b = lt.to_cpu(torch.bernoulli(torch.full((n,), 0.3, device="lazy", dtype=dtype)))
    assert b.dtype == dtype and set(b.unique().tolist()) <= {0.0, 1.0}
    assert u.shape == (200, 200) and 0 <= u.min() and u.max() <= 1
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 0.005
    assert abs(z.mean()) < 5 / math.sqrt(n) and abs(z.std() - 1) < 0.02
    assert -2 <= v.min() and v.max() <= 3 and abs(v.mean() - 0.5) < 5 * 5 * math.sqrt(1 / 12 / n)
    assert abs(g.mean() - 5) < 5 * 0.5 / math.sqrt(n) and abs(g.std() - 0.5) < 0.02
    assert abs(b.double().mean() - 0.3) < 5 * math.sqrt(0.21 / n)
    # neighbouring elements are not correlated (the stream is laid out row-major)
    flat = u.flatten()
    assert abs(torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1]) < 0.03


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32])
def test_bernoulli_with_a_probability_tensor_and_other_dtypes(torch_backend, dtype):
    probs = torch.tensor([0.0, 1.0, 0.0, 1.0] * 50, dtype=torch.float64).to("lazy")
    assert torch.equal(lt.to_cpu(torch.bernoulli(probs)), probs.cpu())
    out = torch.zeros(200, dtype=dtype).to("lazy").bernoulli_(probs)
    assert lt.to_cpu(out).dtype == dtype
    assert torch.equal(lt.to_cpu(out), probs.cpu().to(dtype))
    half = torch.zeros(4000, dtype=dtype).to("lazy").bernoulli_(0.5)
    assert abs(lt.to_cpu(half).double().mean().item() - 0.5) < 5 * math.sqrt(0.25 / 4000)
    assert lr.metrics.snapshot()["fallbacks"] == {}


def test_zero_d_and_empty_draws(torch_backend):
    assert lt.to_cpu(torch.rand((), device="lazy")).shape == ()
    assert lt.to_cpu(torch.randn(0, 4, device="lazy")).shape == (0, 4)
    assert lt.to_cpu(torch.randn_like(torch.ones(3, 0).to("lazy"))).shape == (3, 0)


def test_manual_seed_reproduces_a_lazy_run(torch_backend):
    def run(seed):
        torch.manual_seed(seed)
        x = torch.randn(30, 20, device="lazy")
        return lt.to_cpu(F.dropout(x, 0.4) + torch.rand(30, 20, device="lazy"))
    first, again, other = run(3), run(3), run(4)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    gen = torch.Generator().manual_seed(9)   # an explicit generator is drawn from, too
    a = lt.to_cpu(torch.rand(50, device="lazy", generator=gen))
    b = lt.to_cpu(torch.rand(50, device="lazy", generator=torch.Generator().manual_seed(9)))
    assert torch.equal(a, b)


INTEGER_DRAWS = {
    "randint": lambda d, g: torch.randint(-3, 9, (40, 50), device=d, generator=g),
    "randint float": lambda d, g: torch.randint(9, (40, 50), device=d, dtype=torch.float32,
                                                generator=g),
    "randint_like": lambda d, g: torch.randint_like(torch.ones(40, 50, dtype=torch.int32).to(d),
                                                    2, 12, generator=g),
    "random_ to": lambda d, g: torch.empty(40, 50, device=d, dtype=torch.uint8).random_(
        200, generator=g),
    "random_ bool": lambda d, g: torch.empty(40, 50, device=d, dtype=torch.bool).random_(
        generator=g),
    "random_ from": lambda d, g: torch.empty(40, 50, device=d, dtype=torch.int8).random_(
        -128, None, generator=g),
    "random_ int64": lambda d, g: torch.empty(40, 50, device=d, dtype=torch.int64).random_(
        generator=g),
    "random_ float16": lambda d, g: torch.empty(40, 50, device=d, dtype=torch.float16).random_(
        generator=g),
}


@pytest.mark.parametrize("name", INTEGER_DRAWS)
def test_integer_draws_are_philox_with_eagers_bounds_and_dtype(torch_backend, name):
    draw = INTEGER_DRAWS[name]
    lr.metrics.reset()
    got = lt.to_cpu(draw("lazy", torch.Generator().manual_seed(5)))
    assert lr.metrics.snapshot()["fallbacks"] == {}
    want = draw("cpu", torch.Generator().manual_seed(5))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert not torch.equal(got, want)   # lazyrt's Philox, not torch's mt19937 fed in as data
    if name == "random_ int64":      # [0, 2^63 - 1]: both draws spread over the top bits
        assert got.min().item() >= 0 and (got >> 61).unique().numel() == 4
    elif name == "random_ float16":  # [0, 2^11]
        assert 0 <= got.min().item() and got.max().item() <= 2048 and got.unique().numel() > 600
    else:  # 2000 draws of a small range reach both of eager's ends
        assert (got.min().item(), got.max().item()) == (want.min().item(), want.max().item())
    again = lt.to_cpu(draw("lazy", torch.Generator().manual_seed(5)))
    other = lt.to_cpu(draw("lazy", torch.Generator().manual_seed(6)))
    assert torch.equal(got, again) and not torch.equal(got, other)


def test_integer_draws_reject_eagers_bad_bounds_with_eagers_words(torch_backend):
    with pytest.raises(RuntimeError, match="'from' to be less than 'to', but got from=5 >= to=5"):
        torch.empty(3, device="lazy").random_(5, 5)
    with pytest.raises(RuntimeError, match=r"to - 1 is out of bounds for torch\.int8"):
        torch.randint(0, 1000, (3,), dtype=torch.int8, device="lazy")
    with pytest.raises(RuntimeError, match=r"from is out of bounds for torch\.uint8"):
        torch.empty(3, dtype=torch.uint8, device="lazy").random_(-1, 5)


def test_an_integer_span_over_2_63_is_drawn_by_torch(torch_backend):
    lr.metrics.reset()
    torch.manual_seed(4)
    got = lt.to_cpu(torch.empty(6, dtype=torch.int64, device="lazy").random_(-2**63, None))
    torch.manual_seed(4)
    assert torch.equal(got, torch.empty(6, dtype=torch.int64).random_(-2**63, None))
    assert lr.metrics.snapshot()["fallbacks"] == {}


def test_randint_in_a_loop_compiles_nothing_after_the_first_step(torch_backend):
    x = torch.ones(8, 10).to("lazy")
    for step in range(5):
        if step == 2:
            before = lr.metrics.snapshot()["compiles"]
        keep = torch.randint(0, 10 + step, (8, 10), device="lazy") > 4   # new bounds each step
        lt.to_cpu(x * keep)
    assert lr.metrics.snapshot()["compiles"] == before


def _dropout_mlp():
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))


def test_training_with_dropout_compiles_nothing_after_step_two(torch_backend):
    model = lt.lazy(_dropout_mlp())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 6), torch.randn(8, 4)
    compiles, losses = [], []
    for step in range(5):
        lr.metrics.reset()
        loss = F.mse_loss(model(x.to("lazy")), y.to("lazy"))
        opt.zero_grad(); loss.backward(); opt.step()
        lt.mark_step()
        losses.append(loss.item())
        snap = lr.metrics.snapshot()
        assert snap["fallbacks"] == {}
        compiles.append((snap["compiles"], snap["cache_misses"]))
    assert compiles[2:] == [(0, 0)] * 3, compiles
    assert len(set(losses)) == 5 and all(math.isfinite(v) for v in losses)


def _train_steps(model, dev, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 6, generator=g, dtype=torch.float64), \
            torch.randn(8, 4, generator=g, dtype=torch.float64)
        loss = F.mse_loss(model(x.to(dev)), y.to(dev))
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
    return losses


def test_eager_mask_mode_matches_eager_training_exactly(torch_backend):
    eager = _dropout_mlp().double()
    lazy = lt.lazy(copy.deepcopy(eager))
    torch.manual_seed(21)
    want = _train_steps(eager, "cpu")
    lr.metrics.reset()
    with lt.eager_random():
        assert lt.eager_random_enabled()
        torch.manual_seed(21)
        got = _train_steps(lazy, "lazy")
    assert not lt.eager_random_enabled()
    assert lr.metrics.snapshot()["fallbacks"] == {}
    # the same masks; sums may round in another order (a different mask would be far off)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-12, atol=0)
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert_same(q, p, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("draw", [
    lambda d: torch.randn(4, 5, device=d), lambda d: torch.rand(3, device=d),
    lambda d: torch.rand(3, device=d, dtype=torch.float64),
    lambda d: torch.randint(0, 5, (6,), device=d), lambda d: torch.randint(7, (6,), device=d),
    lambda d: torch.randint_like(torch.ones(2, 3).to(d), 2, 9),
    lambda d: torch.empty(5, device=d, dtype=torch.int64).random_(),
    lambda d: torch.randn_like(torch.ones(2, 2).to(d)),
    lambda d: torch.empty(3, device=d).uniform_(2, 3),
    lambda d: torch.empty(3, device=d).normal_(2, 3),
    lambda d: torch.bernoulli(torch.full((5,), 0.5, device=d)),
    lambda d: torch.zeros(5, device=d).bernoulli_(0.3),
    lambda d: F.dropout(torch.ones(6, 7, device=d), 0.4)])
def test_eager_mask_mode_draws_are_eagers(torch_backend, draw):
    with lt.eager_random():
        torch.manual_seed(3)
        lr.metrics.reset()
        got = draw("lazy")
        assert lr.metrics.snapshot()["fallbacks"] == {}
    torch.manual_seed(3)
    assert_same(got, draw("cpu"))


def test_eager_mask_mode_from_the_environment():
    code = ("import torch, lazyrt.torch as lt, torch.nn.functional as F; "
            "torch.manual_seed(1); a = lt.to_cpu(F.dropout(torch.ones(9, 9).to('lazy'), 0.5)); "
            "torch.manual_seed(1); print(lt.eager_random_enabled(), "
            "torch.equal(a, F.dropout(torch.ones(9, 9), 0.5)))")
    env = dict(os.environ, LAZYRT_TORCH_EAGER_RANDOM="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.split() == ["True", "True"]


def test_transformer_encoder_layer_with_dropout_trains_without_fallback(torch_backend):
    torch.manual_seed(9)
    model = lt.lazy(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.2, batch_first=True))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(2, 5, 8)
    compiles, losses = [], []
    for step in range(4):
        lr.metrics.reset()
        out = model(x.to("lazy"))
        loss = (out * out).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        lt.mark_step()
        losses.append(loss.item())
        snap = lr.metrics.snapshot()
        assert snap["fallbacks"] == {}, snap["fallbacks"]
        compiles.append(snap["compiles"])
    assert compiles[2:] == [0, 0], compiles
    assert all(math.isfinite(v) for v in losses)


def test_every_backend_draws_the_same_mask_for_a_seed():
    outs = []
    for name in backends():
        with lr.backend(name):
            torch.manual_seed(5)
            x = torch.ones(40, 30).to("lazy").requires_grad_()
            y = F.dropout(x, 0.3)
            y.sum().backward()
            outs.append((lt.to_cpu(y).detach(), lt.to_cpu(x.grad),
                         lt.to_cpu(torch.rand(7, 3, device="lazy", dtype=torch.float64))))
    for got in outs[1:]:  # Philox is bit-exact: the same values everywhere
        assert all(torch.equal(a, b) for a, b in zip(got, outs[0]))
