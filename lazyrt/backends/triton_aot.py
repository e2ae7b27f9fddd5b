"""Ahead-of-time compile of generated Triton kernels for GPUs this machine lacks.

With ``LAZYRT_TRITON_AOT_TARGET=cuda:90`` (a list is allowed:
``cuda:90,cuda:80``) the Triton backend also compiles every kernel it builds
for each named target, all the way to a cubin, with the real signature of its
launch: pointer dtypes of the launch's buffers, its integer arguments (Triton
specializes them as at a launch: i32 or i64, ``== 1``, divisible by 16), the
launch's constexprs and every autotune config the GPU would try. A kernel that
does not compile fails the compile with its name, its source path, the target
and the compiler's message. CI sets it (``make test``), so every kernel the
suite generates is proven to compile for the H200 (sm_90) on a machine without
a GPU, where the tests themselves run under ``TRITON_INTERPRET=1``.

Why a worker process: under ``TRITON_INTERPRET=1`` Triton's own
``triton.language`` helpers (``tl.max``, ``tl.sum``...) are interpreter
functions, so a real compile is impossible in that process. One worker per
process (``python -m lazyrt.backends.triton_aot``, started at the first
check, without ``TRITON_INTERPRET``) imports the kernel's source file with
the GPU flavour of :mod:`lazyrt.kernels.triton_math` (libdevice math, the GPU
autotune configs) and compiles it with :func:`triton.compile`.

What a compile costs: each (kernel source, signature, target) is compiled
once; the result is kept in memory and in lazyrt's disk cache
(``<cache>/triton-aot/<name>_<key>.json``, written through
:class:`lazyrt.cache.CacheFolder`), keyed by the source (comment lines
dropped), the specialized signature, the constexprs, the target, the FMA
policy, the Triton version and the text of every ``kernels/triton_*.py``. A
failure is not cached.

Resources: registers per thread and spill bytes come from ``ptxas -v`` --
Triton runs ptxas with ``-v`` and prints its log when asked
(``knobs.nvidia.dump_ptxas_log``); Triton's own ``n_regs``/``n_spills``
need a loaded binary, hence a driver and a GPU. Shared memory is Triton's
``metadata.shared``. The worker sets ``knobs.compilation.always_compile``
so that ptxas always runs (Triton's cache would skip it); this module's own
cache is what avoids recompiles.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from typing import NamedTuple

from ..errors import CompileError

ENV = "LAZYRT_TRITON_AOT_TARGET"
#: bumped when what a cached result holds changes
FORMAT = 1


# --- targets ----------------------------------------------------------------

class Target(NamedTuple):
    """One AOT target: ``cuda:90`` is ``Target("cuda", 90)``, shown as ``sm_90``."""
    backend: str
    arch: int

    @property
    def label(self) -> str:
        return f"sm_{self.arch}"

    @property
    def spec(self) -> str:
        return f"{self.backend}:{self.arch}"


def parse_targets(text: str) -> tuple:
    """``"cuda:90,cuda:80"`` -> ``(Target("cuda", 90), Target("cuda", 80))``.

    >>> parse_targets("cuda:90, cuda:80")
    (Target(backend='cuda', arch=90), Target(backend='cuda', arch=80))
    """
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"cuda:(\d+)", part)
        if not m:
            raise CompileError(
                f"lazyrt: {ENV}={text!r}: {part!r} is not a target; write cuda:<compute "
                "capability> (cuda:90 for H100/H200, cuda:80 for A100), comma-separated")
        out.append(Target("cuda", int(m.group(1))))
    return tuple(dict.fromkeys(out))


def targets_from_env() -> tuple:
    return parse_targets(os.environ.get(ENV, ""))


# --- what one compile reports -------------------------------------------------

class ConfigResources(NamedTuple):
    """One autotune config of one kernel, compiled for one target."""
    config: str           # "BLOCK=1024, num_warps=4, num_stages=3"
    regs: int             # registers per thread (ptxas)
    shared: int           # shared memory bytes (Triton's metadata.shared)
    spill_stores: int     # bytes (ptxas)
    spill_loads: int      # bytes (ptxas)
    fma: int              # fma instructions in the PTX (the contraction policy shows here)
    #: approximate float32 divisions (div.full / div.approx) in the PTX: the interpreter
    #: divides exactly, so generated code divides by div_rn
    approx_div: int = 0


class TargetResources(NamedTuple):
    """A kernel on one target: the worst of its configs, and each config."""
    target: str           # "sm_90"
    regs: int
    shared: int
    spills: int           # spill store bytes of the worst config
    configs: tuple        # ConfigResources per autotune config

    def __str__(self):
        more = f" (max of {len(self.configs)} configs)" if len(self.configs) > 1 else ""
        return (f"{self.target}: {self.regs} regs, {self.shared} B shared, "
                f"{self.spills} B spilled{more}")


def _summarize(target: Target, configs: list) -> TargetResources:
    cs = tuple(ConfigResources(**c) for c in configs)
    return TargetResources(target.label, max(c.regs for c in cs), max(c.shared for c in cs),
                           max(c.spill_stores for c in cs), cs)


# --- the checker (in the backend's process) --------------------------------------

def _triton_helpers_digest(folder: str = "") -> str:
    """The GPU helpers and autotune configs every kernel compiles against: every
    ``kernels/triton_*.py`` module (``triton_math``, ``triton_random``...)."""
    folder = folder or os.path.dirname(importlib.util.find_spec("lazyrt.kernels").origin)
    h = hashlib.sha256()
    for fname in sorted(os.listdir(folder)):
        if fname.startswith("triton_") and fname.endswith(".py"):
            h.update(fname.encode())
            with open(os.path.join(folder, fname), "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def _int_key(value: int) -> str:
    """How Triton specializes an int argument: its type, ``== 1``, ``% 16 == 0``."""
    if value == 1:
        return "1"
    kind = "i32" if -2 ** 31 <= value < 2 ** 31 else ("i64" if -2 ** 63 <= value < 2 ** 63
                                                        else "u64")
    return kind + ("D" if value % 16 == 0 else "")


class AotChecker:
    """Compiles kernels for ``targets`` in a worker process; see the module docstring.

    ``check(name, digest, path, pointers, ints, meta)`` -> one
    :class:`TargetResources` per target; raises :class:`CompileError`.
    ``pointers`` are Triton dtype names (``"float32"``), ``ints`` the launch's
    integer arguments, ``meta`` its keyword arguments (constexprs, num_warps,
    enable_fp_fusion)."""

    def __init__(self, targets: tuple, cache_root: str | None = None):
        from .. import cache
        import triton
        self.targets = targets
        self.folder = cache.CacheFolder(cache.backend_folder("triton-aot", cache_root),
                                        cache_root or cache.cache_root(),
                                        "Triton AOT results")
        self._salt = f"{FORMAT}|{triton.__version__}|{_triton_helpers_digest()}|" \
                     f"{os.environ.get('LAZYRT_TRITON_AUTOTUNE', '')}"
        self._memory: dict[str, TargetResources] = {}
        self._lock = threading.Lock()
        self._worker = None
        self.compiled = 0       # (kernel, signature, target) compiled by this process
        self.sources = set()    # distinct kernel sources checked by this process

    def key(self, digest, pointers, ints, meta, target: Target) -> str:
        sig = "|".join([digest, ",".join(pointers), ",".join(_int_key(v) for v in ints),
                        json.dumps(meta, sort_keys=True), target.spec, self._salt])
        return hashlib.sha256(sig.encode()).hexdigest()[:24]

    def check(self, name, digest, path, pointers, ints, meta) -> tuple:
        with self._lock:
            self.sources.add(digest)
            return tuple(self._one(name, digest, path, pointers, ints, meta, t)
                         for t in self.targets)

    def _one(self, name, digest, path, pointers, ints, meta, target):
        key = self.key(digest, pointers, ints, meta, target)
        found = self._memory.get(key) or self._load(name, key, target)
        if found is not None:
            self._memory[key] = found
            return found
        reply = self._ask({"path": path, "name": name, "pointers": list(pointers),
                           "ints": list(ints), "meta": meta, "arch": target.arch})
        if not reply.get("ok"):
            raise CompileError(
                f"lazyrt: Triton kernel {name} ({path}) does not compile for {target.label} "
                f"({target.spec}, config {reply.get('config') or '-'}):\n{reply.get('error')}")
        self.compiled += 1
        result = _summarize(target, reply["configs"])
        self._memory[key] = result
        self.folder.write(f"{name}_{key}.json", json.dumps(
            {"target": target.spec, "configs": [c._asdict() for c in result.configs]}).encode())
        return result

    def _load(self, name, key, target):
        path = self.folder.find(f"{name}_{key}.json")
        if path is None:
            return None
        try:
            with open(path) as f:
                return _summarize(target, json.load(f)["configs"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # corrupt: compiled again and rewritten

    # -- the worker --
    def _ask(self, request: dict) -> dict:
        worker = self._worker
        if worker is None or worker.poll() is not None:
            worker = self._worker = _start_worker()
        try:
            worker.stdin.write(json.dumps(request) + "\n")
            worker.stdin.flush()
            line = worker.stdout.readline()
        except OSError:
            line = ""
        if not line:
            worker.wait()
            self._worker = None
            return {"ok": False, "error": f"the AOT worker died (exit {worker.returncode}): "
                                          f"{_tail(worker.lazyrt_stderr)}"}
        return json.loads(line)

    def close(self):
        worker, self._worker = self._worker, None
        if worker is not None and worker.poll() is None:
            worker.stdin.close()
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()


def _start_worker():
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the worker compiles for real
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    stderr = tempfile.TemporaryFile(mode="w+")
    worker = subprocess.Popen([sys.executable, "-m", "lazyrt.backends.triton_aot"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                              env=env, text=True)
    worker.lazyrt_stderr = stderr
    return worker


def _tail(f, n=3000) -> str:
    try:
        f.seek(0)
        return f.read()[-n:].strip() or "(nothing on stderr)"
    except (OSError, ValueError):
        return "(stderr unavailable)"


_CHECKERS: dict = {}


def checker_for(targets: tuple, cache_root: str | None = None) -> AotChecker:
    """The process's checker for ``targets`` (one worker per target list)."""
    key = (targets, cache_root)
    if key not in _CHECKERS:
        _CHECKERS[key] = AotChecker(targets, cache_root)
    return _CHECKERS[key]


@atexit.register
def _close_all():
    for c in _CHECKERS.values():
        c.close()


# --- the worker (python -m lazyrt.backends.triton_aot) ---------------------------

_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _config_text(kwargs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in kwargs.items() if k != "enable_fp_fusion")


def compile_request(req: dict, _modules={}) -> dict:
    """Compile one kernel for one target (in the worker: no TRITON_INTERPRET)."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import MockTensor, create_function_from_signature

    path, name = req["path"], req["name"]
    if path not in _modules:
        spec = importlib.util.spec_from_file_location(
            "lazyrt_triton_aot_" + hashlib.sha256(path.encode()).hexdigest()[:16], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[path] = getattr(module, name)
    fn = _modules[path]
    configs = [c.all_kwargs() for c in fn.configs] if isinstance(fn, Autotuner) else [{}]
    jit = fn.fn if isinstance(fn, Autotuner) else fn
    target = GPUTarget("cuda", req["arch"], 32)
    backend = make_backend(target)
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    args = [MockTensor(getattr(tl, p)) for p in req["pointers"]] + req["ints"]
    out = []
    for config in configs:
        kwargs = dict(req["meta"], **config)
        what = _config_text(kwargs)
        log = _StdoutLog()
        try:
            kwargs["debug"] = False
            bound, specialization, options = binder(*args, **kwargs)
            options, signature, constexprs, attrs = jit._pack_args(
                backend, kwargs, bound, specialization, options)
            with log:
                kernel = triton.compile(ASTSource(jit, signature, constexprs, attrs),
                                        target=target, options=options.__dict__)
        except Exception as exc:  # noqa: BLE001 - the message goes back to the user
            return {"ok": False, "config": what, "error": f"{type(exc).__name__}: {exc}"}
        regs = _PTXAS_REGS.search(log.text)
        spills = _PTXAS_SPILLS.search(log.text)
        if regs is None or spills is None:
            return {"ok": False, "config": what,
                    "error": f"no ptxas -v report in Triton's log: {log.text[-2000:]!r}"}
        out.append({"config": what, "regs": int(regs.group(1)),
                    "shared": int(kernel.metadata.shared),
                    "spill_stores": int(spills.group(1)), "spill_loads": int(spills.group(2)),
                    "fma": len(re.findall(r"^\s*fma\.", kernel.asm["ptx"], re.M)),
                    "approx_div": len(re.findall(r"^\s*div\.(full|approx)\.", kernel.asm["ptx"],
                                                 re.M))})
    return {"ok": True, "configs": out}


class _StdoutLog(contextlib.redirect_stdout):
    """Triton prints the ptxas log with print(); keep it instead."""

    def __init__(self):
        import io
        self._buffer = io.StringIO()
        super().__init__(self._buffer)

    @property
    def text(self) -> str:
        return self._buffer.getvalue()


def main():
    from triton import knobs
    knobs.compilation.always_compile = True   # ptxas runs, so its -v report exists
    knobs.nvidia.dump_ptxas_log = True
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # stray prints must not break the protocol
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = compile_request(json.loads(line))
        except Exception as exc:  # noqa: BLE001
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
