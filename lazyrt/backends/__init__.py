"""Backends: a name, a device, and ``compile(graph) -> Program``.

A ``Program`` has ``run(params) -> list of ndarrays`` (one per graph output)
and ``kernels`` (how many launches one run makes). Backends never see
tensors or the recorder, only a :class:`lazyrt.graph.Graph` and buffers.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

from ..errors import BackendError


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


def _c_compiler_path():
    import os
    import shutil
    return shutil.which(os.environ.get("CC", "cc"))


def _c_backend():
    from .c import CBackend
    return CBackend()


def _triton_backend():
    from .triton import TritonBackend
    return TritonBackend()


def _triton_unavailable() -> str:
    from .triton import unavailable_reason
    return unavailable_reason()


def preferred_backend() -> str:
    """The default where the user names none: ``triton`` on a machine with a
    usable GPU, else ``c`` where a C compiler exists, else ``numpy``."""
    from .triton import cuda_device_present
    if cuda_device_present():
        return "triton"
    return "c" if "c" in available_backends() else "numpy"


def _register_builtin():
    from . import reference
    register("numpy", "cpu", reference.ReferenceBackend)
    register("c", "cpu", _c_backend, available=lambda: _c_compiler_path() is not None,
             why_unavailable=lambda: "no C compiler found ($CC or cc); install gcc")
    register("triton", "cuda", _triton_backend, available=lambda: not _triton_unavailable(),
             why_unavailable=_triton_unavailable)


_register_builtin()
