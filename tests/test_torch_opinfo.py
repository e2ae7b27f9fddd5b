"""Every native aten lowering on PyTorch's own OpInfo sample inputs
(``op_db``), against eager: values, dtypes and shapes, with no fallback.
float16 samples are bit-equal too (eager's opmath rule, ``lazyrt.torch.operands``),
but for the op in ``HALF_ULPS``, where eager's own algorithm differs.

CI runs a fixed sample (the first samples of each op and dtype);
``LAZYRT_TORCH_OPINFO=all`` runs every sample input.
"""
import os

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import lazyrt as lr
import lazyrt.torch as lt
from conftest import restore_hypothesis_profile
from lazyrt.torch.registry import LOWERINGS
from lazyrt.torch.testing import assert_same

restore_hypothesis_profile()  # the op_db import loaded torch's profile

SAMPLES_PER_CASE = None if os.environ.get("LAZYRT_TORCH_OPINFO") == "all" else 2
DTYPES = (torch.bool, torch.int64, torch.float16, torch.float32, torch.float64)
#: float16 ops compared within one float16 ulp, with why eager's bits cannot be had
#: (every other float16 sample is bit-equal; test_torch_half.py has larger inputs)
HALF_ULPS = {
    # eager's kernel rounds its own way (its sum(grad * out) held in float16);
    # torch's decomposition, which lazyrt runs, computes in float32
    "_softmax_backward_data": "eager's float16 kernel",
}
#: OpInfos whose result is uninitialized memory in eager (nothing to compare)
UNINITIALIZED = {"empty_like", "new_empty", "new_empty_strided"}
#: OpInfo variants that reach overloads without a native lowering (they decompose or
#: fall back, and are not what this file checks)
NOT_NATIVE: set = set()
#: lowerings that take some forms and leave the rest to the counted fallback
#: (their lowerings say which: indexing.py, fmod of floats): their samples must match
#: eager either way
PARTIAL = {"gather", "scatter_add", "scatter", "index_put", "fmod", "index_add", "index",
           "embedding", "nn.functional.embedding", "index_copy", "index_fill", "take", "addmv",
           "searchsorted", "bucketize", "narrow_copy"}


def _lowered_names():
    names = {str(k).split(".")[1] for k in LOWERINGS}
    return names | {f"nn.functional.{n}" for n in names}


def _full_name(o):
    return o.name + ("." + o.variant_test_name if o.variant_test_name else "")


OPS = [o for o in op_db if o.name in _lowered_names() and o.name not in UNINITIALIZED
       and _full_name(o) not in NOT_NATIVE]
CASES = [pytest.param(o, d, id=f"{_full_name(o)}-{str(d)[6:]}")
         for o in OPS for d in DTYPES if d in o.supported_dtypes("cpu")]


def _lazy(x):
    return x.to("lazy") if isinstance(x, torch.Tensor) else x


def _tolerance(dtype):
    return {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12)}.get(dtype, (0, 0))


def _half_ulps(got, want):
    """``got`` within one float16 ulp of ``want`` (what ``HALF_ULPS`` allows)."""
    got, want = lt.to_cpu(got).float(), want.float()
    ulp = torch.finfo(torch.float16).eps * want.abs().clamp(min=2.0 ** -14)
    close = ((got - want).abs() <= ulp) | (got == want) | (got.isnan() & want.isnan())
    assert close.all(), (got, want)


@pytest.fixture(scope="module")
def oracle():
    """The numpy backend: what is checked here is each lowering, not the kernels
    (the native suite checks every backend against it)."""
    lr.sync()
    with lr.backend("numpy"):
        yield
        lr.sync()


@pytest.mark.parametrize("op,dtype", CASES)
def test_lowering_matches_eager_on_opinfo_samples(oracle, op, dtype):
    samples = op.sample_inputs("cpu", dtype, requires_grad=False)
    for i, sample in enumerate(samples):
        if SAMPLES_PER_CASE is not None and i >= SAMPLES_PER_CASE:
            break
        try:
            want = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - a sample eager itself refuses: nothing to match
            continue
        lr.metrics.reset()
        got = op(tree_map(_lazy, sample.input), *tree_map(_lazy, sample.args),
                 **tree_map(_lazy, sample.kwargs))
        fallbacks = lr.metrics.snapshot()["fallbacks"]
        assert fallbacks == {} or op.name in PARTIAL, (sample, fallbacks)
        if op.name == "sort" and not sample.kwargs.get("stable"):
            _check_unstable_sort(sample, got, want)
            continue
        if op.name == "topk":
            _check_topk(sample, got, want)
            continue
        got_leaves, _ = tree_flatten(got)
        want_leaves, _ = tree_flatten(want)
        assert len(got_leaves) == len(want_leaves)
        for g, w in zip(got_leaves, want_leaves):
            if isinstance(w, torch.Tensor) and w.dtype == torch.float16 \
                    and _full_name(op) in HALF_ULPS:
                assert g.dtype == w.dtype and g.shape == w.shape
                _half_ulps(g, w)
            elif isinstance(w, torch.Tensor):
                rtol, atol = _tolerance(w.dtype)
                assert_same(g, w, rtol=rtol, atol=atol)
            else:
                assert g == w


def _check_unstable_sort(sample, got, want):
    """An unstable sort may order ties either way (eager's own order changes with
    size): the values must match, and the indices must pick them from the input."""
    assert_same(got[0], want[0])
    dim = sample.args[0] if sample.args else sample.kwargs.get("dim", -1)
    index = got[1].cpu()
    x = sample.input
    picked = x if x.dim() == 0 else torch.take_along_dim(x, index, dim)
    torch.testing.assert_close(picked, want[0], rtol=0, atol=0, equal_nan=True)


def _check_topk(sample, got, want):
    """``topk`` orders ties as it likes (eager's order for them is unspecified): the
    values must match, and the indices must pick them from the input."""
    assert_same(got[0], want[0])
    args = list(sample.args) + [None] * 2
    dim = args[1] if args[1] is not None else sample.kwargs.get("dim", -1)
    x = sample.input
    picked = x if x.dim() == 0 else torch.take_along_dim(x, got[1].cpu(), dim)
    torch.testing.assert_close(picked, want[0], rtol=0, atol=0, equal_nan=True)
