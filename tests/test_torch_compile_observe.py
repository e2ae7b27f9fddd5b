"""What the lazyrt tools show of ``torch.compile(backend="lazyrt")``: the same as of
the lazy front-end. Each recorded op names the user's line and its FX node; the
watch the ``lazyrt`` CLI reads sees each program compiled once, then replayed."""
import warnings

import pytest
import torch

import lazyrt as lr
import lazyrt.torch as lt
from lazyrt.torch import fx_program
from torch_compile_fixtures import CORE_BACKENDS, fresh_dynamo  # noqa: F401


def scaled_softplus(x):
    y = torch.nn.functional.softplus(x * 3.0)  # the line every recorded op names
    return y.sum()


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_recorded_ops_name_the_user_line_and_the_fx_node(backend):
    line = scaled_softplus.__code__.co_firstlineno + 1
    with lr.debug.watch() as run:
        compiled = torch.compile(scaled_softplus, backend=lt.backend(backend))
        compiled(torch.randn(6))
    text = run.graphs[-1].record.graph_text
    assert f"test_torch_compile_observe.py:{line} (FX node " in text, text


@pytest.mark.parametrize("backend", CORE_BACKENDS)
def test_the_watch_sees_one_compile_then_replays(backend):
    compiled = torch.compile(lambda x: (x.exp() + 1).log().sum(),
                             backend=lt.backend(backend))
    with lr.debug.watch() as run:
        for _ in range(4):
            compiled(torch.randn(5))
    assert len(run.graphs) == 1 and run.graphs[0].runs == 4
    assert run.barriers == 4
    assert "1 distinct graph" in str(run.explain())


def test_an_eager_node_warns_once_at_the_user_line(monkeypatch):
    monkeypatch.setattr(fx_program, "_warned", set())  # once per process: start afresh
    def f(x):
        return torch.special.bessel_j0(x) + 1  # no lazyrt lowering: runs eagerly
    line = f.__code__.co_firstlineno + 1
    compiled = torch.compile(f, backend=lt.backend("numpy"))
    before = lr.metrics.snapshot()["fallbacks"].get("aten.special_bessel_j0.default", 0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(4)
            torch.testing.assert_close(compiled(x), torch.special.bessel_j0(x) + 1)
    ours = [w for w in seen if "runs eagerly between lazyrt programs" in str(w.message)]
    assert len(ours) == 1 and ours[0].lineno == line, [(w.filename, w.lineno) for w in ours]
    after = lr.metrics.snapshot()["fallbacks"]["aten.special_bessel_j0.default"]
    assert after - before == 3  # counted on every call, the recording's included


def test_allow_eager_false_names_the_op_its_node_and_line():
    def f(x):
        return torch.special.bessel_j0(x) * 2  # no lazyrt lowering
    line = f.__code__.co_firstlineno + 1
    compiled = torch.compile(f, backend=lt.backend("numpy", allow_eager=False))
    with pytest.raises(Exception, match=rf"special_bessel_j0.*FX node .*"
                                        rf"test_torch_compile_observe.py:{line}.*allow_eager"):
        compiled(torch.randn(3))
