"""The memoized in-place meta checks (lazyrt/torch/meta.py): lazy in-place ops raise
exactly where eager does, on every call (errors are never memoized), and a
signature seen before skips torch's Python meta kernel."""
import itertools

import pytest
import torch

import lazyrt.torch as lt
from lazyrt.torch import meta

aten = torch.ops.aten

SHAPES = [(), (3,), (1, 3), (2, 3), (2, 1), (4, 2, 3)]
DTYPES = [torch.float32, torch.int64, torch.bool]


def _cases():
    """(name, call(self, other, third, scalar)) of the wrapped ops an optimizer uses."""
    return [
        ("add_", lambda a, b, c, s: a.add_(b, alpha=s)),
        ("sub_", lambda a, b, c, s: a.sub_(b)),
        ("mul_", lambda a, b, c, s: a.mul_(b)),
        ("mul_scalar", lambda a, b, c, s: a.mul_(s)),
        ("div_", lambda a, b, c, s: a.div_(b)),
        ("addcmul_", lambda a, b, c, s: a.addcmul_(b, c, value=s)),
        ("addcdiv_", lambda a, b, c, s: a.addcdiv_(b, c, value=s)),
        ("lerp_", lambda a, b, c, s: a.lerp_(b, s)),
        ("clamp_", lambda a, b, c, s: a.clamp_(min=s)),
        ("sqrt_", lambda a, b, c, s: a.sqrt_()),
    ]


def _outcome(call, a, b, c, s):
    try:
        out = call(a, b, c, s)
    except RuntimeError:
        return "error"
    return (tuple(out.shape), out.dtype)


@pytest.mark.parametrize("name,call", _cases(), ids=[n for n, _ in _cases()])
def test_lazy_inplace_raises_where_eager_does_every_time(name, call):
    g = torch.Generator().manual_seed(0)
    checked = errors = 0
    for shape_a, shape_b, dtype_a, dtype_b, scalar in itertools.product(
            SHAPES[:4], SHAPES[:5], DTYPES, DTYPES[:2], (2, 0.5)):
        def make(shape, dtype):
            return (torch.rand(shape, generator=g) * 3 + 1).to(dtype)
        a, b, c = make(shape_a, dtype_a), make(shape_b, dtype_b), make(shape_b, torch.float32)
        want = _outcome(call, a.clone(), b, c, scalar)
        for _ in range(2):  # the second call finds the signature memoized (or not, if it failed)
            la = lt.lazy(a.clone())
            got = _outcome(call, la, lt.lazy(b), lt.lazy(c), scalar)
            assert got == want, (name, shape_a, shape_b, dtype_a, dtype_b, scalar)
            if got != "error":
                torch.testing.assert_close(lt.to_cpu(la), call(a.clone(), b, c, scalar),
                                           equal_nan=True)
        checked += 1
        errors += want == "error"
    assert errors and errors < checked  # both outcomes occur for every op


def test_meta_tensors_keep_torch_errors_and_results():
    a = torch.empty(3, device="meta")
    for _ in range(3):
        with pytest.raises(RuntimeError):
            a.add_(torch.empty(2, 3, device="meta"))
        assert a.add_(torch.empty(1, device="meta")) is a
    i = torch.empty(3, dtype=torch.int64, device="meta")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            i.add_(1.5)


def test_a_seen_signature_skips_the_python_kernel():
    wrapped = meta.WRAPPED[aten.addcmul_.default]
    calls = []
    kernel = wrapped.kernel

    a = lt.lazy(torch.zeros(5, 7))
    b, c = lt.lazy(torch.ones(5, 7)), lt.lazy(torch.ones(7))
    wrapped.seen.clear()
    for step in range(4):
        calls.append(len(wrapped.seen))
        a.addcmul_(b, c, value=0.1 * step)  # a new value every step: one signature
    a.addcmul_(b, lt.lazy(torch.ones(5, 1)), value=1)  # an int value: a new signature
    assert calls == [0, 1, 1, 1] and len(wrapped.seen) == 2
    assert wrapped.kernel is kernel
    torch.testing.assert_close(lt.to_cpu(a), torch.full((5, 7), 0.6 + 1))


def test_every_wrapped_op_had_a_python_meta_kernel_and_is_in_place():
    assert aten.addcmul_.default in meta.WRAPPED and aten.lerp_.Scalar in meta.WRAPPED
    for op, wrapped in meta.WRAPPED.items():
        assert op._schema.name.endswith("_") and op._schema.is_mutable
        assert callable(wrapped.kernel)
    assert aten.pow_.Scalar not in meta.WRAPPED and aten.fill_.Scalar not in meta.WRAPPED


def test_the_eager_check_runs_on_the_cpu_under_a_meta_device_context():
    """Model init on the meta device (``with torch.device("meta")``) keeps working: the
    stand-ins of the check are CPU tensors, whatever the default device."""
    with torch.device("meta"), torch.no_grad():
        m = torch.nn.Linear(3, 4)
        m.weight.mul_(2.0)
        m.bias.zero_()
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch.empty(5, 3, dtype=torch.int64).mul_(0.5)
    assert m.weight.device.type == "meta"
