"""Index-taking lowerings of ``lazyrt.torch`` against eager torch: one index
tensor at any dim (``x[:, [-1]]``, ``x[..., idx]``) as a gather, and its
backward; boolean masks known on the host; ``x[mask] = value``; every op's
range rule (which wrap a negative index, which refuse it), raised at the call
for a known index and at the barrier for one the graph computes, naming the
torch op, never lazyrt's internal function; and ``multinomial`` on Philox."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.errors import PerformanceWarning
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)


def _no_fallback():
    assert lr.metrics.snapshot()["fallbacks"] == {}


# --- one index tensor at any dim ---------------------------------------------------------

def _random_index_case(rng):
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(0, 4, ndim))
    d = int(rng.integers(0, ndim))
    index_shape = tuple(int(s) for s in rng.integers(0, 3, int(rng.integers(0, 3))))
    n = shape[d]
    if n == 0 and int(np.prod(index_shape)):
        index_shape = (0,)
    idx = rng.integers(-n, max(n, 1), index_shape) if n else np.zeros(index_shape, np.int64)
    return shape, d, torch.from_numpy(np.asarray(idx, np.int64))


@pytest.mark.parametrize("seed", range(12))
def test_one_index_tensor_at_any_dim_matches_eager(torch_backend, seed):
    """Random shapes (size 0 included), dims, index shapes (0-d, several dims,
    negative entries) and index kinds (lazy, CPU, list), forward and backward."""
    rng = np.random.default_rng(seed)
    shape, d, idx = _random_index_case(rng)
    x = torch.from_numpy(rng.standard_normal(shape))
    lead = (slice(None),) * d
    kinds = [idx.to("lazy"), idx, (idx.to("lazy") + 0)]   # known, CPU, computed
    if idx.dim() == 1:
        kinds.append(idx.tolist())
    want = x[lead + (idx,)]
    lr.metrics.reset()
    for i in kinds:
        assert_same(x.to("lazy")[lead + (i,)], want)
    if d == x.dim() - 1:
        assert_same(x.to("lazy")[..., idx], x[..., idx])
    xg = x.clone().requires_grad_()
    lx = x.to("lazy").requires_grad_()
    g = torch.from_numpy(rng.standard_normal(tuple(want.shape)))
    (xg[lead + (idx,)] * g).sum().backward()
    (lx[lead + (idx.to("lazy"),)] * g.to("lazy")).sum().backward()
    # repeated indices sum their gradients in another order than eager's: a rounding
    # of the terms' size, not of a sum that cancels
    assert_same(lx.grad, xg.grad, rtol=1e-14, atol=1e-13)
    _no_fallback()


def test_nanogpt_last_position_and_int32_index(torch_backend):
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    lr.metrics.reset()
    assert_same(x.to("lazy")[:, [-1], :], x[:, [-1], :])
    assert_same(x.to("lazy")[..., [0, 2]], x[..., [0, 2]])
    i32 = torch.tensor([[2, -1], [0, 0]], dtype=torch.int32)
    assert_same(x.to("lazy")[:, i32], x[:, i32])
    assert_same(x.to("lazy")[torch.tensor(1)], x[torch.tensor(1)])   # a 0-d index drops the dim
    for other in (torch.arange(24).reshape(2, 3, 4), torch.arange(24).reshape(2, 3, 4) % 3 == 0):
        assert_same(other.to("lazy")[:, :, [3, -4, 1]], other[:, :, [3, -4, 1]])
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.to("lazy")[:, [0, 1]] = torch.ones(4, dtype=torch.float64).to("lazy")
    _no_fallback()


@pytest.mark.parametrize("seed", range(8))
def test_several_index_tensors_match_eager_forward_and_backward(torch_backend, seed):
    """x[i, j], x[:, i[:, None], j] (adjacent, broadcasting, negative entries) and
    x[i, :, j] (apart: the broadcast dims come first), as torch's resampling
    decompositions record them; the backward is an index_put that accumulates."""
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal((3, 4, 5)))
    i = torch.from_numpy(rng.integers(-3, 3, (2, 1)))
    j = torch.from_numpy(rng.integers(-4, 4, (3,)))
    k = torch.from_numpy(rng.integers(-5, 5, (2, 3)))
    lr.metrics.reset()
    for index in [(i, j), (slice(None), j[:, None], k[:1]), (i, slice(None), k),
                  (slice(None), slice(None), k)]:
        lazy_index = tuple(t.to("lazy") if isinstance(t, torch.Tensor) else t for t in index)
        want = x[index]
        assert_same(x.to("lazy")[lazy_index], want)
        xg, lx = x.clone().requires_grad_(), x.to("lazy").requires_grad_()
        g = torch.from_numpy(rng.standard_normal(tuple(want.shape)))
        (xg[index] * g).sum().backward()
        (lx[lazy_index] * g.to("lazy")).sum().backward()
        assert_same(lx.grad, xg.grad, rtol=1e-14, atol=1e-13)
    _no_fallback()
    with pytest.raises(IndexError):
        x.to("lazy")[torch.tensor([0, 3]).to("lazy"), torch.tensor([1, 1]).to("lazy")].tolist()


def test_boolean_mask_known_on_the_host_is_a_gather(torch_backend):
    x = torch.randn(3, 4, 2, dtype=torch.float64)
    lr.metrics.reset()
    for mask in (torch.tensor([True, False, True, True]), torch.zeros(4, dtype=torch.bool)):
        assert_same(x.to("lazy")[:, mask], x[:, mask])
        assert_same(x.to("lazy")[:, mask.to("lazy")], x[:, mask])
    mask2 = torch.rand(3, 4, generator=torch.Generator().manual_seed(0)) > 0.5
    assert_same(x.to("lazy")[mask2], x[mask2])
    assert_same(x.to("lazy")[torch.tensor(True)], x[torch.tensor(True)])
    _no_fallback()


def test_index_put_forms(torch_backend):
    """``x[mask] = v`` with a mask the graph computes (``where``), and ``x[:, idx] = v``
    with known indices (repeated ones: the last write wins, as in eager's CPU loop)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    lr.metrics.reset()
    lx = x.to("lazy")
    for fill in (-float("inf"), 2.5):
        a, b = x.clone(), lx.clone()
        a[a < 0.3] = fill
        b[b < 0.3] = fill
        assert_same(b, a)
    row = torch.randn(6, generator=g, dtype=torch.float64)
    a, b = x.clone(), lx.clone()
    a[a[:, 0] > 0] = row
    b[b[:, 0] > 0] = row.to("lazy")
    assert_same(b, a)
    for idx in ([0, -1], [2, 2, 5], torch.tensor([[1], [3]])):
        shape = (4,) + tuple(torch.as_tensor(idx).shape)
        v = torch.arange(float(np.prod(shape)), dtype=torch.float64).reshape(shape)
        a, b = x.clone(), lx.clone()
        a[:, idx] = v
        b[:, idx] = v.to("lazy")
        assert_same(b, a)
    _no_fallback()


def test_a_mask_the_graph_computes_is_computed_alone(torch_backend):
    """``x[mask]`` has as many rows as the mask has True: the mask alone is
    computed (a barrier counted at this line), ``x`` stays lazy and is gathered;
    ``x[mask] = rows`` with one row per True likewise."""
    x = torch.randn(5, 3, dtype=torch.float64)
    lr.metrics.reset()
    lx = x.to("lazy") * 2
    got = lx[lx[:, 0] > 0]
    assert lr.metrics.snapshot()["materializations"] == 1
    _no_fallback()
    assert_same(got, (x * 2)[(x * 2)[:, 0] > 0])
    a, b = x.clone(), x.to("lazy") + 0
    rows = torch.arange(3.0, dtype=torch.float64).expand(int((x[:, 1] > 0).sum()), 3)
    a[a[:, 1] > 0] = rows
    b[b[:, 1] > 0] = rows.to("lazy")
    assert_same(b, a)
    _no_fallback()


def test_a_computed_index_written_without_accumulate_falls_back_cleanly(torch_backend):
    """Which of repeated writes wins is eager's loop: the counted fallback runs it,
    and no check of that index is left behind to raise at a later barrier."""
    x = torch.zeros(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerformanceWarning)
        lx = x.to("lazy")
        with pytest.raises(IndexError):                 # 6 is out of range: eager's error
            lx[torch.tensor([1, 7]).to("lazy") - 1] = 1.0
        lx[torch.tensor([1, 3, 1]).to("lazy") - 1] = 2.0
    assert lx.tolist() == [2.0, 0.0, 2.0, 0.0]
    lt.mark_step()
    assert (x.to("lazy") + 1).tolist() == [1.0] * 4


def test_index_put_accumulate_at_a_later_dim(torch_backend):
    torch.manual_seed(0)
    x = torch.randn(3, 5, dtype=torch.float64)
    idx = torch.tensor([4, -1, 0, 4])
    v = torch.randn(3, 4, dtype=torch.float64)
    lr.metrics.reset()
    put = torch.ops.aten.index_put.default   # (its Python method takes no None)
    assert_same(put(x.to("lazy"), [None, idx.to("lazy")], v.to("lazy"), True),
                put(x, [None, idx], v, True), rtol=1e-15, atol=1e-14)  # (sum order)
    _no_fallback()


# --- range rules, per op --------------------------------------------------------------------

def _x():
    return torch.arange(12.0, dtype=torch.float64).reshape(3, 4)


# op: (call(x, i) with i an index tensor on x's device, good, negative, too large, error)
RULES = {
    "index": (lambda x, i: x[:, i], [1, 3], [-1, -4], [4], [-5], IndexError),
    "index_dim0": (lambda x, i: x[i], [2], [-3], [3], [-4], IndexError),
    # (eager raises RuntimeError on some dims, by its kernel's path: dim 0 is IndexError)
    "index_select": (lambda x, i: x.index_select(0, i), [0, 2], None, [3], [-1], IndexError),
    "index_select_dim1": (lambda x, i: x.t().index_select(0, i), [0, 3], None, [4], [-1],
                          IndexError),
    "gather": (lambda x, i: x.gather(1, i.reshape(1, -1).expand(3, -1)), [3], None, [4], [-1],
               RuntimeError),
    "scatter_add": (lambda x, i: x.scatter_add(1, i.reshape(1, -1).expand(3, -1),
                                               torch.ones(3, i.numel(), dtype=x.dtype,
                                                          device=x.device)),
                    [2], None, [4], [-1], RuntimeError),
    "scatter": (lambda x, i: x.scatter(1, i.reshape(1, -1).expand(3, -1), -1.0), [2], None,
                [4], [-1], RuntimeError),
    "index_add": (lambda x, i: x.clone().index_add_(0, i, torch.ones(i.numel(), 4, dtype=x.dtype,
                                                                     device=x.device)),
                  [2, 2], None, [3], [-1], RuntimeError),
    "index_put_accumulate": (lambda x, i: x.index_put((i,), torch.ones(4, dtype=x.dtype,
                                                                       device=x.device),
                                                      accumulate=True),
                             [0], [-1, -3], [3], [-4], IndexError),
    "embedding": (lambda x, i: F.embedding(i, x), [2, 0], None, [3], [-1], IndexError),
    "take": (lambda x, i: torch.take(x, i), [11, 0], [-12, -1], [12], [-13], IndexError),
    "index_fill": (lambda x, i: x.index_fill(1, i, -1.0), [0, 3], [-1], [4], [-5], IndexError),
}
KNOWN_ONLY = {  # a computed index goes to the fallback (which write wins is eager's loop)
    "index_copy": (lambda x, i: x.index_copy(0, i, torch.ones(i.numel(), 4, dtype=x.dtype,
                                                               device=x.device)),
                   [2, 0], None, [3], [-1], IndexError),
}


def _lazy_index(values, computed):
    i = torch.tensor(values)
    return (i + 1).to("lazy") - 1 if computed else i.to("lazy")


@pytest.mark.parametrize("op", list(KNOWN_ONLY))
def test_index_copy_keeps_eagers_range_rule(torch_backend, op):
    call, good, _, big, small, error = KNOWN_ONLY[op]
    x = _x()
    lr.metrics.reset()
    assert_same(call(x.to("lazy"), _lazy_index(good, False)), call(x, torch.tensor(good)))
    _no_fallback()
    for bad in (big, small):
        with pytest.raises(error):
            call(x, torch.tensor(bad))
        with pytest.raises(error, match=rf"{op}\(\): index {bad[0]} is out of bounds"):
            call(x.to("lazy"), _lazy_index(bad, False))


@pytest.mark.parametrize("op", list(RULES))
def test_each_index_op_keeps_eagers_range_rule(torch_backend, op):
    """Good and (where eager wraps them) negative indices compute as eager; an
    index out of range is eager's error class, with the torch op and the bad
    index in the message: at the call when known, at the barrier (naming the
    user's line) when the graph computes it; never lazyrt's take_along_axis."""
    call, good, negative, big, small, error = RULES[op]
    x = _x()
    lr.metrics.reset()
    for ok in [good] + ([negative] if negative else []):
        for computed in (False, True):
            assert_same(call(x.to("lazy"), _lazy_index(ok, computed)), call(x, torch.tensor(ok)))
    name = op.split("_dim")[0].replace("_accumulate", "")
    for bad in (big, small):
        with pytest.raises(error):
            call(x, torch.tensor(bad))
        with pytest.raises(error, match=rf"{name}\(\): index {bad[0]} is out of bounds") as known:
            call(x.to("lazy"), _lazy_index(bad, False))
        out = call(x.to("lazy"), _lazy_index(bad, True))   # not known yet: recorded
        with pytest.raises(error, match=rf"{name}\(\): index {bad[0]} is out of bounds.*"
                                        rf"{__file__}") as barrier:
            out.cpu()
        for caught in (known, barrier):
            assert "take_along_axis" not in str(caught.value)
            assert "scatter_add" not in str(caught.value) or name == "scatter_add"
        lt.mark_step()   # raised once: the next barrier is clean
    _no_fallback()


def test_index_add_refuses_a_negative_index_as_eager():
    """The issue's case: ``index_add_`` with -1 wrote the last row (torch's
    decomposition into ``index_put``, which wraps)."""
    x = torch.zeros(3, 2)
    with pytest.raises(RuntimeError, match=r"index_add\(\): index -1 is out of bounds"):
        x.to("lazy").index_add_(0, torch.tensor([-1]).to("lazy"), torch.ones(1, 2).to("lazy"))


def test_index_errors_at_the_barrier_from_a_sampling_index(torch_backend):
    """An embedding of indices the graph computes (``argmax``), a bad one at the
    barrier: IndexError naming ``embedding``, not lazyrt's internal function."""
    emb = torch.randn(3, 2)
    logits = torch.tensor([[0.0, 9.0], [1.0, 0.0]])
    idx = logits.to("lazy").argmax(-1) * 3                      # [3, 0]: 3 is out of range
    out = F.embedding(idx, emb.to("lazy"))
    with pytest.raises(IndexError, match=r"embedding\(\): index 3 is out of bounds") as caught:
        lt.mark_step()
    assert "take_along_axis" not in str(caught.value)
    del out


def test_size_zero_axes_follow_eager(torch_backend):
    x = torch.zeros(3, 0)
    empty = torch.zeros(0, dtype=torch.long)
    assert_same(x.to("lazy")[:, empty.to("lazy")], x[:, empty])
    with pytest.raises(IndexError):
        x[:, torch.tensor([0])]
    with pytest.raises(IndexError, match=r"index\(\): index 0 is out of bounds"):
        x.to("lazy")[:, torch.tensor([0]).to("lazy")]


# --- multinomial -------------------------------------------------------------------------------

def test_multinomial_draws_by_the_probabilities(torch_backend):
    """Frequencies of 20000 draws within 4 standard errors of the probabilities;
    zero-probability categories are never drawn; one graph, no fallback."""
    torch.manual_seed(0)
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 0.0]])
    lr.metrics.reset()
    draws = torch.multinomial(p.to("lazy") * 2, 20000, replacement=True).cpu()
    _no_fallback()
    assert draws.shape == (2, 20000) and draws.dtype == torch.int64
    freq = torch.stack([torch.bincount(r, minlength=4) for r in draws]).double() / 20000
    se = (p * (1 - p) / 20000).sqrt()
    assert ((freq - p).abs() <= 4 * se + 1e-12).all(), freq
    one = torch.multinomial(torch.tensor([0.2, 0.0, 0.8]).to("lazy"), 1)
    assert one.shape == (1,) and one.item() in (0, 2)


def test_multinomial_without_replacement_draws_distinct_categories(torch_backend):
    torch.manual_seed(1)
    p = torch.tensor([[0.5, 0.0, 0.25, 0.25, 1e-3]] * 3)
    lr.metrics.reset()
    out = torch.multinomial(p.to("lazy"), 3).cpu()
    _no_fallback()
    for row in out.tolist():
        assert len(set(row)) == 3 and 1 not in row
    # more draws than categories with a chance: the others follow in index order, as eager
    few = torch.tensor([[0.0, 1.0, 0.0]])
    assert torch.multinomial(few.to("lazy"), 2).tolist() == torch.multinomial(few, 2).tolist()
    # the first draw of a race follows the probabilities too
    first = torch.multinomial(p[:1].expand(4000, 5).to("lazy"), 2)[:, 0].cpu()
    freq = torch.bincount(first, minlength=5).double() / 4000
    assert abs(freq[0] - 0.5 / 1.001) < 0.04 and freq[1] == 0


@pytest.mark.parametrize("probs, samples, replacement, message", [
    ([[0.5, -0.1]], 1, True, "inf.*nan.*< 0"),
    ([[0.5, float("nan")]], 1, True, "inf.*nan.*< 0"),
    ([[0.0, 0.0]], 1, True, "sum of probabilities <= 0"),
])
def test_multinomial_refuses_what_eager_refuses(torch_backend, probs, samples, replacement,
                                                 message):
    p = torch.tensor(probs)
    with pytest.raises(RuntimeError, match=message):
        torch.multinomial(p, samples, replacement)
    with pytest.raises(RuntimeError, match=message):                  # known: at the call
        torch.multinomial(p.to("lazy"), samples, replacement)
    out = torch.multinomial(p.to("lazy") * 1, samples, replacement)   # computed: at the barrier
    with pytest.raises(RuntimeError, match=rf"{message}.*{__file__}"):
        out.cpu()


# --- a GPT-style sampling loop records without a barrier per token --------------------------

class TinyLM(torch.nn.Module):
    def __init__(self, vocab=11, dim=8, block=6):
        super().__init__()
        self.block = block
        self.wte, self.wpe = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(block, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = torch.tanh(self.wte(idx) + self.wpe(pos))
        return self.head(x[:, [-1], :])   # nanoGPT's inference-time last position


def generate(model, idx, tokens, top_k):
    """karpathy/nanoGPT's ``generate``, its steps as written there."""
    for _ in range(tokens):
        idx_cond = idx if idx.size(1) <= model.block else idx[:, -model.block:]
        logits = model(idx_cond)[:, -1, :]
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("Inf")
        probs = F.softmax(logits, dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
    return idx


def test_sampling_loop_records_without_a_barrier_per_token(torch_backend):
    torch.manual_seed(0)
    model = lt.lazy(TinyLM().eval())
    lr.metrics.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)   # a fallback would fail here
        with torch.no_grad():
            out = generate(model, torch.zeros(2, 1, dtype=torch.long).to("lazy"), 8, top_k=3)
        tokens = out.cpu()
    snap = lr.metrics.snapshot()
    assert snap["fallbacks"] == {}
    assert snap["graphs_executed"] == 1, snap   # the whole loop: one graph, at .cpu()
    assert tokens.shape == (2, 9) and ((tokens >= 0) & (tokens < 11)).all()
    # top-k: every sampled token is among the 3 most likely at its step
    with torch.no_grad():
        cpu = TinyLM()
        cpu.load_state_dict(lt.to_cpu(model.state_dict()))
        for t in range(1, 9):
            ctx = tokens[:, max(0, t - cpu.block):t]
            top = torch.topk(cpu(ctx)[:, -1, :], 3).indices
            assert (top == tokens[:, t:t + 1]).any(-1).all()


def test_searchsorted_bucketize_narrow_copy_and_addmv_are_native(torch_backend):
    torch.manual_seed(0)
    seq = torch.sort(torch.randn(10)).values
    x = torch.randn(3, 5)
    x[0, 0] = seq[3]  # a tie: right or left of it
    lr.metrics.reset()
    for right in (False, True):
        for i32 in (False, True):
            assert_same(torch.searchsorted(seq.to("lazy"), x.to("lazy"), right=right,
                                           out_int32=i32),
                        torch.searchsorted(seq, x, right=right, out_int32=i32))
            assert_same(torch.bucketize(x.to("lazy"), seq.to("lazy"), right=right,
                                        out_int32=i32),
                        torch.bucketize(x, seq, right=right, out_int32=i32))
    assert_same(torch.searchsorted(seq.to("lazy"), x.to("lazy"), side="right"),
                torch.searchsorted(seq, x, side="right"))
    for dim, start, length in [(0, 1, 2), (1, -3, 3), (1, -2, 2), (0, 0, 0)]:
        assert_same(torch.narrow_copy(x.to("lazy"), dim, start, length),
                    torch.narrow_copy(x, dim, start, length))
    b, m, v = torch.randn(3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64), \
        torch.randn(5, dtype=torch.float64)
    assert_same(torch.addmv(b.to("lazy"), m.to("lazy"), v.to("lazy"), beta=0.5, alpha=2),
                torch.addmv(b, m, v, beta=0.5, alpha=2), rtol=1e-14, atol=1e-14)
    _no_fallback()
