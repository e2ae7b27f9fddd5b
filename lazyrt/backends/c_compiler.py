"""The C compiler driver: C source → shared object, compiled once, cached on disk.

>>> from lazyrt.backends.c_compiler import CCompiler
>>> lib = CCompiler().load("k0_add_one", "double add_one(double x) { return x + 1; }")
>>> import ctypes; lib.add_one.restype = ctypes.c_double
>>> lib.add_one(ctypes.c_double(41.0))
42.0

Layout of the cache (``$LAZYRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/lazyrt``,
else ``~/.cache/lazyrt``), one folder per lazyrt version::

    <cache>/v<version>/<name>-<key>.c    the source, kept for error messages and debugging
    <cache>/v<version>/<name>-<key>.so   the binary
    <cache>/v<version>/<name>-<key>.sha256 sha256 of the binary's bytes, checked before dlopen

``key`` hashes everything that can change the binary: the source, every header
in ``lazyrt/kernels``, the compiler (path and ``--version``), the flags, the
host CPU (``-march=native``) and the lazyrt version.

Whole-line ``/* comments */`` are not part of the key: a kernel whose header
comment names other user lines (the code moved) reuses the binary.

A program's kernels not yet in the cache compile concurrently, one compiler
process per core (:meth:`CCompiler.compile_kernels`, called by the C backend
once the plan is made), then load one by one as before.

An entry whose bytes match their checksum but that the loader rejects is
evicted and rebuilt once. A cache that cannot be created or written (a
read-only ``$HOME``, a read-only shared cache) still serves the binaries it
has; new ones go to a private temporary folder (0700, removed at exit), with a
:class:`~lazyrt.errors.PerformanceWarning`: correct, but compiled again in
every process. The folders, atomic writes and that fallback are
:mod:`lazyrt.cache`'s, shared with the Triton backend.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from typing import NamedTuple

from .. import cache
from .._version import __version__
from ..compile_record import COMPILED, DISK, MEMORY
from ..errors import BackendError, CompileError
from ..metrics import metrics

_INSTALL_HINT = ("install a C compiler with OpenMP (Debian/Ubuntu: `apt-get install gcc`, "
                 "which brings libgomp; Fedora: `dnf install gcc libgomp`), or point $CC at one")

# Process-wide state: each binary is dlopen'ed once per process, and each
# compiler is probed (``--version``, OpenMP support) once per process.
_LOCK = threading.RLock()
_LOADED: dict[str, ctypes.CDLL] = {}
_COMPILER_IDENTITY: dict[str, str] = {}
_OPENMP_WORKS: dict[str, bool] = {}
# A line that holds one /* comment */ and nothing else.
_COMMENT_LINE = re.compile(r"^[ \t]*/\*(?:[^*]|\*(?!/))*\*/[ \t]*\n", re.M)


#: how long an idle OpenMP worker spins before it sleeps, in libgomp's spin-loop
#: iterations: 10000 burned 0.13-0.17 ms of CPU after a parallel region here
SPIN_COUNT = "10000"


def openmp_env() -> dict:
    """Set OpenMP's environment before the first kernel binary loads libgomp.

    Idle workers spin briefly, then sleep (``GOMP_SPINCOUNT=10000``, about 0.15 ms):
    the kernels of one program run back to back, so a worker is still spinning
    when the next one starts, and a worker left idle after a program soon gives
    its core back. The two extremes both cost here (2-core VM, measured):

    * libgomp's default spins 3-5 ms after each region: on a 2-core machine those
      threads take the cores that the next torch/BLAS call (or the next NumPy
      fallback) needs, and halve its speed;
    * ``OMP_WAIT_POLICY=PASSIVE`` (what lazyrt set before) sleeps at once, and a
      sleeping worker took ~40 us to wake: 46 us per parallel region against 5.7
      spinning, which a program of small parallel kernels (32k+ elements) paid per
      kernel, 30-40% of a three-kernel program at 40k-200k elements.

    A user's ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is kept (libgomp lets the
    spin count override the policy, so lazyrt sets it only when neither is set).
    libgomp reads both once, when it is loaded, so this must run before the first
    ``.so`` is opened. Where torch was imported first, the kernels use torch's own
    libgomp (same soname), which read the environment at that import.
    Returns the OpenMP variables now in effect.
    """
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
    return {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "GOMP_"))}


def kernels_dir() -> str:
    """The installed ``lazyrt/kernels`` folder (the C headers generated code includes)."""
    import lazyrt.kernels
    return os.path.dirname(os.path.abspath(lazyrt.kernels.__file__))


def default_cache_dir() -> str:
    """The cache root, :func:`lazyrt.cache.cache_root`."""
    return cache.cache_root()


def compiler_command(cc: str | None = None) -> list[str]:
    """``cc`` (default: ``$CC``, else ``cc``) as an argv whose program is found on
    ``PATH``, the way the shell would run it: ``CC="gcc -O2"`` gives
    ``['/usr/bin/gcc', '-O2']``. An empty ``$CC`` counts as unset.
    Raises :class:`BackendError` saying what is missing and what to install."""
    env_cc = (os.environ.get("CC") or "").strip()
    cc = cc or env_cc or "cc"
    where = (" (from $CC)" if cc == env_cc else
             " (the default: $CC is not set)" if cc == "cc" and not env_cc else "")
    try:
        argv = shlex.split(cc)
    except ValueError as e:
        raise BackendError(f"the C backend cannot read the compiler command {cc!r}{where}: "
                           f"{e}.") from None
    program = argv[0] if argv else cc
    exe = shutil.which(program) if argv else None
    if exe is None:
        on_path = "" if os.sep in program else " on PATH"
        raise BackendError(f"the C backend needs a C compiler, but '{program}'{where} was "
                           f"not found{on_path}: {_INSTALL_HINT}.")
    return [exe] + argv[1:]


def compiler_problem(cc: str | None = None) -> str:
    """Why :func:`compiler_command` cannot find ``cc`` ('' when it can)."""
    try:
        compiler_command(cc)
    except BackendError as e:
        return str(e)
    return ""


#: the one function a kernel binary exports (see :meth:`CCompiler.load_kernel`)
KERNEL_SYMBOL = "lazyrt_kernel"
_PLAN_NUMBER = re.compile(r"^k\d+_")


def _position_free(symbol: str, source: str) -> tuple[str, str]:
    """The file stem and source a kernel is compiled from: its plan number dropped
    from the name, its symbol (and the helpers named after it) renamed to
    :data:`KERNEL_SYMBOL`."""
    return _PLAN_NUMBER.sub("", symbol), source.replace(symbol, KERNEL_SYMBOL)


class CCompiler:
    """Compiles C source to a shared object once, caches it on disk, loads it once per process.

    ``cache_dir`` defaults to :func:`default_cache_dir`; binaries go in a
    subfolder per lazyrt version. ``cc`` defaults to ``$CC``, else ``cc``.
    """

    def __init__(self, cache_dir: str | None = None, cc: str | None = None):
        root = os.path.abspath(os.path.expanduser(cache_dir or default_cache_dir()))
        self.cache_root = root
        self.cache_dir = cache.backend_folder("c", root)
        self.folder = cache.CacheFolder(self.cache_dir, root, "C kernels")
        self.cc = cc or (os.environ.get("CC") or "").strip() or "cc"
        self.include_dir = kernels_dir()
        # -std=c11 (not gnu11) also means -ffp-contract=off: a*b+c is not fused
        # into an FMA behind our back, so generated arithmetic rounds like NumPy's.
        # No -ffast-math: it breaks NaN/inf handling and reassociates sums.
        self.flags = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11",
                      f"-I{self.include_dir}")
        self._by_source: dict[tuple[str, str], ctypes.CDLL] = {}
        #: binary path -> its compile log (command, then the compiler's messages),
        #: for the binaries this process compiled
        self._logs: dict[str, str] = {}
        #: binaries :meth:`compile_kernels` built ahead of their load (compiled, not hits)
        self._fresh: set = set()

    # -- public -----------------------------------------------------------

    def load(self, name: str, source: str) -> ctypes.CDLL:
        """The loaded library for ``source``: compiled on a cache miss, else reused."""
        return self.load_with_outcome(name, source)[0]

    def load_with_outcome(self, name: str, source: str) -> tuple[ctypes.CDLL, str]:
        """:meth:`load`, and where the library came from: ``"compiled"``,
        ``"disk cache"`` or ``"memory"`` (see :mod:`lazyrt.compile_record`)."""
        lib = self._by_source.get((name, source))
        if lib is not None:
            return lib, MEMORY
        with _LOCK:
            lib, outcome = self._load(name, source)
            self._by_source[(name, source)] = lib
            return lib, outcome

    def load_kernel(self, symbol: str, source: str) -> tuple[int, ctypes.CDLL, str]:
        """(address, library, cache outcome) of the function ``symbol`` of ``source``.

        The binary exports it as :data:`KERNEL_SYMBOL`, and its file is named without
        the plan's number: a plan numbers its kernels by position (``k12_fused_add``),
        and a binary keyed on that number would be missed by the same kernel at another
        position (a graph that differs by one node recompiled every kernel after it)."""
        lib, outcome = self.load_with_outcome(*_position_free(symbol, source))
        return ctypes.cast(getattr(lib, KERNEL_SYMBOL), ctypes.c_void_p).value, lib, outcome

    def kernel_build_log(self, symbol: str, source: str) -> str:
        """:meth:`build_log` of a kernel loaded with :meth:`load_kernel`."""
        return self.build_log(*_position_free(symbol, source))

    def build_log(self, name: str, source: str) -> str:
        """How this process compiled ``source``: the command and the compiler's
        messages ('' when the binary came from the cache)."""
        return self._logs.get(self.library_path(name, source), "")

    def library_path(self, name: str, source: str) -> str:
        """Where the binary for ``source`` lives (or will live) in the cache."""
        stem = re.sub(r"[^A-Za-z0-9_]", "_", name)[:64] or "kernel"
        return os.path.join(self.cache_dir, f"{stem}-{self._key(source)[:24]}.so")

    @property
    def write_dir(self) -> str:
        """Where new binaries go: ``cache_dir``, or this process's private
        temporary folder once ``cache_dir`` turned out not writable."""
        return self.folder.write_dir

    def _load(self, name: str, source: str) -> tuple[ctypes.CDLL, str]:
        path = self.library_path(name, source)
        private = os.path.join(self.write_dir, os.path.basename(path))
        lib = _LOADED.get(path) or _LOADED.get(private)
        if lib is not None:
            return lib, MEMORY
        self.folder.ensure()
        if self._verified(path):
            fresh = path in self._fresh  # compiled by compile_kernels, this process
            try:
                lib = _dlopen(path)
            except OSError:
                # The bytes are the ones recorded, yet the loader rejects them (a
                # library it needs is gone, a cache copied from another system):
                # trusting the entry would fail every run from now on.
                _evict(path)
            else:
                if fresh:
                    return lib, COMPILED
                metrics.disk_cache_hits += 1
                return lib, DISK
        path, build = self._compile(name, source, path)
        self._logs[self.library_path(name, source)] = build.log()
        try:
            return _dlopen(path), COMPILED
        except OSError as e:
            _evict(path)
            raise CompileError(
                f"C kernel '{name}' compiled, but its binary does not load: {e}\n"
                f"  source: {build.source_path}\n  command: {shlex.join(build.command)}\n"
                f"  compiler output:\n{build.output.rstrip() or '    (none)'}") from None

    # -- key --------------------------------------------------------------

    def _key(self, source: str) -> str:
        h = hashlib.sha256()
        # whole-line comments do not change the binary: a kernel whose header
        # names other user lines (the code moved) reuses the one compiled before
        code = _COMMENT_LINE.sub("", source)
        for part in (__version__, self._compiler_identity(), "\0".join(self.flags),
                     _host_cpu(), _headers_digest(self.include_dir), code):
            h.update(part.encode())
            h.update(b"\0\1\0")
        return h.hexdigest()

    def _compiler_argv(self) -> list[str]:
        return compiler_command(self.cc)

    def _compiler_identity(self) -> str:
        """Compiler path + ``--version`` output, probed once per process."""
        with _LOCK:
            if self.cc not in _COMPILER_IDENTITY:
                argv = self._compiler_argv()
                try:
                    out = subprocess.run(argv + ["--version"], capture_output=True, text=True,
                                         timeout=60)
                except OSError as e:
                    raise BackendError(f"the C compiler '{self.cc}' could not be run ({e}): "
                                       f"{_INSTALL_HINT}.") from None
                _COMPILER_IDENTITY[self.cc] = " ".join(argv) + "\n" + out.stdout + out.stderr
            return _COMPILER_IDENTITY[self.cc]

    # -- disk cache -------------------------------------------------------

    # -- disk cache (folders, private fallback, atomic writes: lazyrt.cache) --

    def _verified(self, so_path: str) -> bool:
        """True when the binary exists, is ours, and matches its recorded sha256."""
        try:
            with open(so_path[:-3] + ".sha256") as f:
                expected = f.read().strip()
            st = os.stat(so_path)
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
            return cache.file_sha256(so_path) == expected
        except OSError:
            return False

    def _compile(self, name: str, source: str, so_path: str) -> tuple[str, _Build]:
        """Compile into a temp file in the cache folder, then rename: atomic for readers.
        Returns where the binary went (``so_path``, or its place in the private
        folder when the cache is read-only) and how it was built."""
        return self._finish(self._start(name, source, so_path))

    def _start(self, name: str, source: str, so_path: str) -> "_Job":
        """Start the compiler on ``source`` (it runs while the caller goes on)."""
        c_path = self._write_source(name, source, os.path.basename(so_path))
        base = c_path[:-2]
        tmp_so = f"{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp.so"
        cmd = self._compiler_argv() + ["-pipe"] + list(self.flags) + ["-o", tmp_so, c_path, "-lm"]
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
        except OSError as e:
            raise BackendError(f"the C compiler '{self.cc}' could not be run ({e}): "
                               f"{_INSTALL_HINT}.") from None
        return _Job(name, c_path, tmp_so, cmd, proc, time.perf_counter())

    def _finish(self, job: "_Job") -> tuple[str, _Build]:
        """Wait for ``job``; store its binary in the cache (atomically) or raise."""
        name, c_path, tmp_so, cmd = job.name, job.c_path, job.tmp_so, job.command
        base = c_path[:-2]
        so_path = base + ".so"
        try:
            _, stderr = job.proc.communicate()
        finally:
            metrics.compiles += 1
            metrics.compile_time_s += time.perf_counter() - job.t0
        if job.proc.returncode != 0:
            cache.remove(tmp_so)
            if not self._openmp_works():
                raise BackendError(
                    f"the C compiler '{self.cc}' cannot build OpenMP code (-fopenmp, omp.h, "
                    f"libgomp): {_INSTALL_HINT}.\nCompiler output for kernel '{name}':\n"
                    f"{stderr.strip()}")
            raise CompileError(
                f"C kernel '{name}' failed to compile.\n  source: {c_path}\n"
                f"  command: {shlex.join(cmd)}\n  compiler output:\n{stderr.rstrip()}")
        try:
            os.chmod(tmp_so, 0o700)  # whatever the umask: never group/other-writable
            digest = cache.file_sha256(tmp_so)
            os.replace(tmp_so, so_path)
            # The checksum goes in after the binary: a reader that races us sees a
            # mismatch, and compiles again, rather than trusting a half-written entry.
            cache.atomic_write(base + ".sha256", (digest + "\n").encode())
        except OSError as e:
            cache.remove(tmp_so)
            raise BackendError(f"lazyrt could not store C kernel '{name}' in its cache as "
                               f"{so_path}: {e}") from None
        self.folder.sweep_once()
        return so_path, _Build(c_path, cmd, stderr)

    def compile_kernels(self, kernels) -> None:
        """Compile the ``(symbol, source)`` kernels not yet in the cache, as many at
        once as this machine has cores: a program's first compile then waits for
        the slowest batch, not for the sum of its kernels (a cold transformer step
        has dozens). What fails here is left alone: loading that kernel compiles it
        again and raises there, with its name."""
        pending, seen = [], set()
        for symbol, source in kernels:
            name, source = _position_free(symbol, source)
            path = self.library_path(name, source)
            if path in seen or (name, source) in self._by_source or path in _LOADED:
                continue
            seen.add(path)
            pending.append((name, source, path))
        if len(pending) < 2:
            return  # one kernel compiles as fast when it is loaded
        with _LOCK:
            self.folder.ensure()
            pending = [p for p in pending if not self._verified(p[2])]
            width = max(1, min(len(pending), os.cpu_count() or 1))
            running: list = []
            for name, source, path in pending:
                if len(running) >= width:
                    self._settle(running.pop(0))
                try:
                    running.append((self._start(name, source, path), path, source))
                except Exception:  # noqa: BLE001  the load raises it, with its context
                    break
            for job in running:
                self._settle(job)

    def _settle(self, running):
        job, path, source = running
        try:
            so_path, build = self._finish(job)
        except Exception:  # noqa: BLE001  see compile_kernels
            return
        self._logs[path] = build.log()
        self._fresh.add(path)

    def _write_source(self, name: str, source: str, so_name: str) -> str:
        """Write the kernel's source where its binary will go; returns its path.
        A cache folder we may only read sends it to the private folder."""
        while True:  # at most twice: the cache folder, then the private one
            folder = self.write_dir
            base = os.path.join(folder, so_name[:-3])
            _refuse_directory_entries(name, base)
            try:
                cache.atomic_write(base + ".c", source.encode())
                return base + ".c"
            except OSError as e:
                if e.errno not in cache.READ_ONLY_ERRNOS or folder != self.cache_dir:
                    raise BackendError(f"lazyrt could not write the source of C kernel "
                                       f"'{name}' to {base}.c: {e}") from None
                self.folder.use_private(e)

    def _openmp_works(self) -> bool:
        """Can this compiler build and link an OpenMP program? Probed once per process."""
        with _LOCK:
            if self.cc not in _OPENMP_WORKS:
                with tempfile.TemporaryDirectory(prefix="lazyrt-omp-") as tmp:
                    src = os.path.join(tmp, "probe.c")
                    with open(src, "w") as f:
                        f.write("#include <omp.h>\nint probe(void) { return omp_get_max_threads(); }\n")
                    cmd = self._compiler_argv() + ["-fopenmp", "-fPIC", "-shared", "-o",
                                                   os.path.join(tmp, "probe.so"), src]
                    ok = subprocess.run(cmd, capture_output=True).returncode == 0
                _OPENMP_WORKS[self.cc] = ok
            return _OPENMP_WORKS[self.cc]


class _Job(NamedTuple):
    """A compiler run started by :meth:`CCompiler._start`."""
    name: str
    c_path: str
    tmp_so: str
    command: list
    proc: subprocess.Popen
    t0: float


class _Build(NamedTuple):
    """How a binary was built, for the error when it does not load."""
    source_path: str
    command: list[str]
    output: str  # the compiler's stderr: its warnings, on a build that succeeded

    def log(self) -> str:
        return f"$ {shlex.join(self.command)}\n{self.output.rstrip() or '(no messages)'}\n"


def _dlopen(path: str) -> ctypes.CDLL:
    openmp_env()
    lib = ctypes.CDLL(path)
    _LOADED[path] = lib
    return lib


def _evict(so_path: str):
    """Drop a cache entry's binary and checksum (a read-only cache keeps them)."""
    cache.remove(so_path)
    cache.remove(so_path[:-3] + ".sha256")


def _refuse_directory_entries(name: str, base: str):
    """A folder where a cache file belongs: say so before compiling into it (the
    rename would fail after the compile, leaving its temporary file behind)."""
    for path in (base + ".c", base + ".so", base + ".sha256"):
        if os.path.isdir(path):
            raise BackendError(
                f"lazyrt cannot store C kernel '{name}' in its cache: {path} is a directory, "
                f"where the kernel's file belongs. Remove it (`rm -r {shlex.quote(path)}`), "
                "or set $LAZYRT_CACHE_DIR to another folder.")


def _headers_digest(include_dir: str) -> str:
    h = hashlib.sha256()
    for fname in sorted(os.listdir(include_dir)):
        if fname.endswith(".h"):
            h.update(fname.encode() + b"\0")
            with open(os.path.join(include_dir, fname), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def cpu_flags() -> frozenset:
    """The CPU's feature flags (``/proc/cpuinfo``: x86 ``flags``, Arm ``Features``);
    empty where the platform does not say."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


_HOST_CPU: list[str] = []


def _host_cpu() -> str:
    """The CPU model and feature flags: ``-march=native`` binaries are only valid on it."""
    if not _HOST_CPU:
        lines = []
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("model name", "flags")) and line not in lines:
                        lines.append(line)
                    if len(lines) >= 2:
                        break
        except OSError:
            import platform
            lines = [platform.machine(), platform.processor()]
        _HOST_CPU.append("".join(lines))
    return _HOST_CPU[0]
