"""lazyrt.torch's tensor: device ``lazy``, eager aliasing through views and
in-place ops, materialization (counted with the user's line), the device rule."""
import subprocess
import sys

import numpy as np
import pytest
import torch

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)


def test_import_lazyrt_does_not_import_torch():
    code = "import sys, lazyrt; import lazyrt as lr; (lr.ones(2) + 1).numpy(); " \
           "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_to_lazy_is_on_the_lazy_device(torch_backend):
    x = torch.arange(6.0).reshape(2, 3)
    y = x.to("lazy")
    assert y.device == lt.device() == torch.device("lazy")
    assert y.shape == x.shape and y.dtype == x.dtype
    assert lt.lazy(x).device.type == "lazy"
    assert_same(y, x)


def test_lazy_copy_does_not_see_later_writes_to_the_source(torch_backend):
    x = torch.arange(4.0)
    y = x.to("lazy")
    x.add_(100)
    assert_same(y, torch.arange(4.0))


def _alias_program(dev):
    a = torch.arange(12.0).reshape(3, 4).to(dev)
    b = a.view(-1)
    b.add_(1)                 # through a flat view
    a[0].mul_(2)              # through a select
    a[:, 1:3].sub_(0.5)       # through a strided slice
    a.t()[2].fill_(7)         # through a transpose
    c = a[1]
    a.add_(10)                # the base, seen by the view c
    return a, b, c


def test_views_and_in_place_ops_alias_as_in_eager(torch_backend):
    lazy, eager = _alias_program("lazy"), _alias_program("cpu")
    for got, want in zip(lazy, eager):
        assert_same(got, want)


def test_parameter_data_update_is_seen_by_the_parameter(torch_backend):
    lin = torch.nn.Linear(3, 2).double()
    ref = torch.nn.Linear(3, 2).double()
    ref.load_state_dict(lin.state_dict())
    lt.lazy(lin)
    for m in (lin, ref):
        m.weight.data.mul_(3)
        with torch.no_grad():
            m.bias[0] = 5.0
    assert_same(lin.weight, ref.weight)
    assert_same(lin.bias, ref.bias)


@pytest.mark.parametrize("factory", [
    lambda d: torch.zeros(2, 3, device=d),
    lambda d: torch.ones(4, dtype=torch.int64, device=d),
    lambda d: torch.full((2, 2), 2.5, device=d),
    lambda d: torch.arange(5, device=d),
    lambda d: torch.zeros_like(torch.ones(3).to(d)) + 1,
    lambda d: torch.full_like(torch.ones(2, dtype=torch.int32).to(d), 7),
    lambda d: torch.empty(3, device=d).fill_(True),
    lambda d: torch.eye(3, device=d),
    lambda d: torch.tensor([[1, 2], [3, 4]], device=d) * 2,
])
def test_factories_on_the_lazy_device(torch_backend, factory):
    got = factory("lazy")
    assert got.device.type == "lazy"
    assert_same(got, factory("cpu"))


def test_materializing_calls_count_with_the_users_line(torch_backend):
    x = (torch.arange(3.0).to("lazy") + 1)
    lr.metrics.reset()
    x.cpu()
    x.sum().item()
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert bool(x[0] > 0)
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
    assert "tensor([1., 2., 3.], device='lazy')" == repr(x)
    snap = lr.metrics.snapshot()
    assert snap["materializations"] >= 6
    lines = snap["materialized_at"]
    assert all(where.startswith(__file__) for where in lines), lines


@pytest.mark.parametrize("call", [
    lambda x, c: x + c, lambda x, c: x * c, lambda x, c: torch.mm(x, c),
    lambda x, c: torch.addmm(x, x, c), lambda x, c: torch.where(x > 0, x, c),
    lambda x, c: torch.atan2(x, c)])
def test_lazy_with_a_cpu_tensor_is_an_error_naming_both_devices(torch_backend, call):
    """The same error on the dispatcher's fast lane (pointwise, matmul) as elsewhere."""
    x = torch.ones(3, 3).to("lazy")
    with pytest.raises(RuntimeError, match="lazy and cpu"):
        call(x, torch.ones(3, 3))


def test_zero_dim_cpu_tensors_and_numbers_are_runtime_scalars(torch_backend):
    x = torch.arange(4.0, dtype=torch.float64)
    lx = x.to("lazy")
    lr.sync()
    assert_same(lx * torch.tensor(2.5), x * torch.tensor(2.5))
    # a new value of the 0-d tensor or number reuses the program: the key is the same
    runtime_hits = []
    for scale in (0.5, 1.5, torch.tensor(3.0, dtype=torch.float64)):
        lr.metrics.reset()
        y = lx * scale + 1
        assert_same(y, x * scale + 1)
        runtime_hits.append(lr.metrics.snapshot()["cache_misses"])
    assert runtime_hits[1:] == [0, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_dtypes_round_trip(torch_backend, dtype):
    x = (torch.arange(-3, 3) % 2 == 0) if dtype is torch.bool else torch.arange(-3, 3).to(dtype)
    y = x.to("lazy")
    assert y.dtype == dtype
    assert_same(y, x)
    assert_same(y.to(torch.float64) * 2, x.to(torch.float64) * 2)


def test_mark_step_computes_everything_pending(torch_backend):
    x = torch.arange(4.0).to("lazy")
    y = x * 2
    lt.mark_step()
    assert not lr.runtime.R.any_live_pending()
    assert_same(y, torch.arange(4.0) * 2)


def test_tensor_constructor_on_lazy_aliases_like_any_lazy_tensor(torch_backend):
    def prog(dev):
        t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=dev)
        t[0, 0] = 9
        t.view(-1).mul_(2)
        return t
    assert_same(prog("lazy"), prog("cpu"))


def test_bad_shapes_raise_runtime_error_as_eager(torch_backend):
    with pytest.raises(RuntimeError) as eager:
        torch.ones(3) + torch.ones(4)
    with pytest.raises(RuntimeError, match=r"aten\.add\.Tensor.*\(3,\) and \(4,\)") as lazy:
        torch.ones(3).to("lazy") + torch.ones(4).to("lazy")
    assert type(lazy.value) is type(eager.value)
    with pytest.raises(IndexError):
        torch.ones(3).to("lazy").sum(2)


def _copy_cases(dev):
    """copy_ into CPU tensors of every kind from a source on ``dev`` (the eager twin
    runs it from the CPU): the results must be the same tensors."""
    src = (torch.arange(6, dtype=torch.float64).reshape(2, 3) - 2.5).to(dev)
    same = torch.zeros(2, 3, dtype=torch.float64)
    same.copy_(src * 2)
    converted = torch.zeros(2, 3, dtype=torch.int32)
    converted.copy_(src)                                   # float64 -> int32 truncates
    broadcast = torch.full((4, 2, 3), -1.0)
    broadcast.copy_(src[1])                                # (3,) over (4, 2, 3)
    strided = torch.zeros(3, 2, dtype=torch.float64).t()  # a non-contiguous destination
    strided.copy_(src)
    base = torch.zeros(3, 5, dtype=torch.float64)
    base[1:, ::2].copy_(src)                               # a view: its base sees it
    base[0, 1:4] = src[0]                                  # assignment copies too
    empty = torch.zeros(0, 3)
    empty.copy_(src[:0])
    flag = torch.zeros((), dtype=torch.bool)
    flag.copy_(src.sum() < 0)                              # 0-d, into a bool
    return same, converted, broadcast, strided, base, empty, flag


def test_copy_into_a_cpu_tensor_is_a_barrier_that_fills_it_as_eager(torch_backend):
    lr.metrics.reset()
    lazy = _copy_cases("lazy")
    snap = lr.metrics.snapshot()
    assert snap["materializations"] == 8  # one per copy_
    assert all(where.startswith(__file__) for where in snap["materialized_at"]), snap
    for got, want in zip(lazy, _copy_cases("cpu")):
        assert got.device.type == "cpu"
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_copy_into_a_lazy_tensor_still_works(torch_backend):
    def prog(dev):
        a = torch.zeros(2, 3, dtype=torch.int64).to(dev)
        a.copy_(torch.tensor([1.7, -2.2, 3.5]))            # from the CPU, converted
        b = torch.ones(2, 3).to(dev)
        b[1].copy_(a[0] * 2)                                # lazy into a lazy view
        return a, b
    for got, want in zip(prog("lazy"), prog("cpu")):
        assert_same(got, want)


def test_copy_into_a_cpu_tensor_keeps_eagers_autograd(torch_backend):
    for dev in ("lazy", "cpu"):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            torch.zeros(3, requires_grad=True).copy_(torch.ones(3).to(dev))
    grads = []
    for dev in ("lazy", "cpu"):
        w = torch.arange(3.0).to(dev).requires_grad_()
        out = torch.zeros(2, 3)
        out.copy_(w * w)                                    # differentiable, as in eager
        assert out.requires_grad and out.device.type == "cpu"
        (out * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append(w.grad)
        leaf = torch.zeros(3, requires_grad=True)
        with torch.no_grad():
            leaf.copy_(w)                                   # allowed without grad mode
        assert leaf.is_leaf and leaf.grad_fn is None
    assert grads[0].device.type == "lazy"
    assert_same(grads[0], grads[1])
