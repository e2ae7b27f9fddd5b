"""Training on lazy tensors matches eager torch: gradients of random MLPs,
SGD/Adam/AdamW steps (foreach off and on) with an LR schedule, float64 within
1e-9; and from step 3 on a fixed-shape loop compiles nothing."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)


def _mlp(seed, act, n_in=6, hidden=12, n_out=4, dtype=torch.float64):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(n_in, hidden), act(), nn.Linear(hidden, hidden), act(),
                         nn.Linear(hidden, n_out)).to(dtype)


LOSSES = {
    "mse": lambda out, y: F.mse_loss(out, y),
    "cross_entropy": lambda out, y: F.cross_entropy(out, y),
    "cross_entropy_smooth_ignore": lambda out, y: F.cross_entropy(
        out, y, label_smoothing=0.1, ignore_index=1),
    "cross_entropy_weight_sum": lambda out, y: F.cross_entropy(
        out, y, weight=torch.arange(1.0, 5.0, dtype=out.dtype).to(out.device), reduction="sum"),
}


def _batch(loss, seed, n=7, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g, dtype=dtype)
    y = torch.randn(n, 4, generator=g, dtype=dtype) if loss == "mse" else \
        torch.randint(0, 4, (n,), generator=g)
    return x, y


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("act", [nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid])
def test_gradients_match_eager_on_random_mlps(torch_backend, loss, act):
    eager = _mlp(1, act)
    lazy = lt.lazy(copy.deepcopy(eager))
    x, y = _batch(loss, 2)
    lr.metrics.reset()
    for model, dev in ((eager, "cpu"), (lazy, "lazy")):
        LOSSES[loss](model(x.to(dev)), y.to(dev)).backward()
    lt.mark_step()
    assert lr.metrics.snapshot()["fallbacks"] == {}
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert q.grad.device.type == "lazy"
        assert_same(q.grad, p.grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("bad", [4, -1, 2 ** 40])
@pytest.mark.parametrize("kwargs", [{}, {"ignore_index": -1}, {"weight": True},
                                    {"reduction": "none"}])
def test_a_target_out_of_range_raises_as_in_eager(torch_backend, bad, kwargs):
    """eager raises IndexError ("Target 4 is out of bounds"); a one-hot mask alone
    would pick no class and count the row as a zero loss. ``ignore_index`` rows
    pick none and raise nothing, whatever their value."""
    x = torch.randn(3, 4, dtype=torch.float64)
    if kwargs.get("weight"):
        kwargs = {"weight": torch.arange(1.0, 5.0, dtype=torch.float64)}
    targets = torch.tensor([0, bad, 3])

    def loss(dev, **kw):
        w = kw.pop("weight", None)
        out = F.cross_entropy(x.to(dev), targets.to(dev),
                              weight=None if w is None else w.to(dev), **kw)
        return out.cpu()
    if kwargs.get("ignore_index") == bad:
        assert_same(loss("lazy", **kwargs), loss("cpu", **kwargs), rtol=1e-12)
        return
    with pytest.raises(IndexError):
        loss("cpu", **kwargs)
    with pytest.raises(IndexError, match=f"nll_loss.*Target {bad} is out of bounds"):
        loss("lazy", **kwargs)                       # known targets: at the call, as eager
    computed = (targets + 1).to("lazy") - 1          # the graph computes these: at the barrier
    w = kwargs.get("weight")
    kw = {k: v for k, v in kwargs.items() if k != "weight"}
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds.*{__file__}"):
        F.cross_entropy(x.to("lazy"), computed, weight=None if w is None else w.to("lazy"),
                        **kw).cpu()
    # the next step, with good targets, computes (nothing left pending or cached bad)
    targets[1] = 1
    assert_same(loss("lazy", **kwargs), loss("cpu", **kwargs), rtol=1e-12)


OPTIMIZERS = {
    "sgd_momentum_loop": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3,
                                                    foreach=False),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
    "sgd_foreach": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, foreach=True),
    "adam_amsgrad_foreach": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True,
                                                        weight_decay=0.01, foreach=True),
    # eager runs torch's fused CPU kernels: lazyrt's steps must agree with them too
    "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05, fused=True),
    "adam_fused_amsgrad_maximize": lambda ps: torch.optim.Adam(
        ps, lr=1e-2, amsgrad=True, maximize=True, weight_decay=0.01, fused=True),
    "sgd_fused": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1,
                                            fused=True),
    "sgd_fused_plain": lambda ps: torch.optim.SGD(ps, lr=0.05, fused=True),
    "adamw_fused_tensor_lr": lambda ps: torch.optim.AdamW(ps, lr=torch.tensor(1e-2),
                                                          fused=True),
}


def _train(model, opt, sched, batches, dev, loss, per_step=None):
    losses = []
    for step, (x, y) in enumerate(batches):
        if per_step:
            per_step(step, "start")
        opt.zero_grad()
        out = LOSSES[loss](model(x.to(dev)), y.to(dev))
        out.backward()
        opt.step()
        sched.step()
        if dev == "lazy":
            lt.mark_step()
        if per_step:
            per_step(step, "end")
        losses.append(out.item())
    return losses


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_training_matches_eager_and_stops_compiling(torch_backend, optimizer):
    loss = "cross_entropy" if optimizer == "adam" else "mse"
    eager = _mlp(3, nn.ReLU)
    lazy = lt.lazy(copy.deepcopy(eager))
    batches = [_batch(loss, 10 + s) for s in range(6)]
    runs = {}
    compiled = {}

    def watch(step, when):
        if when == "start":
            lr.metrics.reset()
        else:
            snap = lr.metrics.snapshot()
            compiled[step] = (snap["compiles"], snap["cache_misses"], snap["fallbacks"])

    for name, model in (("eager", eager), ("lazy", lazy)):
        opt = OPTIMIZERS[optimizer](model.parameters())
        # a schedule that changes the learning rate every step: runtime scalars
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        runs[name] = _train(model, opt, sched, batches, "lazy" if name == "lazy" else "cpu",
                            loss, watch if name == "lazy" else None)
    torch.testing.assert_close(torch.tensor(runs["lazy"]), torch.tensor(runs["eager"]),
                               rtol=1e-9, atol=1e-12)
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert_same(q, p, rtol=1e-9, atol=1e-12)
    assert all(fb == {} for _, _, fb in compiled.values()), compiled
    # step 1 creates the optimizer state, step 2 is the steady graph; then only cache hits
    assert [c[:2] for s, c in compiled.items() if s >= 2] == [(0, 0)] * 4, compiled


def test_float32_training_losses_match_eager(torch_backend):
    eager = _mlp(4, nn.GELU, dtype=torch.float32)
    lazy = lt.lazy(copy.deepcopy(eager))
    batches = [_batch("mse", 20 + s, dtype=torch.float32) for s in range(4)]
    runs = []
    for model, dev in ((eager, "cpu"), (lazy, "lazy")):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        runs.append(_train(model, opt, sched, batches, dev, "mse"))
    torch.testing.assert_close(torch.tensor(runs[1]), torch.tensor(runs[0]), rtol=1e-4, atol=0)


def test_no_grad_eval_detach_and_requires_grad(torch_backend):
    model = lt.lazy(_mlp(5, nn.ReLU))
    x = torch.randn(3, 6, dtype=torch.float64).to("lazy")
    model.eval()
    with torch.no_grad():
        y = model(x)
    assert not y.requires_grad
    z = model(x).detach()
    assert not z.requires_grad and z.device.type == "lazy"
    w = torch.ones(2, dtype=torch.float64).to("lazy").requires_grad_()
    (w * w * 3).sum().backward()
    assert_same(w.grad, torch.full((2,), 6.0, dtype=torch.float64))


class _NormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 8)
        self.norm = nn.LayerNorm(8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        h = F.silu(self.norm(self.lin(x)))
        return self.out(torch.softmax(h, -1) * h) + F.log_softmax(h, -1)[:, :4]


def test_layer_norm_softmax_silu_gradients_match_eager(torch_backend):
    torch.manual_seed(7)
    eager = _NormNet().double()
    lazy = lt.lazy(copy.deepcopy(eager))
    x, y = _batch("cross_entropy", 8)
    lr.metrics.reset()
    for model, dev in ((eager, "cpu"), (lazy, "lazy")):
        F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
    lt.mark_step()
    assert lr.metrics.snapshot()["fallbacks"] == {}
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert_same(q.grad, p.grad, rtol=1e-10, atol=1e-13)


def test_dropout_mask_is_random_and_shared_by_backward(torch_backend):
    x = torch.ones(200, 50, dtype=torch.float64).to("lazy").requires_grad_()
    lr.metrics.reset()
    y = F.dropout(x, 0.25, training=True)
    y.sum().backward()
    out, grad = lt.to_cpu(y).detach(), lt.to_cpu(x.grad)
    assert lr.metrics.snapshot()["fallbacks"] == {}
    kept = out != 0
    assert abs(kept.double().mean().item() - 0.75) < 0.02      # 10000 draws: 5 sigma
    assert torch.all(out[kept] == 1 / 0.75)
    torch.testing.assert_close(grad, out)                      # the same mask both ways
    again = lt.to_cpu(F.dropout(x, 0.25, training=True)).detach()
    assert not torch.equal(again, out)                         # a fresh mask each call


def test_batch_norm_training_and_eval_match_eager(torch_backend):
    torch.manual_seed(8)
    eager = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).double()
    lazy = lt.lazy(copy.deepcopy(eager))
    x = torch.randn(5, 6, dtype=torch.float64)
    lr.metrics.reset()
    for model, dev in ((eager, "cpu"), (lazy, "lazy")):
        model(x.to(dev)).sum().backward()
    for (name, want), (_, got) in zip(eager.state_dict().items(), lazy.state_dict().items()):
        assert_same(got, want, rtol=1e-12, atol=1e-15)   # running stats updated in place
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert_same(q.grad, p.grad, rtol=1e-12, atol=1e-14)
    eager.eval(), lazy.eval()
    assert_same(lazy(x.to("lazy")), eager(x), rtol=1e-12, atol=1e-15)
    assert lr.metrics.snapshot()["fallbacks"] == {}


def test_transformer_encoder_layer_gradients_match_eager(torch_backend):
    torch.manual_seed(9)
    eager = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).double()
    lazy = lt.lazy(copy.deepcopy(eager))
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    lr.metrics.reset()
    outs = []
    for model, dev in ((eager, "cpu"), (lazy, "lazy")):
        out = model(x.to(dev), src_mask=mask.to(dev), is_causal=True)
        (out * out).sum().backward()
        outs.append(out)
    lt.mark_step()
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert_same(outs[1], outs[0], rtol=1e-10, atol=1e-12)
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert_same(q.grad, p.grad, rtol=1e-9, atol=1e-11)
