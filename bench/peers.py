"""Implementations ("peers") of one case, one builder per library.

Every builder takes a :class:`Case` and its NumPy inputs and returns an
:class:`Impl`: a zero-argument ``call`` that computes the case to completion
and returns the output, plus how to read that output back as NumPy. A
builder that cannot run here returns an Impl with ``error`` set (shown as
'n/a' with the reason) instead of raising.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from bench import timing, workloads


@dataclass
class Case:
    """A benchmark case: the workload, its inputs, and what it must move.

    ``nbytes`` is the minimal traffic: every input read once, every output
    written once. ``copy`` marks the bandwidth-ceiling case (out = x).
    """
    name: str
    workload: Optional[Callable]
    make_inputs: Callable[[np.random.Generator], list]
    nbytes: int
    flops: int = 0
    rtol: float = 1e-3
    atol: float = 1e-4
    copy: bool = False
    note: str = ""


@dataclass
class Impl:
    name: str
    call: Optional[Callable[[], object]] = None
    to_numpy: Callable[[object], np.ndarray] = np.asarray
    activate: Callable[[], None] = lambda: None
    first_call_s: Optional[float] = None
    compiled: bool = False
    error: Optional[str] = None
    extra: dict = field(default_factory=dict)


def reason(e: BaseException) -> str:
    """A one-line, table-sized reason for a failure."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"[:120]


def first_call(impl: Impl, sync: Callable[[], None] = lambda: None) -> Impl:
    """Run the first call (it pays any compile), recording its time or its error.

    ``sync`` waits for the device (``torch.cuda.synchronize`` on GPUs)."""
    try:
        impl.activate()
        impl.first_call_s = timing.first_call_s(lambda: (impl.call(), sync()))
    except Exception as e:  # a peer that cannot run is reported, not fatal
        impl.error = reason(e)
    return impl


# --- NumPy -------------------------------------------------------------------------

def numpy_impl(case: Case, arrays: list) -> Impl:
    if case.copy:
        out = np.empty_like(arrays[0])
        return Impl("numpy", lambda: np.copyto(out, arrays[0]) or out)
    ops = workloads.numpy_ops()
    return Impl("numpy", lambda: case.workload(ops, *arrays))


# --- torch ---------------------------------------------------------------------------

def _torch_tensors(arrays, device, dtype):
    import torch
    ts = [(a if isinstance(a, torch.Tensor) else torch.from_numpy(a)).to(device)
          for a in arrays]
    return [t.to(dtype) for t in ts] if dtype is not None else ts


def _torch_to_numpy(t):
    return t.detach().float().cpu().numpy()


def allow_many_compiles() -> None:
    """Each case is its own compiled function; keep dynamo from falling back to
    eager after its default handful of recompiles."""
    import torch._dynamo.config as cfg
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 256)


def torch_impl(case: Case, arrays: list, device="cpu", dtype=None, compiled=False) -> Impl:
    """torch eager, or ``torch.compile`` (default mode) when ``compiled``."""
    import torch
    name = "torch.compile" if compiled else "torch eager"
    try:
        xs = _torch_tensors(arrays, device, dtype)
    except Exception as e:
        return Impl(name, error=reason(e))
    if case.copy:
        out = torch.empty_like(xs[0])

        def body(x):
            return out.copy_(x)
    else:
        body = functools.partial(case.workload, workloads.torch_ops())
    if compiled:
        allow_many_compiles()
        body = torch.compile(body)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    return first_call(Impl(name, lambda: body(*xs), _torch_to_numpy, compiled=compiled), sync)


# --- JAX -----------------------------------------------------------------------------

def jax_impl(case: Case, arrays: list) -> Impl:
    """``jax.jit`` on CPU; the output is a fresh buffer, so copy is ``x.copy()``."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        return Impl("jax.jit", error=reason(e))
    xs = [jax.device_put(jnp.asarray(a)) for a in arrays]
    if case.copy:
        fn = jax.jit(lambda x: x.copy())
    else:
        fn = jax.jit(functools.partial(case.workload, workloads.jax_ops()))
    return first_call(Impl("jax.jit", lambda: fn(*xs).block_until_ready(), np.asarray,
                           compiled=True))


# --- lazyrt --------------------------------------------------------------------------

def lazyrt_impl(case: Case, arrays: list, backend: str,
                sync: Callable[[], None] = lambda: None) -> Impl:
    """Record the case on fixed input tensors and ``lr.sync`` it, every call.

    That is the honest per-step cost: recording + graph-key lookup + the cached
    program's run. lazyrt has no copy op, so its copy is ``x * 1.0``.
    """
    import lazyrt as lr
    name = f"lazyrt-{backend}"
    ts = [lr.tensor(a) for a in arrays]
    ops = workloads.lazyrt_ops()
    body = (lambda x: x * 1.0) if case.copy else functools.partial(case.workload, ops)

    def call():
        out = body(*ts)
        lr.sync(out)
        lr.runtime.wait(out)  # a device backend (jax) returns from sync before it is done
        return out

    before = lr.metrics.snapshot()
    impl = first_call(Impl(name, call, lambda t: t.numpy(), lambda: lr.set_backend(backend),
                           compiled=backend != "numpy"), sync)
    after = lr.metrics.snapshot()
    impl.extra.update({k: after.get(k, 0) - before.get(k, 0)
                       for k in ("compiles", "compile_time_s", "disk_cache_hits")})
    return impl


def _jax_platform():
    """The platform lazyrt's jax backend runs on ('cpu', 'gpu', 'tpu'), or None."""
    try:
        import lazyrt as lr
        return lr.backends.get("jax").device
    except Exception:  # noqa: BLE001 - a backend that cannot start is not timed
        return None


def lazyrt_backends(with_reference: bool, device: str) -> list[str]:
    """lazyrt backends to time on ``device`` ('cpu' or 'cuda'); numpy only on request."""
    try:
        import lazyrt as lr
        from lazyrt import backends as B
    except ImportError:
        return []
    names = []
    for name in lr.available_backends():
        entry_device = getattr(B._REGISTRY.get(name), "device", "cpu")
        if entry_device == "jax":  # whichever platform JAX runs on here
            entry_device = _jax_platform()
            if entry_device is None:
                continue
        if name == "numpy" and not with_reference:
            continue
        if (entry_device != "cpu") == (device != "cpu"):  # 'cuda', 'gpu', 'cuda:0'...
            names.append(name)
    return names


# --- verification --------------------------------------------------------------------

def reference_output(case: Case, arrays: list) -> np.ndarray:
    """The oracle: NumPy in float64 on the same inputs."""
    wide = [a.astype(np.float64) for a in arrays]
    if case.copy:
        return wide[0]
    return np.asarray(case.workload(workloads.numpy_ops(), *wide))


def check(impl: Impl, case: Case, expected: np.ndarray) -> Impl:
    """Compare one output with the oracle; sets ``extra['check']`` and max error."""
    if impl.error:
        return impl
    try:
        impl.activate()
        got = np.asarray(impl.to_numpy(impl.call()), dtype=np.float64)
    except Exception as e:
        impl.error = reason(e)
        return impl
    ok = got.shape == expected.shape and np.allclose(got, expected, case.rtol, case.atol)
    err = float(np.max(np.abs(got - expected))) if got.shape == expected.shape else float("inf")
    impl.extra.update(check="ok" if ok else "MISMATCH", max_abs_err=err)
    return impl
