"""The installed wheel works on its own: run by ``make wheel-check`` with the
Python of a fresh virtual environment holding only the wheel and its
dependencies (torch, numpy, rich), from a folder outside the checkout.

It checks that ``lazyrt`` comes from that environment (not the checkout), that
the native API computes on the ``c`` backend, that ``lazyrt.torch`` runs a
training step of a tiny model on lazy tensors as eager does, and that
``torch.compile(backend="lazyrt")`` finds lazyrt by name, and ``lazyrt doctor`` passes. Not a pytest module (pytest collects ``test_*.py``).
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys

import numpy as np


def check_the_package_is_the_installed_one():
    import lazyrt
    where = os.path.realpath(lazyrt.__file__)
    assert where.startswith(os.path.realpath(sys.prefix) + os.sep), \
        f"lazyrt imported from {where}, not from this environment ({sys.prefix})"
    import lazyrt.codegen
    import lazyrt.kernels
    kernels = os.path.dirname(lazyrt.kernels.__file__)
    for data in ("lazyrt_math.h", "lazyrt_gemm.c"):  # package data the C backend reads
        assert os.path.isfile(os.path.join(kernels, data)), f"the wheel lacks {data}"
    print(f"lazyrt {lazyrt.__version__} from {os.path.dirname(where)}")


def check_the_native_api_on_c():
    import lazyrt as lr
    assert "c" in lr.available_backends(), lr.available_backends()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    w = rng.standard_normal((48, 16)).astype(np.float32)
    with lr.backend("c"):
        x = lr.tensor(a)
        y = lr.nn.softmax(lr.nn.relu(x @ lr.tensor(w)) * 0.5 + 1.0, axis=-1)
        got = y.sum(axis=0).numpy()
    h = np.maximum(a @ w, 0) * np.float32(0.5) + np.float32(1.0)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    want = (e / e.sum(axis=-1, keepdims=True)).sum(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert lr.debug.last_record().kernels, "the c backend compiled no kernel"
    print("native API on c: ok")


def check_a_torch_training_step():
    import torch
    import lazyrt.torch as lt
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = lt.lazy(copy.deepcopy(eager))
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    losses = []
    for m, to in ((eager, lambda t: t), (model, lambda t: t.to("lazy"))):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(m(to(x)), to(y))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if m is model:
                lt.mark_step()
            losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses[2:]), torch.tensor(losses[:2]))
    for p, q in zip(lt.to_cpu(model).parameters(), eager.parameters()):
        torch.testing.assert_close(p.detach(), q.detach())
    print("lazyrt.torch training step: ok")


def check_torch_compile_finds_lazyrt_by_name():
    """``backend="lazyrt"`` through the wheel's ``torch_dynamo_backends`` entry
    point, in a process that never imported lazyrt."""
    code = (
        "import sys, torch\n"
        "assert 'lazyrt' not in sys.modules\n"
        "f = torch.compile(lambda x: (x * 2 + 1).relu().sum(), backend='lazyrt')\n"
        "v = f(torch.arange(-2.0, 3.0)).item()\n"
        "assert v == 9.0 and 'lazyrt.torch.dynamo' in sys.modules, v\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    print("torch.compile(backend='lazyrt') by name: ok")


def check_doctor():
    lazyrt_cmd = os.path.join(os.path.dirname(sys.executable), "lazyrt")
    done = subprocess.run([lazyrt_cmd, "doctor"], capture_output=True, text=True, timeout=300)
    print(done.stdout, end="")
    assert done.returncode == 0, f"lazyrt doctor exited {done.returncode}: {done.stderr}"
    assert "FAIL" not in done.stdout


if __name__ == "__main__":
    check_the_package_is_the_installed_one()
    check_the_native_api_on_c()
    check_a_torch_training_step()
    check_torch_compile_finds_lazyrt_by_name()
    check_doctor()
    print("wheel smoke test: ok")
