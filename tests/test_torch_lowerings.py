"""Native lowerings of aten ops against eager torch: values, dtypes (torch's
promotion, not NumPy's), Python numbers and 0-d CPU tensors as operands,
reductions, views, scatters, matmul; and the counted, warned fallback."""
import warnings

import pytest
import torch

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.errors import PerformanceWarning
from lazyrt.torch.dispatch import DECOMPOSITIONS
from lazyrt.torch.registry import LOWERINGS
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)

aten = torch.ops.aten


def _sample(dtype, shape=(3, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    return torch.randint(-5, 6, shape, generator=g).to(dtype)


def _lazy(x):
    return x.to("lazy") if isinstance(x, torch.Tensor) and x.dim() > 0 else x


DTYPES = [torch.bool, torch.int32, torch.int64, torch.float32, torch.float64]
OTHERS = {  # the second operand: another dtype's tensor, a 0-d CPU tensor, a Python number
    "int64_tensor": lambda: _sample(torch.int64, seed=1),
    "float32_tensor": lambda: _sample(torch.float32, seed=2),
    "float64_0d_cpu": lambda: torch.tensor(1.5, dtype=torch.float64),
    "int64_0d_cpu": lambda: torch.tensor(3),
    "python_int": lambda: 2,
    "python_float": lambda: 0.25,
    "python_bool": lambda: True,
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=2),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": lambda a, b: torch.maximum(a, torch.as_tensor(b).to(a.device)
                                          if not isinstance(b, torch.Tensor) else b),
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "where": lambda a, b: torch.where(a > 0 if a.dtype != torch.bool else a, a, b),
}


@pytest.fixture
def oracle():
    """Promotion is decided before any backend runs: the numpy oracle checks it."""
    lr.sync()
    with lr.backend("numpy"):
        yield "numpy"
        lr.sync()


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("other", list(OTHERS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_ops_follow_torchs_promotion(oracle, op, other, dtype):
    _check_binary(op, other, dtype)


@pytest.mark.parametrize("op,other,dtype", [
    ("add", "python_float", torch.int64), ("div", "int64_tensor", torch.int32),
    ("sub_alpha", "float64_0d_cpu", torch.float32), ("where", "float32_tensor", torch.int64),
    ("lt", "python_int", torch.float32), ("mul", "python_bool", torch.bool)])
def test_binary_ops_compiled(torch_backend, op, other, dtype):
    _check_binary(op, other, dtype)


def _check_binary(op, other, dtype):
    a, b = _sample(dtype), OTHERS[other]()
    fn = BINARY[op]
    try:
        want = fn(a, b)
    except RuntimeError as exc:  # eager refuses (bool - bool, ...): so must lazy
        with pytest.raises(RuntimeError, match=str(exc)[:20]):
            fn(_lazy(a), _lazy(b))
        return
    got = fn(_lazy(a), _lazy(b))
    if op == "maximum" and isinstance(b, torch.Tensor) and b.dim() == 0:
        return  # torch.maximum refuses a 0-d CPU with a lazy operand as with cuda; above
    assert_same(got, want, rtol=1.3e-6 if want.dtype == torch.float32 else 1e-15,
                atol=1e-30)


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": lambda x: torch.log(x.abs()),
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "sqrt": lambda x: torch.sqrt(x.abs()), "rsqrt": lambda x: torch.rsqrt(x.abs() + 1),
    "square": torch.square, "pow3": lambda x: x ** 3, "floor": torch.floor,
    "clamp": lambda x: torch.clamp(x, -1, 2),
    "to_float64": lambda x: x.to(torch.float64), "to_int32": lambda x: x.to(torch.int32),
    "to_bool": lambda x: x.to(torch.bool),
}


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.float64])
def test_unary_ops_match_eager(torch_backend, op, dtype):
    a = _sample(dtype)
    if op in ("gelu", "gelu_tanh") and not dtype.is_floating_point:
        return  # eager refuses integer gelu
    want = UNARY[op](a)
    # float32: erf/exp differ from torch's by an ulp or two, and 1 + erf(x) (gelu)
    # cancels for x < -2, so a small absolute tolerance is needed there
    f32 = want.dtype == torch.float32
    assert_same(UNARY[op](a.to("lazy")), want, rtol=2e-6 if f32 else 1e-14,
                atol=1e-6 if f32 else 1e-14)


REDUCTIONS = {
    "sum": lambda x: x.sum(), "sum_dim": lambda x: x.sum(1), "sum_keep": lambda x: x.sum(0, True),
    "sum_dims": lambda x: x.sum((0, 1)), "sum_f64": lambda x: x.sum(dtype=torch.float64),
    "mean": lambda x: x.double().mean(), "mean_dim": lambda x: x.double().mean(-1, True),
    "amax": lambda x: x.amax(1), "amax_all": lambda x: x.amax(), "max": lambda x: x.max(),
    "max_dim": lambda x: x.max(1), "min_dim_keep": lambda x: x.min(0, keepdim=True),
    "argmax": lambda x: x.argmax(1),
}


@pytest.mark.parametrize("op", list(REDUCTIONS))
@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32, torch.float64])
def test_reductions_match_eager(torch_backend, op, dtype):
    a = _sample(dtype)
    try:
        want = REDUCTIONS[op](a)
    except RuntimeError:
        return  # not defined for this dtype in eager either
    got = REDUCTIONS[op](a.to("lazy"))
    if isinstance(want, tuple):
        for g, w in zip(got, want):
            assert_same(g, w, rtol=1e-6, atol=1e-6)
    else:
        assert_same(got, want, rtol=1e-6, atol=1e-6)


VIEWS = {
    "view": lambda x: x.view(2, 6).view(-1), "permute": lambda x: x.permute(1, 0),
    "t": lambda x: x.t(), "transpose": lambda x: x.unsqueeze(0).transpose(0, 2),
    "expand": lambda x: x[:, :1].expand(3, 5), "slice": lambda x: x[1:, ::2],
    "select": lambda x: x[:, -1], "squeeze": lambda x: x[:1].squeeze(0).squeeze(),
    "unsqueeze": lambda x: x.unsqueeze(-1), "cat": lambda x: torch.cat([x, x * 2], 1),
    "cat_promote": lambda x: torch.cat([x, x.double()]), "stack": lambda x: torch.stack([x, x]),
    "flatten": lambda x: x.flatten(), "split": lambda x: x.split(2, 1)[1],
    "chunk": lambda x: x.chunk(2)[0],
    "split_sizes": lambda x: x.split([1, 3], 1)[1], "unbind": lambda x: x.unbind(1)[2], "reshape_t": lambda x: x.t().reshape(-1),
    "permute_3d": lambda x: x.view(3, 2, 2).permute(-1, 0, 1).reshape(-1),
    "permute_identity": lambda x: x.permute(0, -1),
    "transpose_negative": lambda x: x.unsqueeze(1).transpose(-1, 0),
    "transpose_same": lambda x: x.transpose(1, -1),
    "unsqueeze_front_back": lambda x: x.unsqueeze(-3).unsqueeze(3),
}


@pytest.mark.parametrize("op", list(VIEWS))
@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32])
def test_views_match_eager(torch_backend, op, dtype):
    a = _sample(dtype)
    lr.metrics.reset()
    got = VIEWS[op](a.to("lazy"))
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert_same(got, VIEWS[op](a))


MATMUL = {
    "mm": lambda a, b, c: a @ b, "addmm": lambda a, b, c: torch.addmm(c, a, b),
    "addmm_scaled": lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2),
    "bmm": lambda a, b, c: torch.bmm(a.unsqueeze(0).expand(2, 3, 4), b.unsqueeze(0).expand(2, 4, 5)),
    "matmul_3d": lambda a, b, c: a.unsqueeze(0) @ b, "mv": lambda a, b, c: a @ b[:, 0],
    "linear": lambda a, b, c: torch.nn.functional.linear(a, b.t(), c),
}


@pytest.mark.parametrize("op", list(MATMUL))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matmul_forms_match_eager(torch_backend, op, dtype):
    a, b, c = _sample(dtype, (3, 4)), _sample(dtype, (4, 5), 1), _sample(dtype, (5,), 2)
    want = MATMUL[op](a, b, c)
    assert_same(MATMUL[op](a.to("lazy"), b.to("lazy"), c.to("lazy")), want,
                rtol=1e-5 if dtype == torch.float32 else 1e-13, atol=1e-5)


@pytest.mark.parametrize("sizes,dim,index", [((3, 4, 5), 0, 1), ((3, 4, 5), -1, -2),
                                              ((2, 3), 1, 2), ((4,), 0, 3), ((2, 0), 0, 1)])
def test_select_backward_is_native(torch_backend, sizes, dim, index):
    """``x[i]``'s backward (what ``q, k, v = proj[0], proj[1], proj[2]`` records) is
    a lowering of its own, an elementwise mask the planner fuses."""
    kept = [s for i, s in enumerate(sizes) if i != dim % len(sizes)]
    grad = _sample(torch.float64, tuple(kept)) if all(kept) else torch.zeros(kept,
                                                                              dtype=torch.float64)
    lr.metrics.reset()
    got = torch.ops.aten.select_backward(grad.to("lazy"), sizes, dim, index)
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert_same(got, torch.ops.aten.select_backward(grad, sizes, dim, index), rtol=0, atol=0)


@pytest.mark.parametrize("op,args", [("permute", (0, 0)), ("permute", (0, 2)),
                                     ("transpose", (0, 2)), ("unsqueeze", (3,))])
def test_bad_view_dims_raise_as_in_eager(torch_backend, op, args):
    x = _sample(torch.float32)
    with pytest.raises((IndexError, RuntimeError)):
        getattr(x, op)(*args)
    with pytest.raises((IndexError, RuntimeError)):
        getattr(x.to("lazy"), op)(*args)


def test_scatters_from_functionalization(torch_backend):
    def prog(dev):
        x = torch.zeros(4, 5, dtype=torch.float64, device=dev)
        x[1] = torch.arange(5.0, dtype=torch.float64, device=dev)
        x[:, 2:4] += 1
        x[::2, 0] = -1
        return x
    assert_same(prog("lazy"), prog("cpu"))


def test_optimizer_ops_match_eager(torch_backend):
    a, b, c = (_sample(torch.float64, seed=s) for s in range(3))
    la, lb, lc = (t.to("lazy") for t in (a, b, c))
    for fn in (lambda x, y, z: torch.lerp(x, y, 0.1), lambda x, y, z: torch.lerp(x, y, 0.9),
               lambda x, y, z: torch.addcmul(x, y, z, value=0.3),
               lambda x, y, z: torch.addcdiv(x, y, z.abs() + 1, value=-0.01)):
        assert_same(fn(la, lb, lc), fn(a, b, c), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("op", [torch._fused_adam_, torch._fused_adamw_])
@pytest.mark.parametrize("found", [None, 0.0, 1.0])
def test_fused_adam_lowering_matches_torchs_kernel(torch_backend, op, found):
    """``_fused_adam(w)_`` called directly (amsgrad, lazy step counts, AMP's
    ``grad_scale`` and ``found_inf``) against torch's own CPU kernel."""
    shapes = [(3, 4), (5,)]
    g = torch.Generator().manual_seed(1)

    def state():
        return [[torch.randn(s, generator=g, dtype=torch.float64).abs() for s in shapes]
                for _ in range(5)]
    cpu = state()
    steps = [torch.tensor(3.0, dtype=torch.float32) for _ in shapes]
    scale = torch.tensor(4.0, dtype=torch.float32)
    inf = None if found is None else torch.tensor(found, dtype=torch.float32)
    lazy = [[t.to("lazy") for t in group] for group in cpu]
    kwargs = dict(lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=True,
                  maximize=False)
    op(*cpu, steps, grad_scale=scale, found_inf=inf, **kwargs)
    op(*lazy, [s.to("lazy") for s in steps], grad_scale=scale.to("lazy"),
       found_inf=None if inf is None else inf.to("lazy"), **kwargs)
    assert lr.metrics.snapshot()["fallbacks"] == {}
    for want_group, got_group in zip(cpu, lazy):
        for want, got in zip(want_group, got_group):
            assert_same(got, want, rtol=1e-12, atol=1e-14)


def test_native_lowerings_need_no_decomposition():
    # a lowering wins over PyTorch's decomposition of the same overload
    # (but for the few whose lowering declines some forms: those forms decompose)
    from lazyrt.torch.registry import KEEP_DECOMPOSITION
    assert not (set(LOWERINGS) & set(DECOMPOSITIONS)) - KEEP_DECOMPOSITION
    assert aten.add.Tensor in LOWERINGS and aten.view_copy.default in LOWERINGS
    assert aten.select_scatter.default in LOWERINGS and aten.slice_scatter.default in LOWERINGS


def test_unsupported_op_is_a_counted_warned_fallback(torch_backend):
    from lazyrt.torch import dispatch
    name = "aten.kthvalue.default"
    dispatch._warned.discard(name)
    x = torch.tensor([3.0, 1.0, 2.0, 5.0])
    lx = x.to("lazy")
    lr.metrics.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values, index = torch.kthvalue(lx, 2)
        torch.kthvalue(lx * 2, 3)
    assert_same(values, torch.kthvalue(x, 2)[0])
    assert_same(index, torch.kthvalue(x, 2)[1])
    assert values.device.type == "lazy"
    snap = lr.metrics.snapshot()
    assert snap["fallbacks"] == {name: 2}
    mine = [w for w in caught if issubclass(w.category, PerformanceWarning)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    assert name in str(mine[0].message) and __file__ in str(mine[0].message)
    assert mine[0].filename == __file__   # the warning points at the user's line
    sites = lr.metrics.metrics.fallback_sites()
    assert all(where.startswith(__file__) for (_, where) in sites), sites


def test_embedding_lookup_and_backward_are_native(torch_backend):
    torch.manual_seed(0)
    eager = torch.nn.Embedding(7, 3).double()
    lazy = lt.lazy(torch.nn.Embedding(7, 3).double())
    lazy.load_state_dict(eager.state_dict())
    idx = torch.tensor([[0, 6, 1], [2, 2, 5]])   # a repeated index accumulates
    lr.metrics.reset()
    out = lazy(idx.to("lazy"))
    want = eager(idx)
    assert_same(out, want)
    (out * out).sum().backward()
    (want * want).sum().backward()
    assert_same(lazy.weight.grad, eager.weight.grad, rtol=1e-15, atol=0)
    assert lr.metrics.snapshot()["fallbacks"] == {}


@pytest.mark.parametrize("kwargs", [dict(padding_idx=2), dict(padding_idx=-1),
                                    dict(scale_grad_by_freq=True),
                                    dict(scale_grad_by_freq=True, padding_idx=5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_embedding_backward_with_padding_and_frequency_scaling(torch_backend, kwargs, dtype):
    """A padding row gets no gradient; scale_grad_by_freq divides by each index's
    count; both natively, with no fallback."""
    torch.manual_seed(1)
    eager = torch.nn.Embedding(7, 4, **kwargs).to(dtype)
    lazy = lt.lazy(torch.nn.Embedding(7, 4, **kwargs).to(dtype))
    lazy.load_state_dict(eager.state_dict())
    lr.metrics.reset()
    for idx in (torch.tensor([[0, 2, 1], [2, 6, 6]]), torch.tensor([5, 5, 5, 2])):
        eager.zero_grad()
        lazy.zero_grad()
        g = torch.randn(tuple(idx.shape) + (4,), dtype=dtype)
        (eager(idx) * g).sum().backward()
        (lazy(idx.to("lazy")) * g.to("lazy")).sum().backward()
        tol = 1e-6 if dtype is torch.float32 else 1e-14
        assert_same(lazy.weight.grad, eager.weight.grad, rtol=tol, atol=tol)
    assert lr.metrics.snapshot()["fallbacks"] == {}


def test_gather_scatter_add_and_index_put_match_eager(torch_backend):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    idx = torch.randint(0, 4, (3, 5), generator=g)
    src = torch.randn(3, 5, generator=g, dtype=torch.float64)
    rows = torch.tensor([3, -1, 0, 3])
    lr.metrics.reset()
    lx, lidx, lsrc = x.to("lazy"), idx.to("lazy"), src.to("lazy")
    assert_same(torch.gather(lx, 0, lidx), torch.gather(x, 0, idx))
    assert_same(torch.gather(lx, 1, lidx[:, :2] % 5), torch.gather(x, 1, idx[:, :2] % 5))
    assert_same(lx.scatter_add(0, lidx, lsrc), x.scatter_add(0, idx, src), rtol=1e-15, atol=0)
    assert_same(lx.index_put((rows.to("lazy"),), torch.ones(4, 5, dtype=torch.float64)
                             .to("lazy"), accumulate=True),
                x.index_put((rows,), torch.ones(4, 5, dtype=torch.float64), accumulate=True))
    assert lr.metrics.snapshot()["fallbacks"] == {}


@pytest.mark.parametrize("fn", [
    lambda x: x // 3, lambda x: torch.div(x, -3, rounding_mode="trunc"), lambda x: x % -3,
    lambda x: torch.div(x.double(), 3, rounding_mode="floor"),
    lambda x: x.flip(0).cumsum(0), lambda x: x.repeat(2, 1).prod(1), lambda x: x.sort()[0],
    lambda x: (x > 0).any(), lambda x: torch.nn.functional.leaky_relu(x.double(), 0.2)])
def test_integer_division_ordering_and_logical_forms(torch_backend, fn):
    x = torch.arange(-7, 8)
    lr.metrics.reset()
    got = fn(x.to("lazy"))
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert_same(got, fn(x))


KNOWN_ZERO_DIVISORS = {  # integer division by a divisor whose value is known when recorded
    "floordiv_python_zero": lambda x: x // 0,
    "remainder_python_zero": lambda x: x % 0,
    "remainder_of_a_number": lambda x: torch.remainder(5, DIVISORS.to(x.device)),
    "floordiv_cpu_scalar": lambda x: x // torch.tensor(0),
    "floor_div_data": lambda x: torch.div(x, DIVISORS.to(x.device), rounding_mode="floor"),
    "trunc_div_data": lambda x: torch.div(x, DIVISORS.to(x.device), rounding_mode="trunc"),
    "remainder_data": lambda x: x % DIVISORS.to(x.device),
    "fmod_data": lambda x: torch.fmod(x, DIVISORS.to(x.device)),
    "int32_floordiv": lambda x: x.int() // DIVISORS.int().to(x.device),
}
DIVISORS = torch.tensor([3, -2, 0, 1, 5])


@pytest.mark.parametrize("case", list(KNOWN_ZERO_DIVISORS))
def test_integer_division_by_a_known_zero_raises_as_in_eager(torch_backend, case):
    """Eager raises ``ZeroDivisionError`` on an integer division by zero; lazyrt's
    integer ops give 0 (NumPy's rule), so a divisor known at the call raises there."""
    call = KNOWN_ZERO_DIVISORS[case]
    x = torch.tensor([7, -7, 4, 0, 9])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(x)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(x.to("lazy"))
    nonzero = torch.tensor([3, -2, 4, 1, 5])  # the same calls with no zero divisor compute
    assert_same(torch.div(x.to("lazy"), nonzero.to("lazy"), rounding_mode="floor"),
                torch.div(x, nonzero, rounding_mode="floor"))


PENDING_ZERO_DIVISORS = {
    "floordiv": lambda x, d: x // d,
    "remainder": lambda x, d: x % d,
    "fmod": lambda x, d: torch.fmod(x, d),
    "floor_div": lambda x, d: torch.div(x, d, rounding_mode="floor"),
    "trunc_div": lambda x, d: torch.div(x, d, rounding_mode="trunc"),
    "number_dividend": lambda x, d: torch.remainder(5, d),
    "int32": lambda x, d: x.int() // d.int(),
}


@pytest.mark.parametrize("case", list(PENDING_ZERO_DIVISORS))
def test_integer_division_by_a_zero_computed_in_the_graph_raises_at_the_barrier(
        torch_backend, case):
    """A divisor the graph computes is not known at the call: the division is
    recorded, and the barrier that computes the graph raises eager's error,
    naming the line that recorded the division. The check is raised once; the
    values stay usable, and a divisor with no zero computes as eager does."""
    call = PENDING_ZERO_DIVISORS[case]
    x = torch.tensor([7, -7, 4])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(x, torch.tensor([1, 2, 3]) - 1)
    d = torch.tensor([1, 2, 3]).to("lazy") - 1          # pending: [0, 1, 2]
    out = call(x.to("lazy"), d)                          # no error yet: d is unknown
    with pytest.raises(RuntimeError, match=r"ZeroDivisionError .*test_torch_lowerings\.py"):
        out.tolist()
    # raised once; the values are there (where the divisor is not zero, eager's)
    assert out.tolist()[1:] == call(x, torch.tensor([1, 1, 2])).tolist()[1:]
    out2 = call(x.to("lazy"), torch.tensor([1, 2, 3]).to("lazy") - 1)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        lt.mark_step()                                   # every barrier checks
    nonzero = torch.tensor([2, 3, 4])
    assert_same(call(x.to("lazy"), nonzero.to("lazy") - 1), call(x, nonzero - 1))
    del out2


def test_integer_division_by_a_zero_held_on_a_device_raises():
    """On ``jax`` a computed divisor stays on the device (not a host array): the
    graph checks it, as it does a pending one."""
    if "jax" not in lr.runtime.available_backends():
        pytest.skip("jax is not installed")
    with lr.backend("jax"):
        d = torch.tensor([1, 2, 3]).to("lazy") - 1
        lt.mark_step()                                   # computed, held by jax
        out = torch.tensor([7, -7, 4]).to("lazy") // d
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            out.tolist()
        assert (torch.tensor([7, -7, 4]).to("lazy") // (d + 1)).tolist() == [7, -4, 1]


def test_integer_division_checks_only_what_eager_checks(torch_backend):
    """Eager's kernel never reads the divisor of an empty result, and floats
    divide by zero to inf/NaN: neither raises, known divisor or pending."""
    empty = torch.zeros(0, 3, dtype=torch.long)
    assert (empty.to("lazy") // 0).shape == (0, 3)
    assert (empty.to("lazy") // (torch.tensor([1, 2, 3]).to("lazy") - 1)).tolist() == []
    x = torch.tensor([7.0, -7.0, 4.0])
    zeros = torch.tensor([0.0, 1.0, 2.0])
    assert_same(x.to("lazy") // (zeros.to("lazy") * 1), x // zeros)
    assert_same(x.to("lazy") % (zeros.to("lazy") * 1), x % zeros)
    lt.mark_step()


def test_cpu_index_tensors_may_index_a_lazy_tensor(torch_backend):
    x = torch.arange(12.0).reshape(4, 3)
    idx = torch.tensor([3, 0, 3])
    lr.metrics.reset()
    assert_same(x.to("lazy")[idx], x[idx])          # as a cuda tensor takes CPU indices
    assert lr.metrics.snapshot()["fallbacks"] == {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerformanceWarning)
        lx = x.to("lazy")
        lx[idx[:2]] = -1.0
    x[idx[:2]] = -1.0
    assert_same(lx, x)


def _specials(dtype):
    """Values that tell rounding, sign and NaN rules apart: halves, signed zeros,
    inf, NaN (floats), and negative and positive integers."""
    if dtype.is_floating_point:
        return torch.tensor([[-2.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.7],
                             [float("inf"), -float("inf"), float("nan"), 0.3, -0.7, 9.0,
                              -1e-30, 1e30]], dtype=dtype)
    return torch.tensor([[-7, -2, 0, 1, 2, 5, 9, -9], [3, -3, 4, -4, 8, 100, -100, 1]],
                        dtype=dtype)


def _ints(x):
    """Integers from ``x`` (a float's inf, NaN and 1e30 become 0: their int64 cast
    is undefined, and backends differ)."""
    if not x.dtype.is_floating_point:
        return x
    return torch.where(x.isfinite() & (x.abs() < 1e6), x, 0).long()


ELEMENTWISE_MORE = {
    "tan": torch.tan, "asin": lambda x: torch.asin(x / 200), "acos": lambda x: torch.acos(x / 200),
    "atan": torch.atan, "sinh": lambda x: torch.sinh(x / 4), "cosh": lambda x: torch.cosh(x / 4),
    "asinh": torch.asinh, "acosh": lambda x: torch.acosh(x.abs() + 1),
    "atanh": lambda x: torch.atanh(x / 200), "log2": lambda x: torch.log2(x.abs() + 1),
    "log10": lambda x: torch.log10(x.abs() + 1), "exp2": lambda x: torch.exp2(x / 8),
    "round": torch.round, "round_decimals": lambda x: torch.round(x * 1.37, decimals=1)
    if x.dtype.is_floating_point else torch.round(x),
    "round_neg_decimals": lambda x: torch.round(x * 37.5, decimals=-1)
    if x.dtype.is_floating_point else torch.round(x),
    "signbit": torch.signbit, "atan2": lambda x: torch.atan2(x, x.flip(1)),
    "hypot": lambda x: torch.hypot(x, x.flip(1)) if x.dtype.is_floating_point
    else torch.hypot(x.double(), x.flip(1).double()),
    "copysign": lambda x: torch.copysign(x, x.flip(1)),
    "logical_xor": lambda x: torch.logical_xor(x, x.flip(1)),
    "fmod": lambda x: torch.fmod(x, torch.where(x.flip(1) == 0, 3, x.flip(1)))
    if not x.dtype.is_floating_point else torch.fmod(_ints(x), 3),
    "fmod_scalar": lambda x: torch.fmod(_ints(x), -4),
    "fmax": lambda x: torch.fmax(x, x.flip(1)), "fmin": lambda x: torch.fmin(x, x.flip(0)),
    "shifts": lambda x: torch.bitwise_left_shift(_ints(x), 3) + (_ints(x) >> 2),
    "pad": lambda x: torch.nn.functional.pad(x, (2, -1, 1, 0), value=-1.5
                                             if x.dtype.is_floating_point else 4),
}


@pytest.mark.parametrize("op", list(ELEMENTWISE_MORE))
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.float64])
def test_more_elementwise_lowerings_match_eager_with_no_fallback(torch_backend, op, dtype):
    """The inverse trigonometric and hyperbolic functions, log2/log10/exp2, rounding
    (with decimals), signbit, atan2, hypot, copysign, logical_xor, fmod (integers),
    fmax/fmin, shifts and constant padding: native on every backend, on halves,
    signed zeros, inf and NaN, as eager computes them."""
    x = _specials(dtype)
    want = ELEMENTWISE_MORE[op](x)
    lr.metrics.reset()
    got = ELEMENTWISE_MORE[op](x.to("lazy"))
    f32 = want.dtype == torch.float32
    assert_same(got, want, rtol=4e-6 if f32 else 1e-13, atol=1e-6 if f32 else 1e-13)
    assert lr.metrics.snapshot()["fallbacks"] == {}


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64, torch.int64,
                                   torch.bool])
def test_sign_of_nan_is_zero_as_in_eager(torch_backend, dtype):
    """torch's ``sign`` is ``(0 < x) - (x < 0)``: NaN gives 0 and -0.0 gives 0.0,
    where NumPy's (lazyrt's own ``sign``) gives NaN and -0.0."""
    x = _specials(dtype).to(dtype) if dtype is not torch.bool else torch.tensor([True, False])
    want = torch.sign(x)
    got = torch.sign(x.to("lazy")).cpu()
    assert got.dtype == want.dtype and torch.equal(got, want)
    if dtype.is_floating_point:
        assert not got.isnan().any() and not torch.signbit(got[got == 0]).any()


CLAMPS = {
    "relu": torch.relu, "relu6": torch.nn.functional.relu6,
    "clamp_min": lambda x: x.clamp_min(0.0), "clamp_max": lambda x: x.clamp_max(-0.0),
    "clamp": lambda x: x.clamp(0, 1), "clamp_cpu_scalars": lambda x: x.clamp(
        torch.tensor(0.0), torch.tensor(1.0)),
    "hardtanh": lambda x: torch.nn.functional.hardtanh(x, -0.0, 0.5),
    "clamp_nan_bound": lambda x: x.clamp(min=float("nan")),
    "clamp_crossed_bounds": lambda x: x.clamp(1, 0),
}


@pytest.mark.parametrize("op", list(CLAMPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_and_clamp_keep_signed_zeros_and_nan_as_eager(torch_backend, op, dtype):
    """Eager's ReLU and clamp with number bounds keep a value equal to a bound as it
    is (-0.0 stays -0.0), keep NaN inputs and give NaN for a NaN bound."""
    x = torch.tensor([-0.0, 0.0, -1.0, 2.0, float("nan"), 0.5, 1.0, -5.0], dtype=dtype)
    want = CLAMPS[op](x)
    got = CLAMPS[op](x.to("lazy")).cpu()
    assert_same(got, want, rtol=0, atol=0)
    assert torch.equal(torch.signbit(got), torch.signbit(want))


REFUSED = {  # (input, call): eager's CPU kernels lack these dtypes
    "hypot_int": (torch.tensor([1, 2]), lambda x: torch.hypot(x, x)),
    "round_bool": (torch.tensor([True, False]), torch.round),
    "shift_float": (torch.tensor([1.0, 2.0]), lambda x: torch.bitwise_left_shift(x, 1)),
    "fmod_bool": (torch.tensor([True, False]), lambda x: torch.fmod(x, x)),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_dtypes_eager_refuses_are_refused(torch_backend, case):
    """``hypot`` of integers, ``round`` of bools, a shift of floats: eager's error,
    not a computed value."""
    x, call = REFUSED[case]
    with pytest.raises(RuntimeError) as eager:
        call(x)
    with pytest.raises(RuntimeError) as lazy:
        call(x.to("lazy"))
    assert str(eager.value) in str(lazy.value)


def test_one_hot_scatter_and_topk_are_native(torch_backend):
    """``F.one_hot`` (a scatter of one value per row), ``scatter`` of a value or of
    one element per row, and ``topk`` (values, and indices that pick them), with
    no fallback; an index out of range is an error, not a silent miss."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 3, 5, 3, 1])
    lr.metrics.reset()
    assert_same(torch.nn.functional.one_hot(labels.to("lazy"), 6), torch.nn.functional.one_hot(labels, 6))
    rows = torch.tensor([[2], [5], [0], [2]])
    src = torch.randn(4, 3, generator=g, dtype=torch.float64)
    assert_same(x.to("lazy").scatter(1, rows.to("lazy"), src.to("lazy")),
                x.scatter(1, rows, src))
    many = torch.tensor([[1, 1, 4], [0, 5, 5], [2, 3, 2], [0, 0, 0]])
    assert_same(x.to("lazy").scatter(1, many.to("lazy"), -1.0), x.scatter(1, many, -1.0))
    ints = torch.arange(24).reshape(4, 6)
    cols = torch.tensor([[3, 0, 1, 2, 0, 3]])
    assert_same(ints.to("lazy").scatter(0, cols.to("lazy"), 7), ints.scatter(0, cols, 7))
    for k, dim, largest in ((3, 1, True), (2, 0, False), (6, -1, True)):
        values, index = torch.topk(x.to("lazy"), k, dim, largest)
        want = torch.topk(x, k, dim, largest)
        assert_same(values, want.values)
        assert_same(index, want.indices)  # no ties in random floats: eager's order
    assert lr.metrics.snapshot()["fallbacks"] == {}
    with pytest.raises(RuntimeError, match="scatter.*index 6 is out of bounds"):  # eager's
        x.to("lazy").scatter(1, torch.tensor([[1], [6], [0], [2]]).to("lazy"), 1.0).cpu()

