"""Plans on disk (lazyrt/plan_cache.py): a new process that meets a graph it
planned before loads the plan; an entry that is corrupt, or does not fit the
graph, is planned again and rewritten, never trusted."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import plan_cache, planner
from lazyrt._capture import capture
from lazyrt.graph import Graph
from lazyrt.planner import Capabilities

needs_c = pytest.mark.skipif("c" not in lr.available_backends(),
                             reason="the C backend needs a C compiler")

CHILD = r"""
import json, sys
import numpy as np
import lazyrt as lr
from lazyrt import plan_cache
from lazyrt.planner import fusion
planned = []
run = fusion._Planner.run
fusion._Planner.run = lambda self: planned.append(1) or run(self)
lr.set_backend("c")
x = lr.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
y = lr.exp(x - x.max(axis=1, keepdims=True))
outs = [(y / y.sum(axis=1, keepdims=True)).numpy().tolist(), (x.T * 2).sum(axis=0).numpy().tolist()]
print(json.dumps({"planned": len(planned), "outs": outs, **plan_cache.counters}))
"""


def run_child(cache_dir, **env):
    env = dict(os.environ, LAZYRT_CACHE_DIR=str(cache_dir), **env)
    for k in ("LAZYRT_DEBUG", "LAZYRT_DUMP_DIR", "LAZYRT_BACKEND"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def plan_files(cache_dir):
    return sorted((cache_dir / "plans").glob("*.plan"))


@needs_c
def test_a_new_process_loads_the_plan_of_a_graph_it_planned_before(tmp_path):
    first = run_child(tmp_path)
    assert first["planned"] >= 1 and first["written"] == first["planned"]
    assert first["hits"] == 0
    files = plan_files(tmp_path)
    assert len(files) == first["written"]
    second = run_child(tmp_path)
    assert second["planned"] == 0 and second["hits"] == first["written"]
    assert second["outs"] == first["outs"]
    assert plan_files(tmp_path) == files


@needs_c
def test_a_corrupt_plan_is_planned_again_and_rewritten(tmp_path):
    first = run_child(tmp_path)
    entries = plan_files(tmp_path)
    good = {p: p.read_bytes() for p in entries}
    broken = entries[0]
    data = bytearray(good[broken])
    data[-5] ^= 0xFF  # one flipped byte in the body: the checksum no longer matches
    broken.write_bytes(bytes(data))
    second = run_child(tmp_path)
    assert second["rejected"] == 1 and second["planned"] == 1
    assert second["outs"] == first["outs"]
    assert broken.read_bytes() == good[broken]  # written anew, whole
    third = run_child(tmp_path)
    assert third["planned"] == 0 and third["rejected"] == 0


@needs_c
def test_the_plan_cache_can_be_turned_off(tmp_path):
    got = run_child(tmp_path, LAZYRT_PLAN_CACHE="0")
    assert got["planned"] >= 1 and got["written"] == 0
    assert not plan_files(tmp_path)


# --- in process: what a loaded entry must be ------------------------------------

def _graph(*tensors) -> Graph:
    return Graph.from_capture(capture([t._node for t in tensors]))


@pytest.fixture
def plans(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYRT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LAZYRT_PLAN_CACHE", raising=False)
    return plan_cache.Store("c")


CAPS = Capabilities(matmul_epilogue=True, matmul_engine="a Triton matmul kernel")


def test_a_stored_plan_comes_back_equal_with_its_graph(plans):
    x = lr.tensor(np.ones((4, 8), np.float32))
    w = lr.tensor(np.ones((8, 3), np.float32))
    g = _graph(lr.tanh(x @ w + 1.0).sum(axis=1), lr.cumulative_sum(x, axis=1), x.T * 2)
    made = planner.plan(g, CAPS)
    plans.save(g, CAPS, made)
    got = plans.load(g, CAPS)
    assert got == made and got.graph is g
    assert got.describe() == made.describe()
    assert plans.load(g, Capabilities()) is None  # other capabilities: another entry


def test_a_plan_that_does_not_fit_the_graph_is_not_trusted(plans, tmp_path):
    x = lr.tensor(np.ones((4, 8), np.float32))
    g = _graph(x * 2 + 1)
    other = _graph(lr.tensor(np.ones((5, 8), np.float32)).sum(axis=0))
    # the other graph's plan under this graph's name, with a checksum it matches:
    # a key collision, or an entry written by someone else
    name = plan_cache.entry_name("c", g, CAPS)
    plan_cache.folder().write(name, plan_cache._encode(planner.plan(other, CAPS)))
    before = dict(plan_cache.counters)
    assert plans.load(g, CAPS) is None
    assert plan_cache.counters["rejected"] == before["rejected"] + 1


def test_an_entry_is_read_only_from_a_folder_no_one_else_can_write(plans, tmp_path):
    x = lr.tensor(np.ones((4, 8), np.float32))
    g = _graph(x * 2 + 1)
    plans.save(g, CAPS, planner.plan(g, CAPS))
    assert plans.load(g, CAPS) is not None
    os.chmod(tmp_path / "plans", 0o777)
    try:
        assert plans.load(g, CAPS) is None  # anyone could have put it there
    finally:
        os.chmod(tmp_path / "plans", 0o700)


def test_a_plan_made_with_another_policy_is_neither_kept_nor_loaded(plans, tmp_path):
    class Apart(planner.FusionPolicy):
        def merge_siblings(self, first, second):
            return False

    x = lr.tensor(np.ones((4, 8), np.float32))
    g = _graph(x.sum(axis=1), x.max(axis=1))
    with planner.plan_store(plans):
        merged = planner.plan(g, CAPS)
        assert len(merged.kernels) == 1
        apart = planner.plan(g, CAPS, Apart())
    assert len(apart.kernels) == 2  # not the stored plan of the default policy
    assert len(list((tmp_path / "plans").glob("*.plan"))) == 1


def test_a_loaded_plan_names_the_lines_of_the_graph_it_is_loaded_for(plans):
    x = lr.tensor(np.ones((4, 8), np.float32))
    w = lr.tensor(np.ones((8, 8), np.float32))

    def graph():  # recorded on these lines, then on the same lines again
        return _graph(lr.tanh(x @ w + 1.0), (x * 3).sum(axis=1))

    here = graph()
    plans.save(here, CAPS, planner.plan(here, CAPS))
    there = (lambda: _graph(lr.tanh(x @ w + 1.0), (x * 3).sum(axis=1)))()
    assert there.key == here.key
    got = plans.load(there, CAPS)
    fresh = planner.plan(there, CAPS)
    assert got.describe() == fresh.describe()
    assert [s.comment for s in got.kernels] == [s.comment for s in fresh.kernels]
    def epilogue(the_plan):
        (step,) = [s for s in the_plan.steps if getattr(s, "epilogue", None) is not None]
        return step.epilogue.comment

    assert epilogue(got) == epilogue(fresh) != epilogue(planner.plan(here, CAPS))


def test_an_entry_naming_anything_but_a_plan_is_not_loaded(plans):
    import hashlib
    import pickle
    x = lr.tensor(np.ones((4, 8), np.float32))
    g = _graph(x * 2 + 1)
    body = pickle.dumps(os.getcwd)  # a checksum that matches, of a callable
    data = plan_cache.HEADER + hashlib.sha256(body).hexdigest().encode() + b"\n" + body
    plan_cache.folder().write(plan_cache.entry_name("c", g, CAPS), data)
    assert plans.load(g, CAPS) is None
