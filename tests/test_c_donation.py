"""The c backend writes an output over a parameter's array when nobody else
holds it (lazyrt.backends.c.donation_pairs picks the pairs, runtime._dead_params
and runtime._host_owned decide per run): an optimizer's ``w = w - lr * g``
reuses ``w``'s memory. Every way someone could still see the old value must
keep it: a tensor, a NumPy array or torch tensor over it, a pending op, an
output viewing it, another output of the same kernel reading it."""
from __future__ import annotations

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import runtime
from lazyrt.backends import c as cbackend
from lazyrt.planner.schedule import reads, writes
from lazyrt.runtime import program_cache

pytestmark = pytest.mark.skipif("c" not in lr.available_backends(),
                                reason="no C compiler: the c backend is unavailable")

N = 1 << 12


def _address(t):
    return t._node.value.ctypes.data


@pytest.fixture
def c_backend():
    with lr.backend("c"):
        yield


@pytest.mark.parametrize("n", [N, 1 << 22])  # in cache, and streamed past it in tiles
def test_a_buffer_nobody_else_holds_is_written_over(c_backend, n):
    g = lr.tensor(np.ones(n, np.float32))
    w = lr.tensor(np.zeros(n, np.float32)) + 1.0
    lr.sync(w)
    reused = []
    for _ in range(5):
        before = _address(w)  # an int: holds nothing
        w = w - 0.5 * g
        lr.sync(w)
        reused.append(_address(w) == before)
    assert reused == [True] * 5
    np.testing.assert_array_equal(w.numpy(), np.full(n, -1.5, np.float32))


def test_an_optimizer_step_updates_parameter_and_moments_in_place(c_backend):
    """Three parameters of one update (w, m, v), as AdamW's kernel has them."""
    rng = np.random.default_rng(0)
    w0, g0 = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    w, m, v = (lr.tensor(w0) + 0.0, lr.tensor(np.zeros(N, np.float32)) + 0.0,
               lr.tensor(np.zeros(N, np.float32)) + 0.0)
    lr.sync(w, m, v)
    ew, em, ev = w0.astype(np.float64), np.zeros(N), np.zeros(N)
    for step in range(4):
        g = lr.tensor(g0 * (step + 1))
        before = [_address(t) for t in (w, m, v)]
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        w = w - 0.01 * m / (lr.sqrt(v) + 1e-8)
        lr.sync(w, m, v)
        assert [_address(t) for t in (w, m, v)] == before
        gd = g0.astype(np.float64) * (step + 1)
        em, ev = 0.9 * em + 0.1 * gd, 0.99 * ev + 0.01 * gd * gd
        ew = ew - 0.01 * em / (np.sqrt(ev) + 1e-8)
    np.testing.assert_allclose(w.numpy(), ew, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v.numpy(), ev, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("holder", ["tensor", "numpy", "view", "pending", "torch"])
def test_a_buffer_someone_still_holds_keeps_its_value(c_backend, holder):
    for _ in range(3):
        w = lr.tensor(np.arange(N, dtype=np.float32)) * 2.0
        lr.sync(w)
        if holder == "tensor":
            kept = w
        elif holder == "numpy":
            kept = w.numpy()
        elif holder == "view":
            kept = w.numpy()[5:]
        elif holder == "pending":
            kept = w + 100.0
        else:
            torch = pytest.importorskip("torch")
            kept = torch.from_numpy(w.numpy())
        before = _address(w)
        w = w - 1.0
        lr.sync(w)
        assert _address(w) != before
        got = kept.numpy() if hasattr(kept, "numpy") else kept
        expected = np.arange(N, dtype=np.float32) * 2.0 + (100.0 if holder == "pending" else 0)
        np.testing.assert_array_equal(got, expected[5:] if holder == "view" else expected)
        np.testing.assert_array_equal(w.numpy(), np.arange(N, dtype=np.float32) * 2.0 - 1.0)


def test_a_surviving_pending_op_keeps_what_it_reads():
    with lr.backend("c"):
        w = lr.tensor(np.arange(N, dtype=np.float32)) * 2.0
        lr.sync(w)
        later = lr.where(lr.ones(N, "bool"), w, w)  # pending, reads w; not synced below
        out = w * 3.0
        del w
        lr.sync(out)
        np.testing.assert_array_equal(out.numpy(), np.arange(N) * 6.0)
        np.testing.assert_array_equal(later.numpy(), np.arange(N) * 2.0)


@pytest.mark.parametrize("n", [N, 1 << 22])  # in cache, and streamed past it in tiles
def test_another_output_of_the_kernel_reads_the_old_value(c_backend, n):
    """The donated array is written while the same loop still needs the old
    value for other outputs: each element is read before it is written. Over
    the orders tried, the array goes at least once to the output that does not
    read it (the hazardous case)."""
    g = lr.tensor(np.full(n, 3.0, np.float32))
    exprs = {"twice_g": lambda w: g * 2.0, "plus": lambda w: w + g, "square": lambda w: w * w}
    expected = {"twice_g": np.full(n, 6.0), "plus": np.arange(n, dtype=np.float32) + 3.0,
                "square": np.arange(n, dtype=np.float32) ** 2}
    took = set()
    for order in (("twice_g", "plus", "square"), ("plus", "square", "twice_g"),
                  ("square", "twice_g", "plus")):
        for _ in range(2):
            w = lr.tensor(np.arange(n, dtype=np.float32)) + 0.0
            lr.sync(w)
            old = _address(w)
            outs = {name: exprs[name](w) for name in order}
            del w
            lr.sync(*outs.values())
            for name, t in outs.items():
                np.testing.assert_array_equal(t.numpy(), expected[name])
                if _address(t) == old:
                    took.add(name)
    assert "twice_g" in took, took


def test_a_parameter_read_again_later_or_through_a_view_is_not_paired(c_backend):
    """Plans: no pair where a later step (here a matmul) reads the parameter, or
    an output is a view of it, or the kernel reads it at another index."""
    rng = np.random.default_rng(1)
    w = lr.tensor(rng.standard_normal((64, 64)).astype(np.float32)) + 0.0
    lr.sync(w)

    def pairs(*outs):
        program_cache.clear()
        lr.sync(*outs)
        the_plan = next(reversed(program_cache._programs.values())).plan
        found = cbackend.donation_pairs(the_plan)
        for k, s, _, _ in found:  # no step after the pair's kernel reads the parameter
            p = the_plan.param_buffers[k]
            assert not any(p in reads(st) for st in the_plan.steps[s + 1:])
        return found
    assert pairs(w * 2.0)                          # the plain case pairs
    pairs(w * 2.0, w @ w, w @ (w * 2.0))           # a matmul reads it too: checked above
    assert not pairs(w.T * 2.0)                    # read transposed: another index
    assert not pairs(w * 2.0 + w.T)                # read at two indices
    assert not pairs(w * 2.0, w[1:])               # an output views the parameter
    assert not pairs(w.sum(0) + w[0])              # a reduction kernel


def test_an_output_an_earlier_kernel_also_stores_is_not_paired(c_backend):
    """An in-place update read through two views lands in two kernels, each
    storing the result: the later kernel reads the parameter, so the earlier
    store must not land on it (it did: ``v //= 0.5`` applied twice)."""
    h = np.array([[[-4.0, -1.0], [-2.5, 1.0]], [[-5.0, 1.0], [1.5, -2.0]],
                  [[-3.5, 0.0], [6.0, 0.0]]])
    for _ in range(3):  # the second and later runs find the buffer free to donate
        v = lr.asarray(h, copy=True)
        v //= 0.5
        a, b = v[None], v[::-1]
        lr.sync(v, a, b)
        np.testing.assert_array_equal(v.numpy(), h // 0.5)
        np.testing.assert_array_equal(a.numpy(), (h // 0.5)[None])
        np.testing.assert_array_equal(b.numpy(), (h // 0.5)[::-1])
    the_plan = next(reversed(program_cache._programs.values())).plan
    for k, s, _, oi in cbackend.donation_pairs(the_plan):
        out = the_plan.steps[s].spec.outputs[oi].buffer
        assert not any(out in writes(st) for st in the_plan.steps[:s])


def test_nothing_is_donated_while_a_watcher_checks_the_run(c_backend, monkeypatch):
    """``lazyrt check`` and the observers rerun graphs on the oracle with the same
    parameters: the watched path never donates."""
    calls = []
    from lazyrt.observe import Observer
    w = lr.tensor(np.zeros(N, np.float32)) + 1.0
    lr.sync(w)
    monkeypatch.setattr(runtime, "_dead_params", lambda *a: calls.append(a) or ())
    previous = runtime.watch(Observer())
    try:
        w = w - 1.0
        lr.sync(w)
    finally:
        runtime.watch(previous)
    assert calls == []
    w = w - 1.0
    lr.sync(w)
    assert calls  # the plain barrier asks


def test_host_ownership_rules():
    from lazyrt import _launch
    own = _launch.empty((1 << 16,), np.float32)   # a pool block, as large outputs are
    own.flags.writeable = False
    assert runtime._host_owned(own)
    shaped = own.reshape(256, 256)           # a view of it: what that sees is not its own
    assert runtime._host_owned(shaped) is False  # its base (own) is held by own's name too
    del shaped
    assert isinstance(own.base.base, memoryview)
    block = own.base.base.obj                # lazyrt's pool block under it
    assert not runtime._host_owned(own)      # someone else holds the block
    del block
    assert runtime._host_owned(own)
    plain = np.zeros(N, np.float32)
    assert not runtime._host_owned(plain)                     # writeable: the user's
    plain.flags.writeable = False
    assert runtime._host_owned(plain)                         # owns its memory
    assert not runtime._host_owned(np.zeros((8, 8), np.float32).T)  # not contiguous
    user = bytearray(4 * N)
    over = np.frombuffer(user, np.float32)
    over.flags.writeable = False
    assert not runtime._host_owned(over)                      # the user's bytes


def _plan_of_last():
    return next(reversed(program_cache._programs.values())).plan


def test_a_kernel_stores_its_scratch_result_over_the_scratch_it_reads(c_backend):
    """A bias + ReLU over a matmul's product, and a mask over the gradient the
    next matmul made: each result is stored over its dead input, in a chain, and
    every value is right (checked against NumPy, run after run)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 48)).astype(np.float32)
    w1 = rng.standard_normal((48, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    expected_h = np.maximum(x @ w1 + b, 0)
    expected = np.where(expected_h > 0, (expected_h @ w2) @ w2.T, 0) * 0.5
    program_cache.clear()
    for _ in range(3):
        h = lr.maximum(lr.tensor(x) @ lr.tensor(w1) + lr.tensor(b), 0.0)
        g = lr.where(h > 0, (h @ lr.tensor(w2)) @ lr.tensor(w2).T, 0.0) * 0.5
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-4, atol=1e-4)
    the_plan = _plan_of_last()
    shared = cbackend.shared_scratch(the_plan)
    assert shared
    for s, _, _, i, o in shared:
        assert the_plan.buffers[i].kind == the_plan.buffers[o].kind == "scratch"
        assert not any(i in reads(st) for st in the_plan.steps[s + 1:])
        assert i not in {v.buffer for v in the_plan.outputs}
    assert len({i for *_, i, _ in shared} | {o for *_, o in shared}) == 2 * len(shared)


def test_a_scratch_read_after_the_kernel_keeps_its_own_buffer(c_backend):
    """``p.T @ relu(p)``: the matmul reads the product after the ReLU kernel ran,
    so the ReLU may not be stored over it."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 24)).astype(np.float32)
    w = rng.standard_normal((24, 24)).astype(np.float32)
    p = x @ w
    expected = p.T @ np.maximum(p, 0)
    for _ in range(2):
        lp = lr.tensor(x) @ lr.tensor(w)
        got = (lp.T @ lr.maximum(lp, 0.0)).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_a_torch_training_step_donates_and_keeps_what_the_user_kept(monkeypatch):
    """AdamW on lazy parameters: the update is donated, while a clone of the old
    weight and an alias of the weight (which eager torch updates in place) read
    as in eager torch, step after step."""
    torch = pytest.importorskip("torch")
    import copy
    import lazyrt.torch as lt
    donated = []
    real = runtime._dead_params

    def counted(*args):
        dead = real(*args)
        donated.append(len(dead))
        return dead
    monkeypatch.setattr(runtime, "_dead_params", counted)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    eager, lazy = copy.deepcopy(model), lt.lazy(copy.deepcopy(model))
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (eager, lazy)]
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    with lr.backend("c"):
        for step in range(5):
            kept = []
            for m, opt, xx, yy in ((eager, opts[0], x, y), (lazy, opts[1], x.to("lazy"),
                                                              y.to("lazy"))):
                opt.zero_grad()
                old = m[0].weight.detach().clone()
                alias = m[0].weight.detach()
                loss = torch.nn.functional.cross_entropy(m(xx), yy)
                loss.backward()
                opt.step()
                if m is lazy:
                    lt.mark_step()
                kept.append((old.cpu(), alias.cpu(), loss.item()))
            (eo, ea, el), (lo, la, ll) = kept
            torch.testing.assert_close(lo, eo, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(la, ea, rtol=1e-5, atol=1e-6)
            assert abs(ll - el) <= 1e-4 * abs(el)
    assert sum(donated) > 0
