"""Backends: a name, a device, and ``compile(graph) -> Program``.

The contract is written down in :mod:`lazyrt.backends.base` (the
:class:`~lazyrt.backends.base.Backend` and
:class:`~lazyrt.backends.base.Program` protocols, and ``compile_graph``,
the one compile path that returns a program's compile record). Backends
never see tensors or the recorder, only a :class:`lazyrt.graph.Graph`, the
planner's steps and buffers; opaque steps run through :mod:`.host`.

The default backend is ``$LAZYRT_BACKEND`` — a name that is no backend fails
``import lazyrt`` — else the best one here (:func:`preferred_backend`). When
that is the ``numpy`` interpreter for want of a C compiler, a
:class:`~lazyrt.errors.PerformanceWarning` says so, once per process.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from typing import Callable

from ..errors import BackendError
from ..performance_warning import warn_performance


@dataclass
class BackendEntry:
    name: str
    device: str
    factory: Callable          # () -> backend object
    available: Callable        # () -> bool
    why_unavailable: Callable  # () -> str
    instance: object = None

    def get(self):
        if self.instance is None:
            if not self.available():
                raise BackendError(f"lazyrt: backend {self.name!r} is not available here: "
                                   f"{self.why_unavailable()}")
            self.instance = self.factory()
            self.instance.salt = zlib.crc32(self.name.encode())
        return self.instance


_REGISTRY: dict[str, BackendEntry] = {}


def register(name, device, factory, available=lambda: True, why_unavailable=lambda: ""):
    _REGISTRY[name] = BackendEntry(name, device, factory, available, why_unavailable)


def get(name: str):
    if name not in _REGISTRY:
        raise BackendError(f"lazyrt: unknown backend {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name].get()


def available_backends() -> list[str]:
    return [n for n, e in _REGISTRY.items() if e.available()]


def _c_compiler_problem() -> str:
    """Why there is no C compiler to run ('' when there is): ``$CC`` read the way
    the compiler driver reads it (``CC="gcc -O2"``; an empty ``$CC`` is unset)."""
    from .c_compiler import compiler_problem
    return compiler_problem()


def _c_backend():
    from .c import CBackend
    return CBackend()


def _triton_backend():
    from .triton import TritonBackend
    return TritonBackend()


def _triton_unavailable() -> str:
    from .triton import unavailable_reason
    return unavailable_reason()


def _jax_backend():
    from .jax import JaxBackend
    return JaxBackend()


def _jax_unavailable() -> str:
    from .jax import unavailable_reason
    return unavailable_reason()


def preferred_backend() -> str:
    """The default where the user names none: ``triton`` on a machine with a
    usable GPU, else ``c`` where a C compiler exists, else ``numpy``."""
    from .triton import cuda_device_present
    if cuda_device_present():
        return "triton"
    return "c" if "c" in available_backends() else "numpy"


# Why the default backend fell back to the numpy interpreter, once it did.
_FALLBACK: list[str] = []


def default_backend() -> str:
    """The backend to use when none is named: ``$LAZYRT_BACKEND`` (checked usable
    here), else :func:`preferred_backend`, with a warning, once per process,
    when that is the slow ``numpy`` interpreter."""
    name = os.environ.get("LAZYRT_BACKEND")
    if name:
        _check_backend_variable()
        entry = _REGISTRY[name]
        if not entry.available():
            why = entry.why_unavailable().rstrip(".")
            raise BackendError(
                f"lazyrt: $LAZYRT_BACKEND={name!r}, but that backend is not available here: "
                f"{why}. Unset $LAZYRT_BACKEND to use the best one here "
                f"({', '.join(available_backends())}).")
        return name
    name = preferred_backend()
    if name == "numpy" and not _FALLBACK:
        why = _REGISTRY["c"].why_unavailable() or "the c backend is not available"
        _FALLBACK.append(why)
        warn_performance(
            f"lazyrt runs on the slow `numpy` reference interpreter, not on compiled C "
            f"kernels: {why.rstrip('.')}. Set LAZYRT_BACKEND=numpy to choose the "
            "interpreter and silence this warning.")
    return name


def fallback_reason(name: str) -> str:
    """Why backend ``name`` is in use when it is the slow interpreter the default
    fell back to; '' otherwise."""
    return _FALLBACK[0] if name == "numpy" and _FALLBACK else ""


def describe(name: str) -> str:
    """``name``, and why when it is a fallback (for the metrics report)."""
    why = fallback_reason(name)
    return f"{name} (slow fallback: {why})" if why else name


def _check_backend_variable():
    """A ``$LAZYRT_BACKEND`` that names no backend is an error now, naming it."""
    name = os.environ.get("LAZYRT_BACKEND")
    if name and name not in _REGISTRY:
        raise BackendError(
            f"lazyrt: $LAZYRT_BACKEND={name!r} is not a lazyrt backend. The backends are "
            f"{', '.join(_REGISTRY)} (available here: {', '.join(available_backends())}); "
            "set $LAZYRT_BACKEND to one of them, or unset it to let lazyrt choose.")


def _register_builtin():
    from . import reference
    register("numpy", "cpu", reference.ReferenceBackend)
    register("c", "cpu", _c_backend, available=lambda: not _c_compiler_problem(),
             why_unavailable=_c_compiler_problem)
    register("triton", "cuda", _triton_backend, available=lambda: not _triton_unavailable(),
             why_unavailable=_triton_unavailable)
    register("jax", "jax", _jax_backend, available=lambda: not _jax_unavailable(),
             why_unavailable=_jax_unavailable)


_register_builtin()
_check_backend_variable()  # at ``import lazyrt``: a typo must not wait for the first barrier
