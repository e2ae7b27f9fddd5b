"""``lazyrt explain`` on a PyTorch script: each barrier is counted under what
the user's line did (``.cpu()``, ``.item()``, ``bool()``, ``print``, a
fallback's op) at the user's line, never torch's (``_pytree.py``,
``_tensor_str.py``) or lazyrt's dispatch (``__torch_dispatch__``); a fallback
says that torch ran it. Run as a user would, in a subprocess (tests/test_cli.py's
pattern)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""\
    import torch
    import lazyrt.torch as lt

    model = lt.lazy(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()))
    x = torch.ones(2, 4).to("lazy")
    a = model(x).cpu()
    b = model(x).sum().item()
    if model(x).sum() > 0:
        pass
    c = bool(model(x).sum() > 0)
    print(model(x) * 2)
    z = torch.special.zeta(model(x) + 1, model(x) + 2)
    lt.mark_step()
    """)
#: cause -> line of SCRIPT
EXPECTED = {".cpu()": 6, ".item()": 7, "bool()": (8, 10), "print": 11,
            "fallback: aten.special_zeta.default": 12, "lt.mark_step()": 13}


def test_explain_names_the_users_trigger_and_line_through_torch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items()
           if k not in ("LAZYRT_DEBUG", "LAZYRT_DUMP_DIR", "LAZYRT_MAX_GRAPHS")}
    env["LAZYRT_CACHE_DIR"] = str(tmp_path / "cache")
    env["LAZYRT_BACKEND"] = "numpy"  # the causes do not depend on the backend
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "lazyrt.cli", "explain", str(script)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    barriers = out.split("barriers by cause:")[1].split("\n\n")[0]
    rows = re.findall(r"^\s+(\d+)  (.+?)\s+(\S+)$", barriers, re.M)
    got = {}
    for n, cause, site in rows:
        got.setdefault(cause, []).append(site)
    for cause, lines in EXPECTED.items():
        lines = lines if isinstance(lines, tuple) else (lines,)
        assert sorted(got.get(cause, [])) == sorted(f"train.py:{n}" for n in lines), out
    assert set(got) == set(EXPECTED), out
    for inside in ("__torch_dispatch__", "_pytree.py", "_tensor_str.py", "_tensor.py"):
        assert inside not in out, out
    assert re.search(r"aten\.special_zeta\.default\s+train\.py:12  "
                     r"\(run by torch, eagerly on the CPU\)", out), out
    assert "NumPy" not in out
    # the warning of the fallback points at the same line
    assert "train.py:12: PerformanceWarning: lazyrt.torch: aten.special_zeta.default" \
        in done.stderr


def test_without_the_users_source_the_cause_comes_from_the_aten_op():
    """Code with no source to read (``exec`` of a string; on Python 3.10 every
    line, which has no column positions) still names ``.item()`` and ``.cpu()``."""
    import torch

    import lazyrt as lr
    import lazyrt.torch as lt
    t = torch.ones(3).to("lazy")
    ns = {"t": t}
    code = compile("a = (t * 2).sum().item()\nb = (t + 1).cpu()\n", "<no source>", "exec")
    with lr.debug.watch() as run:
        exec(code, ns)
    assert sorted((cause, site) for _, cause, site in run.explain().causes) == \
        [(".cpu()", "<no source>:2"), (".item()", "<no source>:1")]
    lt.mark_step()
