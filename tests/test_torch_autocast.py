"""torch.autocast on lazy tensors follows eager's CPU casting policy.

Torch's autocast kernels skip tensors that are not on the CPU, so lazyrt asks
them, per call signature, which casts they make and applies those casts to the
lazy arguments (lazyrt/torch/autocast.py); autocast is never silently ignored.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyrt.torch as lt
from bench.torch_models import model_cases


def test_autocast_cpu_casts_lazy_tensors_as_eager():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    lazy_m = lt.lazy(copy.deepcopy(m))
    x = torch.randn(5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = m(x)
        lazy = lazy_m(x.to("lazy"))
        eager_sum, lazy_sum = eager.float().sum(), lazy.float().sum()
    assert eager.dtype == lazy.dtype == torch.bfloat16
    torch.testing.assert_close(lazy.cpu(), eager, rtol=2e-2, atol=2e-2)
    lazy_sum.backward()
    eager_sum.backward()
    for p, q in zip(lazy_m.parameters(), m.parameters()):
        assert p.grad.dtype == q.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=5e-2, atol=5e-2)


def test_autocast_off_and_float32_policy_ops_keep_their_dtypes():
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (x.to("lazy") @ x.to("lazy")).dtype == torch.bfloat16  # lower precision
        assert (x.to("lazy") + x.to("lazy")).dtype == torch.float32   # not listed
        with torch.autocast("cpu", enabled=False):
            assert (x.to("lazy") @ x.to("lazy")).dtype == torch.float32


def test_autocast_on_the_lazy_device_is_refused_by_torch():
    with pytest.raises(RuntimeError, match="lazy"):
        with torch.autocast("lazy", dtype=torch.bfloat16):
            pass


def _output_dtypes(model):
    """Hooks recording each submodule's output dtypes, in call order."""
    seen = []
    for name, mod in model.named_modules():
        mod.register_forward_hook(lambda m, i, o, name=name: seen.append(
            (name, [t.dtype for t in (o if isinstance(o, tuple) else (o,))
                    if isinstance(t, torch.Tensor)])))
    return seen


def test_bench_transformer_trains_20_steps_under_bfloat16_autocast_like_eager():
    """Every layer's output has eager's autocast dtype (attention's composite
    Python function included), and 20 AdamW steps give eager's losses within
    bfloat16's tolerance."""
    case = [c for c in model_cases(tiny=True) if c.name.startswith("transformer")][0]
    losses, dtypes = {}, {}
    for device in ("cpu", "lazy"):
        model = case.build()
        if device == "lazy":
            lt.lazy(model)
        dtypes[device] = _output_dtypes(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x, y = case.batch()
        x, y = x.to(device), y.to(device)
        out = []
        for _ in range(20):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = case.loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if device == "lazy":
                lt.mark_step()
            out.append(loss.item())
        losses[device] = torch.tensor(out)
    assert dtypes["lazy"] == dtypes["cpu"]
    assert ("head", [torch.bfloat16]) in dtypes["cpu"]
    assert losses["cpu"][-1] < losses["cpu"][0]
    # bfloat16 keeps 8 significant bits (a relative ulp of 2^-7 to 2^-8)
    torch.testing.assert_close(losses["lazy"], losses["cpu"], rtol=2 ** -7, atol=0)
