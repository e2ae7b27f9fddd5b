"""The planner's policy and its refusals: every FusionPolicy decision changes
the plan when changed, the backend's capabilities are an argument of
``plan``, and every fusion not taken is a Refusal with its reason, true for
the backend it was planned for."""
from __future__ import annotations

import numpy as np
import pytest

import lazyrt as lr
from lazyrt._capture import capture
from lazyrt.compile_record import format_record
from lazyrt.graph import Graph
from lazyrt.planner import Capabilities, FusionPolicy, KernelStep, MatmulStep, plan
from lazyrt.planner.schedule import DEPTH, EPILOGUE, LEGALITY, RECOMPUTE, SIBLING

C = Capabilities(matmul_epilogue=False, matmul_engine="BLAS")
TRITON = Capabilities(matmul_epilogue=True, matmul_engine="a Triton matmul kernel")


def plan_of(*outs, caps=C, policy=None):
    return plan(Graph.from_capture(capture([t._node for t in outs])), caps, policy)


def rand(*shape, seed=0):
    return lr.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def refused(p, kind=None):
    return [(r.kind, r.steps, r.reason) for r in p.refusals if kind in (None, r.kind)]


def deep_shared_chain():
    """A 90-op chain that three reductions need (two of them siblings)."""
    h = rand(8, 16)
    for _ in range(30):
        h = lr.tanh(h) * 1.01 + 0.1
    return h.sum(0), h.sum(1), h.max(0)


class Limited(FusionPolicy):
    max_recompute_ops = 24


class Shallow(FusionPolicy):
    max_fused_depth = 4


class NoSiblings(FusionPolicy):
    def merge_siblings(self, first, second):
        return False


class NoEpilogues(FusionPolicy):
    def fold_epilogue(self, epilogue):
        return False


# --- each decision matters -----------------------------------------------------------

def test_a_recompute_limit_stores_a_shared_chain_once():
    outs = deep_shared_chain()
    default = plan_of(*outs)
    assert len(default.kernels) == 2 and not refused(default, RECOMPUTE), default.describe()
    limited = plan_of(*outs, policy=Limited())
    assert len(limited.kernels) == 3, limited.describe()
    ((kind, steps, reason),) = refused(limited, RECOMPUTE)
    assert steps == (0, 1, 2)  # stored by step 0, read by both reduction kernels
    assert reason == ("2 kernels need it: recomputing its 90 ops in each costs more than "
                      "storing it (Limited.inline_shared)")
    (r,) = [r for r in limited.refusals if r.kind == RECOMPUTE]
    assert limited.graph.nodes[r.nodes[0]].op.name == "add"  # the chain's last op


def test_inline_shared_is_asked_with_kernels_and_ops():
    asked = []

    class Spy(FusionPolicy):
        def inline_shared(self, n_kernels, subtree_ops, read_bytes=0.0, value_bytes=0.0):
            asked.append((n_kernels, subtree_ops, read_bytes, value_bytes))
            return True

    plan_of(*deep_shared_chain(), policy=Spy())
    assert (2, 90, 512.0, 512) in asked  # one 8x16 float32 input read, one such value stored


def test_a_shared_value_of_many_inputs_is_stored_not_recomputed():
    """A residual stream: five full-size adds, read by three kernels. Each would
    read all six tensors again; stored, each reads one: the bytes decide."""
    parts = [rand(256, 256, seed=k) for k in range(6)]
    h = parts[0]
    for p in parts[1:]:
        h = h + p
    outs = (h.sum(1), h.max(1), (h * 2.0).sum(0))
    p = plan_of(*outs)
    ((kind, steps, reason),) = refused(p, RECOMPUTE)
    # 6 tensors of 256 kB read by 2 kernels (the row sum and max are one), against
    # one stored and read twice
    assert "(reading 1.57 MB) moves 1.05 MB more than storing it (262 kB)" in reason, reason
    assert len(steps) >= 2  # stored by one step, read by the others
    # one input: recomputing reads what storing would, so it is recomputed
    one = rand(256, 256) * 3.0 + 1.0
    assert not refused(plan_of(one.sum(1), one.max(1), (one * 2.0).sum(0)), RECOMPUTE)
    # small: the bytes saved are worth less than a launch
    small = [rand(16, 16, seed=k) for k in range(6)]
    h = sum(small[1:], small[0])
    assert not refused(plan_of(h.sum(1), h.max(1), (h * 2.0).sum(0)), RECOMPUTE)
    # and the values are right
    for got, want in zip(outs, _numpy_outs([np.asarray(t.numpy()) for t in parts])):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)


def _numpy_outs(parts):
    h = sum(parts[1:], parts[0])
    return h.sum(1), h.max(1), (h * 2.0).sum(0)


def test_a_depth_limit_stores_the_chain_every_few_ops():
    x = rand(4, 4)
    for _ in range(5):
        x = x * 2 + 1
    default, shallow = plan_of(x), plan_of(x, policy=Shallow())
    assert len(default.kernels) == 1 and not default.refusals
    assert len(shallow.kernels) == 2, shallow.describe()
    # the output is stored anyway: only the cut inside the chain refuses a fusion
    assert refused(shallow) == [
        (DEPTH, (0, 1), "a chain of 4 fused ops is stored before the next kernel continues it")]


def test_declined_siblings_run_as_two_loops_and_say_so():
    x = rand(64, 128)
    default = plan_of(x + 1, x * 2)
    assert len(default.kernels) == 1 and not default.refusals
    apart = plan_of(x + 1, x * 2, policy=NoSiblings())
    assert len(apart.kernels) == 2
    assert refused(apart) == [(SIBLING, (0, 1), "NoSiblings.merge_siblings declined")]


def test_a_declined_epilogue_leaves_the_matmul_alone_and_says_so():
    x, w, b = rand(8, 16), rand(16, 4, seed=1), rand(4, seed=2)
    y = lr.nn.gelu(x @ w + b)
    folded = plan_of(y, caps=TRITON)
    assert len(folded.steps) == 1 and folded.steps[0].epilogue is not None
    assert not folded.refusals
    apart = plan_of(y, caps=TRITON, policy=NoEpilogues())
    assert [type(s) for s in apart.steps] == [MatmulStep, KernelStep]
    assert refused(apart) == [(EPILOGUE, (0, 1), "NoEpilogues.fold_epilogue declined")]


# --- capabilities: an argument, and the reasons true per backend ------------------------

def test_only_a_backend_with_a_matmul_epilogue_folds_one():
    x, w = rand(8, 16), rand(16, 4, seed=1)
    y = lr.nn.relu(x @ w + 1)
    assert len(plan_of(y, caps=C).steps) == 2
    assert len(plan_of(y, caps=TRITON).steps) == 1


@pytest.mark.parametrize("two_consumers", [False, True])
def test_the_triton_plan_never_says_blas(two_consumers):
    x, w = rand(8, 16), rand(16, 4, seed=1)
    p = x @ w
    outs = (lr.nn.relu(p), p.sum(1)) if two_consumers else (lr.nn.relu(p + 1),)
    triton, c = plan_of(*outs, caps=TRITON), plan_of(*outs, caps=C)
    assert "BLAS" not in triton.describe()
    assert "a Triton matmul kernel" in triton.describe()
    assert "BLAS" in c.describe()


# --- exact refusal lists for known patterns -------------------------------------------

def test_a_matmul_feeding_two_consumers_refuses_exactly_this():
    x, w = rand(8, 16), rand(16, 4, seed=1)
    p = x @ w
    outs = (lr.nn.relu(p), p.sum(1))
    siblings = (SIBLING, (1, 2), "they reduce different axes [1] and []")
    assert refused(plan_of(*outs, caps=C)) == [
        (EPILOGUE, (0, 1, 2), "matmul runs in BLAS, which has no epilogue: the product is "
                              "stored and read back"), siblings]
    assert refused(plan_of(*outs, caps=TRITON)) == [
        (EPILOGUE, (0, 1, 2), "the product is read by 2 steps; an epilogue is one kernel"),
        siblings]


def test_a_reduction_whose_consumer_cannot_fuse_refuses_exactly_this():
    x = rand(4, 6)
    y = (x / x.sum(1, keepdims=True)).T.reshape(-1)
    p = plan_of(y)
    assert refused(p) == [
        (LEGALITY, (0, 1), "reduction input [4, 6] differs from the kernel domain [6, 4]"),
        (SIBLING, (0, 1), "they run over different domains [4, 6] and [6, 4]"),
        (LEGALITY, (1,), "reshape of a non-contiguous view needs a copy")]
    names = [[p.graph.nodes[i].op.name for i in r.nodes] for r in p.refusals]
    assert names == [["sum", "truediv"], ["sum", "permute"], ["permute", "reshape"]]


def test_operands_and_results_of_host_steps_are_refusals():
    x = rand(4, 4)
    p = plan_of(lr.concat([x, x * 2], axis=0).sum(0))
    assert refused(p) == [
        (LEGALITY, (0, 1), "operand of concat, which runs on the host"),
        (LEGALITY, (1, 2), "concat runs outside generated kernels")]


def _kind_cases():
    x, w = rand(8, 16), rand(16, 4, seed=1)
    p = x @ w
    chain = x
    for _ in range(5):
        chain = chain * 2 + 1
    return {RECOMPUTE: (deep_shared_chain(), Limited()),
            DEPTH: ((chain,), Shallow()),
            SIBLING: ((x + 1, x * 3), NoSiblings()),
            EPILOGUE: ((lr.nn.relu(p), p.sum(1)), None),
            LEGALITY: (((x / x.sum(1, keepdims=True)).T,), None)}


@pytest.mark.parametrize("kind", [RECOMPUTE, DEPTH, SIBLING, EPILOGUE, LEGALITY])
def test_every_refusal_kind_is_shown_with_its_reason(kind):
    outs, policy = _kind_cases()[kind]
    the_plan = plan_of(*outs, policy=policy)
    assert kind in {r.kind for r in the_plan.refusals}, the_plan.describe()
    text = the_plan.describe()
    shown = text.split("\nrefused:\n")[1].splitlines()
    assert len(shown) == len(the_plan.refusals)
    for r, line in zip(the_plan.refusals, shown):
        assert line.startswith(f"  {r.kind}: ") and line.endswith(r.reason), line
        assert all(0 <= k < len(the_plan.steps) for k in r.steps) and len(r.nodes) >= 2


# --- the compile record --------------------------------------------------------------

@pytest.mark.skipif("c" not in lr.available_backends(), reason="no C compiler")
def test_the_compile_record_lists_the_refusals_and_debug_level_3_shows_them():
    with lr.backend("c"):
        x, w = rand(8, 16), rand(16, 4, seed=1)
        p = x @ w
        outs = lr.nn.relu(p), p.sum(1)
        del p  # not an output: the matmul's product stays scratch
        lr.sync(*outs)
    record = lr.debug.last_record()
    assert record.fusion_refusals == record.plan.refusals
    assert [r.kind for r in record.fusion_refusals] == [EPILOGUE, SIBLING]
    text = format_record(record, 3)
    assert "refused:" in text and "matmul runs in BLAS, which has no epilogue" in text
    assert "refused:" not in format_record(record, 2)


# --- a product only read transposed is stored transposed ------------------------------

TRANSPOSING = Capabilities(matmul_epilogue=False, matmul_engine="BLAS",
                           matmul_transposed_out=True)


def _matmuls(p):
    return [s for s in p.steps if isinstance(s, MatmulStep)]


def test_a_product_read_only_through_transposes_is_stored_transposed():
    """A linear layer's weight gradient is ``(x^T @ g)^T``: the buffer holds the
    product's transpose, so the update kernel reads it contiguously."""
    x, g, w = rand(64, 30), rand(64, 20, seed=1), rand(20, 30, seed=2)
    new_w = w - 0.1 * (x.mT @ g).mT
    p = plan_of(new_w, caps=TRANSPOSING)
    (mm,) = _matmuls(p)
    assert mm.transposed and p.buffers[mm.out].shape == (20, 30)
    (kernel,) = p.kernels
    product = next(i for i in kernel.inputs if i.buffer == mm.out)
    assert product.index.strides == (1,)          # one contiguous run: coalesced to 1-D
    assert " transposed (BLAS)" in p.describe()
    # a backend that did not say it can: the product in its own layout
    (plain,) = _matmuls(plan_of(new_w, caps=C))
    assert not plain.transposed
    (triton,) = _matmuls(plan_of(new_w, caps=TRITON))
    assert not triton.transposed


def test_a_transposed_product_that_is_an_output_is_returned_as_a_strided_view():
    """torch's functionalization keeps a view's base alive, so the product is
    an output beside its transpose: both come back as views of one buffer."""
    x, g = rand(8, 6), rand(8, 5, seed=1)
    prod = x.mT @ g
    p = plan_of(prod, prod.mT + 1, caps=TRANSPOSING)
    (mm,) = _matmuls(p)
    assert mm.transposed
    assert p.outputs[0].buffer == mm.out and p.outputs[0].view.strides == (1, 6)
    if "c" in lr.available_backends():  # computed together, from that one buffer
        want = x.numpy().astype(np.float64).T @ g.numpy().astype(np.float64)
        with lr.backend("c"):
            prod = x.mT @ g
            plus = prod.mT + 1
            lr.sync(prod, plus)
        np.testing.assert_allclose(prod.numpy(), want, rtol=1e-5)
        np.testing.assert_allclose(plus.numpy(), want.T + 1, rtol=1e-5)


@pytest.mark.parametrize("case", ["also read as is", "no reader"])
def test_a_product_read_any_other_way_keeps_its_layout(case):
    x, g = rand(8, 6), rand(8, 5, seed=1)
    prod = x.mT @ g
    outs = {"also read as is": (prod.mT + 1, prod * 2),
            "no reader": (prod,)}[case]
    (mm,) = _matmuls(plan_of(*outs, caps=TRANSPOSING))
    assert not mm.transposed
