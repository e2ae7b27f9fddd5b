"""One rule for "the user's line" (:mod:`lazyrt._frames`): the recorder, the
metrics, the torch front-end's ``user_frame``, performance warnings and
``lazyrt explain``'s barrier origin all name the same frame.

The probes call through functions compiled with file names in torch's folder
and in lazyrt's (no file behind them), so the innermost frame that is the
user's is this test's line."""
from __future__ import annotations

import inspect
import os
import warnings

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import _frames, _source_lines, explain
from lazyrt.backends import warn_performance
from lazyrt.errors import PerformanceWarning

LAZYRT_DIR = os.path.dirname(os.path.abspath(lr.__file__))


def _code_in(folder, source, name):
    """The function ``name`` of ``source``, compiled as if it lived in ``folder``."""
    ns = {}
    exec(compile(source, os.path.join(folder, "_test_frames_probe.py"), "exec"), ns)
    return ns[name]


def _line_here():
    frame = inspect.currentframe().f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


@pytest.fixture(scope="module")
def torch_dir():
    torch = pytest.importorskip("torch")
    import lazyrt.torch  # noqa: F401  (adds torch's folder to the rule)
    return os.path.dirname(os.path.abspath(torch.__file__))


def test_the_rule_knows_lazyrts_folders_and_torchs_not_its_neighbours(torch_dir):
    assert _frames.is_internal(os.path.join(LAZYRT_DIR, "runtime.py"))
    assert _frames.is_internal(os.path.join(torch_dir, "nn", "modules", "linear.py"))
    assert not _frames.is_internal(torch_dir + "vision" + os.sep + "models.py")
    assert not _frames.is_internal(os.path.join(LAZYRT_DIR, "demo.py"))  # a script
    assert not _frames.is_internal(__file__)
    assert _frames.is_lazyrt(os.path.join(LAZYRT_DIR, "torch", "tensor.py"))
    assert not _frames.is_lazyrt(os.path.join(torch_dir, "_tensor.py"))
    import lazyrt.codegen  # where a checkout keeps codegen/ beside lazyrt/, or inside it
    assert _frames.is_internal(os.path.abspath(lazyrt.codegen.__file__))


def test_every_user_of_the_rule_names_the_same_line(torch_dir):
    """This test -> a function of torch's folder -> one of lazyrt's -> each
    entry point: all five name this test's line."""
    import operator

    from lazyrt.torch.tensor import user_frame
    hop = _code_in(torch_dir, "def hop(fn, *a):\n    return fn(*a)\n", "hop")
    inner = _code_in(LAZYRT_DIR, "def inner(fn, *a):\n    return fn(*a)\n", "inner")
    x = lr.tensor(np.ones(3))
    got, want = {}, {}
    y = hop(inner, operator.mul, x, 2); want["recorder"] = _line_here()  # noqa: E702
    got["recorder"] = y._node.source
    code, offset = hop(inner, _source_lines.user_source); want["metrics"] = _line_here()  # noqa
    got["metrics"] = _source_lines.source_line(code, offset)
    # a frame's line moves on with it: read it while the frame is at the call
    line_of = _code_in(LAZYRT_DIR, "def line_of(fn):\n    f = fn()\n"
                       "    return f'{f.f_code.co_filename}:{f.f_lineno}'\n", "line_of")
    got["torch user_frame"] = hop(line_of, user_frame); want["torch user_frame"] = _line_here()  # noqa
    site, _ = hop(inner, explain.barrier_origin, 1); want["explain"] = _line_here()  # noqa
    got["explain"] = site
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hop(inner, warn_performance, "slow"); want["warn_performance"] = _line_here()  # noqa
    w = [w for w in caught if issubclass(w.category, PerformanceWarning)][0]
    got["warn_performance"] = f"{w.filename}:{w.lineno}"
    assert got == want


def test_a_fallback_forced_barrier_is_the_users_line_everywhere(torch_dir):
    """A torch fallback computes its inputs through torch's ``tree_map``: the
    barrier, the counted fallback, its warning and the nodes all name the user's
    line that called the op, not ``torch/utils/_pytree.py``."""
    import torch
    import lazyrt.torch as lt

    def helper(t):
        return torch.special.zeta(t, t)

    x = torch.rand(3).to("lazy") + 1.5
    lr.metrics.reset()
    with lr.debug.watch() as run, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        helper(x * 2)
        line = f"{__file__}:{inspect.getsourcelines(helper)[1] + 1}"
    assert lr.metrics.snapshot()["fallbacks"] == {"aten.special_zeta.default": 1}, \
        "pick an op lazyrt.torch has no lowering for"
    assert lr.metrics.metrics.fallback_sites() == {("aten.special_zeta.default", line): 1}
    assert [(cause, site) for _, cause, site in run.explain().causes] == \
        [("fallback: aten.special_zeta.default", line)]
    warned = [w for w in caught if issubclass(w.category, PerformanceWarning)]
    assert [f"{w.filename}:{w.lineno}" for w in warned] == [line]
    lt.mark_step()
