"""Every aten lowering of the lazy front-end, reached through
``torch.compile(backend="lazyrt")`` on PyTorch's OpInfo samples (the cases of
``test_torch_opinfo.py``), against eager: values, dtypes, shapes, no fallback (but
for the lowerings that leave some forms to it), and a replay of the recording on a
second draw of the same sample (new values, nothing recorded again).

CI runs a fixed sample: the first sample of each op and dtype on the ``numpy``
oracle (the lowerings), the first one of each float32 and int64 case on
``c`` (its parameter binding: scalars, views, dtypes); ``LAZYRT_TORCH_OPINFO=all``
runs every sample on both. A float16 result that differs from eager is compared
with ``aot_eager`` (the same graph, run by torch) where Dynamo rewrote the op.
"""
import itertools
import os

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

import lazyrt as lr
from lazyrt.torch.testing import assert_same
from test_torch_opinfo import CASES, HALF_ULPS, PARTIAL
from torch_compile_fixtures import CORE_BACKENDS, CountingBackend, fresh_dynamo, lazyrt_counts

assert fresh_dynamo  # the autouse fixture, imported by name

ALL = os.environ.get("LAZYRT_TORCH_OPINFO") == "all"
#: per backend: (samples per case, the dtypes it runs) in CI; None: all of them
PLAN = {"numpy": (None if ALL else 1, None),
        "c": (None if ALL else 1, None if ALL else {torch.float32, torch.int64})}


def _full_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _samples(op, dtype):
    n = max((PLAN[b][0] or 10**9) for b in CORE_BACKENDS)
    torch.manual_seed(0)  # the same values on every run, whichever tests ran before
    return list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), n))


def _drawn_again(tensors, seed):
    """New values for a replay, of the sample's own kind: each tensor's elements in
    another order (an index stays in range, a log's argument positive), with the same
    shape, dtype and strides; None where the strides cannot be had (an expanded view)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in tensors:
        again = torch.empty_like(t)
        if again.stride() != t.stride():
            return None
        flat = t.reshape(-1)
        again.copy_(flat[torch.randperm(flat.numel(), generator=gen)].view(t.shape))
        out.append(again)
    return out


def _split(sample):
    """The sample's tensors (the compiled function's inputs) and a way to put them
    back among its other arguments (constants of the compiled function)."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    others = [None if k in where else v for k, v in enumerate(leaves)]
    return [leaves[k] for k in where], (spec, where, others)


def _function(op, rebuild):
    spec, where, others = rebuild

    def fn(*tensors):
        leaves = list(others)
        for k, t in zip(where, tensors):
            leaves[k] = t
        x, args, kwargs = tree_unflatten(leaves, spec)
        return op(x, *args, **kwargs)
    # a code object of its own: Dynamo caches per code object, and each sample's
    # constants are guarded, so a shared one would pile up recompiles across samples
    fn.__code__ = fn.__code__.replace()
    return fn


@pytest.mark.parametrize("op,dtype", CASES)
def test_lowering_through_torch_compile_matches_eager(op, dtype):
    samples = _samples(op, dtype)
    for backend in CORE_BACKENDS:
        n, dtypes = PLAN[backend]
        if dtypes is None or dtype in dtypes:
            _check_samples(op, samples[:n], backend)


def _check_samples(op, samples, backend):
    reached = 0
    for k, sample in enumerate(samples):
        tensors, rebuild = _split(sample)
        fn = _function(op, rebuild)
        try:
            want = fn(*tensors)
        except Exception:  # noqa: BLE001 - a sample eager itself refuses: nothing to match
            continue
        counting = CountingBackend(backend)
        compiled = torch.compile(fn, backend=counting, dynamic=False)
        lr.metrics.reset()
        _check_against(op, sample, compiled(*tensors), want, fn, tensors)
        fallbacks = lr.metrics.snapshot()["fallbacks"]
        assert fallbacks == {} or op.name in PARTIAL, (sample, fallbacks)
        reached += counting.graphs > 0
        tensors2 = _drawn_again(tensors, seed=k)
        want2 = None if tensors2 is None else _eager_or_none(fn, tensors2)
        if want2 is None:
            continue
        graphs, before = counting.graphs, lazyrt_counts()
        _check_against(op, sample, compiled(*tensors2), want2, fn, tensors2)
        assert counting.graphs == graphs, "Dynamo compiled the second draw again"
        assert lazyrt_counts()["ops_recorded"] == before["ops_recorded"], "recorded again"
    assert reached or not samples, f"no sample of {_full_name(op)} reached {backend}"


def _eager_or_none(fn, tensors):
    try:
        return fn(*tensors)
    except Exception:  # noqa: BLE001 - eager refuses this draw
        return None


def _check_against(op, sample, got, want, fn, tensors):
    """``got`` matches eager, or, for a reduced-precision float, the same graph run
    by torch (``aot_eager``): Dynamo itself rewrites some ops (``addcdiv`` into
    ``div``, ``mul``, ``add``), each rounded to float16, where eager rounds once."""
    # the sample's input is its first tensor: a second draw's, for a replay
    x = tensors[0] if isinstance(sample.input, torch.Tensor) else sample.input
    try:
        _check(op, sample, x, got, want)
    except AssertionError:
        if not isinstance(sample.input, torch.Tensor) \
            or sample.input.dtype not in (torch.float16, torch.bfloat16):
            raise
        _check(op, sample, x, got,
               torch.compile(fn, backend="aot_eager", dynamic=False)(*tensors))


def _check(op, sample, x, got, want):
    if op.name == "sort" and not sample.kwargs.get("stable"):
        dim = sample.args[0] if sample.args else sample.kwargs.get("dim", -1)
        return _check_picked(x, got, want, dim)
    if op.name == "topk":
        args = list(sample.args) + [None] * 2
        dim = args[1] if args[1] is not None else sample.kwargs.get("dim", -1)
        return _check_picked(x, got, want, dim)
    got_leaves, want_leaves = tree_flatten(got)[0], tree_flatten(want)[0]
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        if not isinstance(w, torch.Tensor):
            assert g == w
        elif w.dtype == torch.float16 and _full_name(op) in HALF_ULPS:
            assert g.dtype == w.dtype and g.shape == w.shape
            ulp = torch.finfo(torch.float16).eps * w.float().abs().clamp(min=2.0 ** -14)
            assert ((g.float() - w.float()).abs() <= ulp).all(), (g, w)
        else:
            rtol, atol = {torch.float32: (1e-5, 1e-5),
                          torch.float64: (1e-12, 1e-12)}.get(w.dtype, (0, 0))
            assert_same(g, w, rtol=rtol, atol=atol)


def _check_picked(x, got, want, dim):
    """Ties may come in either order: the values must match, and the indices must
    pick them from the input ``x``."""
    assert_same(got[0], want[0])
    picked = x if x.dim() == 0 else torch.take_along_dim(x, got[1], dim)
    torch.testing.assert_close(picked, want[0], rtol=0, atol=0, equal_nan=True)
