"""An op that fails on its data at a barrier (an index out of range) owns its
error: the tensors computed from it raise it at every read, and every other
tensor, in that barrier and in later ones, computes as if it never happened."""
import gc
import sys

import numpy as np
import pytest
import torch

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt import runtime
from lazyrt.torch.testing import assert_same
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def no_jax(request):
    if "backend" in request.fixturenames and request.getfixturevalue("backend") == "jax":
        pytest.skip("jax words the error its own way: test_the_jax_backend_... below")


def _program():
    """A bad scatter, a tensor computed from it, and unrelated work with a gather."""
    x = lr.asarray(np.arange(6.0).reshape(3, 2))
    bad = lr.scatter_add(x, lr.asarray([[3, 0]]), lr.ones((1, 2)))  # _SCATTER_LINE
    after = bad * 2 + 1
    good = lr.take_along_axis(x, lr.asarray([[2, 0], [1, 1]]), axis=0) * 3
    return x, bad, after, good


_SCATTER_LINE = next(i for i, line in enumerate(open(__file__), 1)
                     if line.rstrip().endswith("# _SCATTER_LINE"))


_CUT_LINE = next(i for i, line in enumerate(open(__file__), 1)
                 if line.rstrip().endswith("# _CUT_LINE"))


def _raises(call, *, again, line=None):
    with pytest.raises(IndexError, match="scatter_add: index 3 is out of range") as caught:
        call()
    notes = getattr(caught.value, "__notes__", [])
    if sys.version_info >= (3, 11):  # the note names the line of the op that failed
        assert f"scatter_add ops were recorded at {__file__}:{line or _SCATTER_LINE}" in notes[0]
        assert any("raised again" in n for n in notes) == again, notes


def test_a_failed_op_raises_at_every_read_and_later_barriers_run_the_rest(backend):
    x, bad, after, good = _program()
    _raises(after.numpy, again=False)          # the first barrier that runs the bad op
    assert not bad.is_pending and not after.is_pending  # each holds the error
    assert good.is_pending                     # not asked for: still pending
    lr.sync()                                  # the rest: no error
    want = np.take_along_axis(np.arange(6.0).reshape(3, 2), np.array([[2, 0], [1, 1]]), 0)
    np.testing.assert_array_equal(good.numpy(), want * 3)
    for read in (bad.numpy, after.numpy, after.tolist, lambda: lr.sync(bad),
                 lambda: lr.sync(good, after)):
        _raises(read, again=True)              # each time it is read
    lr.sync(good)
    lr.sync()
    later = bad.sum() + x.sum()                # recorded after: it depends on the op too
    unrelated = x.sum() * 2
    _raises(lr.sync, again=True)               # the barrier that first computes it raises
    assert unrelated.item() == 30.0
    lr.sync()                                  # and no barrier after it does
    _raises(later.numpy, again=True)


def test_a_barrier_that_fails_computes_everything_that_does_not_depend_on_the_op(backend):
    x, bad, after, good = _program()
    fine = x.sum()
    _raises(lambda: lr.sync(after, good, fine), again=False)
    assert not good.is_pending and not fine.is_pending
    assert fine.item() == 15.0
    _raises(lambda: lr.sync(bad), again=True)


def test_each_failed_op_gives_its_own_error_to_what_depends_on_it(backend):
    x = lr.asarray(np.arange(6.0).reshape(3, 2))
    first = lr.take_along_axis(x, lr.asarray([[0, 7]]), axis=0) + 1
    second = lr.scatter_add(x, lr.asarray([[0, 5]]), lr.ones((1, 2))) * 2
    both = first.sum() + second.sum()
    with pytest.raises(IndexError):
        lr.sync()
    with pytest.raises(IndexError, match="take_along_axis: index 7"):
        first.numpy()
    with pytest.raises(IndexError, match="scatter_add: index 5"):
        second.numpy()
    with pytest.raises(IndexError, match="index 7"):  # the first failed input's
        both.numpy()


def test_a_bad_gather_fused_into_a_kernel_fails_only_its_consumers(backend):
    """On the compiled backends the gather runs inside its consumer's kernel, beside
    an unrelated output of the same shape (a sibling in the same kernel)."""
    x = lr.asarray(np.arange(12.0).reshape(4, 3))
    picked = lr.take_along_axis(x, lr.asarray([[0, 1, 4]]), axis=0)
    y = picked * 2 + x[:1]
    z = x[:1] - 1
    _raises_gather = pytest.raises(IndexError, match="take_along_axis: index 4")
    with _raises_gather:
        lr.sync(y, z)
    assert not z.is_pending                    # computed by the barrier that raised
    np.testing.assert_array_equal(z.numpy(), [[-1.0, 0.0, 1.0]])
    with pytest.raises(IndexError, match="take_along_axis: index 4"):
        y.numpy()


def test_failed_values_are_freed_with_their_tensors(backend):
    alive = runtime.FailedValue.alive
    _, bad, after, _ = _program()
    with pytest.raises(IndexError):
        after.numpy()
    assert runtime.FailedValue.alive > alive
    del bad, after
    gc.collect()
    assert runtime.FailedValue.alive == alive


def test_the_jax_backend_keeps_the_error_with_the_failed_op(caplog):
    """jax checks indices in a host callback: XLA's runtime error carries the message,
    raised at the barrier on the CPU (on a device, at the host read: the failed value
    is then the device array, which raises at every read by itself)."""
    if "jax" not in lr.available_backends():
        pytest.skip("jax backend unavailable")
    with lr.backend("jax"):
        x, bad, after, good = _program()
        with pytest.raises(Exception, match="scatter_add: an index is out of range"):
            after.numpy()
        lr.sync()
        lr.sync()
        assert good.numpy().shape == (2, 2)
        for read in (bad.numpy, after.numpy, lambda: (bad.sum() + 1).numpy()):
            with pytest.raises(Exception, match="scatter_add: an index is out of range"):
                read()
        lr.sync()
    caplog.clear()  # jax logs the callback's error with its traceback (frames: tensors)


def test_a_failed_scatter_does_not_fail_later_steps_of_lazyrt_torch(torch_backend):
    """The issue's program: a scatter_add whose index the graph computes raises eager's
    error (naming scatter_add) at the barrier, the user catches it, and mark_step() and
    unrelated reads then work."""
    base = torch.zeros(3).to("lazy")
    index = torch.tensor([0, 5]).to("lazy") * 1          # computed by the graph
    bad = base.scatter_add(0, index, torch.ones(2).to("lazy"))
    other = torch.arange(3.0).to("lazy") * 2
    with pytest.raises(RuntimeError, match=r"scatter_add\(\): index 5 is out of bounds"):
        bad.cpu()
    lt.mark_step()
    lt.mark_step()
    assert_same(other, torch.arange(3.0) * 2)
    assert_same(other + 1, torch.arange(3.0) * 2 + 1)


def test_a_known_bad_index_raises_at_the_call_and_records_nothing(torch_backend):
    """An index known when the op is recorded is checked there, as eager checks it:
    nothing is left to fail a later barrier."""
    base = torch.zeros(3).to("lazy")
    with pytest.raises(RuntimeError, match="index 5 is out of bounds"):
        base.scatter_add(0, torch.tensor([0, 5]).to("lazy"), torch.ones(2).to("lazy"))
    other = torch.arange(3.0).to("lazy") * 2
    lt.mark_step()
    assert_same(other, torch.arange(3.0) * 2)


def test_a_division_check_is_kept_when_its_barrier_fails_otherwise(torch_backend):
    """lazyrt.torch's deferred checks (an integer division by a zero the graph
    computes) are not lost when the barrier that computes them fails (here on a
    native op's bad scatter): the next one raises the division's error, once."""
    a = torch.arange(4).to("lazy")
    q = a // (a * 0)                             # ZeroDivisionError at the barrier
    bad = lr.scatter_add(lr.zeros((3, 1)), lr.asarray([[9]]), lr.ones((1, 1)))
    with pytest.raises(IndexError):
        lt.mark_step()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        lt.mark_step()
    lt.mark_step()
    assert_same(q, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(IndexError):
        bad.numpy()


def test_an_automatic_graph_cut_that_meets_a_failed_op_keeps_recording(backend):
    """A cut (the pending graph grew past the limit) that runs a bad op raises once,
    from the op that recorded past the limit; the loop's other tensors are computed
    and the next cuts run as usual."""
    default = lr.runtime._max_graph_nodes
    lr.set_max_graph_nodes(20)
    try:
        x = lr.asarray(np.arange(6.0).reshape(3, 2))
        bad = lr.scatter_add(x, lr.asarray([[3, 0]]), lr.ones((1, 2)))  # _CUT_LINE
        acc = x
        raised = 0
        for _ in range(60):
            try:
                acc = acc * 1.0 + 1.0
            except IndexError as exc:
                raised += 1
                if sys.version_info >= (3, 11):
                    assert any("automatic graph cut" in n for n in exc.__notes__)
        assert raised == 1
        assert not bad.is_pending
        lr.sync()
        # the statement the cut interrupted is lost, as with any error
        np.testing.assert_array_equal(acc.numpy(), np.arange(6.0).reshape(3, 2) + 59)
        _raises(bad.numpy, again=True, line=_CUT_LINE)
    finally:
        lr.sync()
        lr.set_max_graph_nodes(default)
