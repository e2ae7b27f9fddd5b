"""Checkpoints and module plumbing on lazy tensors: state_dict round trips,
lazyrt.torch.save, copy.deepcopy of a lazy model, clip_grad_norm_."""
import copy
import io
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)


def _model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).double()


def test_state_dict_round_trips(torch_backend):
    src = lt.lazy(_model(0))
    with torch.no_grad():
        src[0].weight.mul_(2)      # a pending update the state_dict must carry
    want = {k: v.detach().cpu() for k, v in src.state_dict().items()}
    into_lazy = lt.lazy(_model(1))
    into_lazy.load_state_dict(src.state_dict())               # lazy -> lazy
    into_cpu = _model(2)
    into_cpu.load_state_dict(lt.to_cpu(src.state_dict()))    # lazy -> cpu
    back = lt.lazy(_model(3))
    back.load_state_dict(into_cpu.state_dict())                # cpu -> lazy
    for k, v in want.items():
        assert_same(into_lazy.state_dict()[k], v)
        torch.testing.assert_close(into_cpu.state_dict()[k], v, rtol=0, atol=0)
        assert_same(back.state_dict()[k], v)
    src[0].weight.data.add_(1)                                  # copies, not aliases
    assert_same(into_lazy[0].weight, want["0.weight"])


def test_save_writes_cpu_tensors(torch_backend, tmp_path):
    model = lt.lazy(_model(4))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4, dtype=torch.float64).to("lazy")).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    lt.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    loaded = torch.load(path)
    for k, v in model.state_dict().items():
        assert loaded["model"][k].device.type == "cpu"
        assert_same(v, loaded["model"][k])
    exp_avg = opt.state_dict()["state"][0]["exp_avg"]
    assert_same(exp_avg, loaded["opt"]["state"][0]["exp_avg"])


def test_a_lazy_state_dict_loads_into_an_eager_model(torch_backend):
    lazy = lt.lazy(_model(11))
    with torch.no_grad():
        lazy[2].bias.add_(1)       # pending
    eager = _model(12)
    eager.load_state_dict(lazy.state_dict())  # copy_ of each lazy tensor into a CPU one
    for (k, v), (_, w) in zip(lazy.state_dict().items(), eager.state_dict().items()):
        assert w.device.type == "cpu"
        assert_same(v, w)


def test_torch_save_of_lazy_tensors_writes_plain_cpu_tensors(torch_backend, tmp_path):
    """torch.save needs no lt.save: what it writes torch.load reads back with no
    lazyrt imported, and a state dict of pending tensors is computed in one graph."""
    torch.manual_seed(13)
    eager = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5)).double()
    model = lt.lazy(copy.deepcopy(eager))
    x = torch.randn(3, 4, dtype=torch.float64)
    for m, dev in ((eager, "cpu"), (model, "lazy")):
        m(x.to(dev))                 # running statistics: pending on the lazy side
        with torch.no_grad():
            m[0].weight.mul_(2)
    lr.metrics.reset()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "step": 3}, path)
    assert lr.metrics.snapshot()["graphs_executed"] == 1
    code = (f"import sys, torch; d = torch.load({str(path)!r})['model']; "
            f"assert 'lazyrt' not in sys.modules; "
            f"print(all(type(v) is torch.Tensor and v.device.type == 'cpu' "
            f"for v in d.values()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
    loaded = torch.load(path)
    assert loaded["step"] == 3
    into = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5)).double()
    into.load_state_dict(loaded["model"])
    for (k, v), w in zip(into.state_dict().items(), eager.state_dict().values()):
        torch.testing.assert_close(v, w, rtol=1e-12, atol=1e-15)


def test_torch_load_onto_the_lazy_device_says_how_to_get_there(tmp_path):
    path = tmp_path / "t.pt"
    torch.save({"w": torch.ones(2).to("lazy")}, path)
    with pytest.raises(RuntimeError, match=r"load it on the CPU, then move it"):
        torch.load(path, map_location="lazy")
    assert_same(torch.load(path, map_location="cpu")["w"], torch.ones(2))


def test_pickling_a_lazy_tensor_keeps_requires_grad_and_copy_copy_stays_lazy(torch_backend):
    w = torch.arange(3.0).to("lazy").requires_grad_()
    buf = io.BytesIO()
    torch.save([w, w * 2, (w * 2).detach()], buf)
    buf.seek(0)
    got = torch.load(buf)
    assert [t.requires_grad for t in got] == [True, True, False]
    assert_same(got[1].detach(), torch.arange(3.0) * 2)
    a = torch.arange(3.0).to("lazy")
    b = copy.copy(a)            # a shallow copy aliases, as eager's shares storage
    b.add_(1)
    assert b.device.type == "lazy"
    assert_same(a, torch.arange(3.0) + 1)


def test_deepcopy_of_a_lazy_model_is_independent(torch_backend):
    model = lt.lazy(_model(5))
    twin = copy.deepcopy(model)
    x = torch.randn(3, 4, dtype=torch.float64).to("lazy")
    assert twin[0].weight.device.type == "lazy"
    assert_same(twin(x), model(x).cpu())
    with torch.no_grad():
        twin[0].weight.zero_()
    assert lt.to_cpu(model[0].weight).abs().sum() > 0


def test_clip_grad_norm_matches_eager(torch_backend):
    eager = _model(6)
    lazy = lt.lazy(copy.deepcopy(eager))
    x = torch.randn(4, 4, dtype=torch.float64)
    lr.metrics.reset()
    norms = []
    for model, dev in ((eager, "cpu"), (lazy, "lazy")):
        (model(x.to(dev)) ** 2).sum().backward()
        # None: the multi-tensor path on lazy tensors, the loop on the CPU; True refuses
        # CPU tensors in torch, so lazy's True is compared with the CPU's loop
        for foreach in (None, False, True if dev == "lazy" else None):
            norms.append(nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=foreach))
    assert lr.metrics.snapshot()["fallbacks"] == {}
    for got, want in zip(norms[3:], norms[:3]):
        assert_same(got, want, rtol=1e-12, atol=0)
    for p, q in zip(eager.parameters(), lazy.parameters()):
        assert_same(q.grad, p.grad, rtol=1e-12, atol=1e-15)


def test_optimizer_made_before_lazy_steps_the_lazy_parameters(torch_backend):
    eager = _model(7)
    model = copy.deepcopy(eager)
    params = list(model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)   # before the move
    assert lt.lazy(model) is model
    assert all(p is q and p.device.type == "lazy" for p, q in zip(model.parameters(), params))
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(3, 4, dtype=torch.float64)
    for _ in range(2):
        for m, o, dev in ((eager, opt_eager, "cpu"), (model, opt, "lazy")):
            o.zero_grad()
            m(x.to(dev)).pow(2).sum().backward()
            o.step()
    for p, q in zip(eager.parameters(), model.parameters()):
        assert_same(q, p, rtol=1e-12, atol=1e-14)
    assert lt.to_cpu(model) is model and params[0].device.type == "cpu"


def test_optimizers_default_to_the_multi_tensor_path_on_lazy_tensors(torch_backend,
                                                                      monkeypatch):
    """As torch does on CUDA: ``foreach`` left unset picks ``_foreach_*`` ops for lazy
    parameters (one dispatch for all of them), the loop for CPU ones."""
    from torch.optim.optimizer import _default_to_fused_or_foreach
    from torch.utils._foreach_utils import _has_foreach_support
    model = _model(8)
    cpu_params = list(model.parameters())
    assert _default_to_fused_or_foreach(cpu_params, False, False) == (False, False)
    lazy_params = list(lt.lazy(model).parameters())
    assert _default_to_fused_or_foreach(lazy_params, False, False) == (False, True)
    assert _default_to_fused_or_foreach(lazy_params, False, True) == (True, False)
    seen = []
    original = torch._foreach_add_
    monkeypatch.setattr(torch, "_foreach_add_",
                        lambda *a, **k: (seen.append(len(a[0])), original(*a, **k))[1])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    (model(torch.randn(2, 4, dtype=torch.float64).to("lazy")) ** 2).sum().backward()
    assert _has_foreach_support([p.grad for p in lazy_params], torch.device("lazy"))
    opt.step()
    assert seen and all(n == len(lazy_params) for n in seen)


@pytest.mark.parametrize("fused", [None, True])
def test_adam_records_one_step_for_all_parameters(torch_backend, monkeypatch, fused):
    """Adam/AdamW's multi-tensor and fused steps on lazy parameters record every
    parameter's update at once and write it back as an in-place op would (the
    parameter's version moves, every alias sees it); the gradients are only read,
    and no aten op reaches lazyrt per parameter beyond the step counts' own."""
    import lazyrt.torch.optim as lopt
    from lazyrt.torch import dispatch as lazy_dispatch
    from lazyrt.torch import tensor as lazy_tensor
    eager = _model(9)
    model = lt.lazy(copy.deepcopy(eager))
    params = list(model.parameters())
    alias = params[0].view(-1)
    calls, ops = [], []
    original = lopt.adam_values
    monkeypatch.setattr(lopt, "adam_values",
                        lambda *a, **k: (calls.append(len(a[0])), original(*a, **k))[1])
    inner = lazy_dispatch.dispatch
    monkeypatch.setattr(lazy_tensor, "_dispatch",
                        lambda f, a, k: (ops.append(str(f)), inner(f, a, k))[1])
    x = torch.randn(3, 4, dtype=torch.float64)
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.1, fused=fused)
            for m in (eager, model)]
    for step in range(2):  # the first step makes the optimizer's state
        for m, o, dev in ((eager, opts[0], "cpu"), (model, opts[1], "lazy")):
            o.zero_grad()
            (m(x.to(dev)) ** 2).sum().backward()
        grads = [p.grad.detach().cpu() for p in params]
        versions = [p._version for p in params]
        calls.clear()
        ops.clear()
        opts[0].step()
        opts[1].step()
    assert calls == [len(params)]
    assert not any("_foreach_lerp" in o or "_foreach_addcdiv" in o for o in ops), ops
    assert len(ops) <= 4 * len(params), ops  # steps (lazy ones when fused), aliases' syncs
    assert all(p._version > v for p, v in zip(params, versions))
    for p, q, g in zip(eager.parameters(), params, grads):
        assert_same(q, p, rtol=1e-12, atol=1e-14)
        assert_same(q.grad, g, rtol=0, atol=0)
    assert_same(alias, params[0].detach().cpu().view(-1), rtol=0, atol=0)


def test_views_of_stepped_parameters_are_taken_once(torch_backend, monkeypatch):
    """After an Adam step the parameters own fresh functional storages: a forward's
    ``weight.t()`` is recorded once, not taken and then replayed from the storage's
    base on first use (what a storage with committed updates makes every new view do)."""
    from lazyrt.torch import dispatch as lazy_dispatch
    from lazyrt.torch import tensor as lazy_tensor
    model = lt.lazy(_model(10))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    x = torch.randn(3, 4, dtype=torch.float64).to("lazy")
    for _ in range(2):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    ops = []
    inner = lazy_dispatch.dispatch
    monkeypatch.setattr(lazy_tensor, "_dispatch",
                        lambda f, a, k: (ops.append(str(f)), inner(f, a, k))[1])
    model(x)
    assert [o for o in ops if o.endswith(("t_copy.default", "detach_copy.default"))] == \
        ["aten.t_copy.default"] * 2, ops
