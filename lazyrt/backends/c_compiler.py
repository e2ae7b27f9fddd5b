"""The C compiler driver: C source → shared object, compiled once, cached on disk.

>>> from lazyrt.backends.c_compiler import CCompiler
>>> lib = CCompiler().load("k0_add_one", "double add_one(double x) { return x + 1; }")
>>> import ctypes; lib.add_one.restype = ctypes.c_double
>>> lib.add_one(ctypes.c_double(41.0))
42.0

Layout of the cache (``$LAZYRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/lazyrt``,
else ``~/.cache/lazyrt``), one folder per lazyrt version::

    <cache>/v0.1.0/<name>-<key>.c        the source, kept for error messages and debugging
    <cache>/v0.1.0/<name>-<key>.so       the binary
    <cache>/v0.1.0/<name>-<key>.sha256   sha256 of the binary's bytes, checked before dlopen

``key`` hashes everything that can change the binary: the source, every header
in ``lazyrt/kernels``, the compiler (path and ``--version``), the flags, the
host CPU (``-march=native``) and the lazyrt version.
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
_SWEPT: set[str] = set()


def openmp_env() -> dict:
    """Set OpenMP's environment before the first kernel binary loads libgomp.

    ``OMP_WAIT_POLICY=PASSIVE`` makes idle OpenMP workers sleep instead of
    spinning. libgomp's default spins for a while after each parallel region;
    on a 2-core machine those spinning threads take the cores that the next
    torch/BLAS call (or the next NumPy fallback) needs, and halve its speed.
    libgomp reads the variable once, when it is loaded, so this must run
    before the first ``.so`` is opened; a value the user set is kept.
    Returns the OpenMP variables now in effect.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "GOMP_"))}


def kernels_dir() -> str:
    """The installed ``lazyrt/kernels`` folder (the C headers generated code includes)."""
    import lazyrt.kernels
    return os.path.dirname(os.path.abspath(lazyrt.kernels.__file__))


def default_cache_dir() -> str:
    """``$LAZYRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/lazyrt``, else ``~/.cache/lazyrt``."""
    if os.environ.get("LAZYRT_CACHE_DIR"):
        return os.environ["LAZYRT_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lazyrt")


def _lazyrt_version() -> str:
    import lazyrt
    return getattr(lazyrt, "__version__", "0+unknown")


class CCompiler:
    """Compiles C source to a shared object once, caches it on disk, loads it once per process.

    ``cache_dir`` defaults to :func:`default_cache_dir`; binaries go in a
    subfolder per lazyrt version. ``cc`` defaults to ``$CC``, else ``cc``.
    """

    def __init__(self, cache_dir: str | None = None, cc: str | None = None):
        root = os.path.abspath(os.path.expanduser(cache_dir or default_cache_dir()))
        self.cache_root = root
        self.cache_dir = os.path.join(root, "v" + _lazyrt_version())
        self.cc = cc or os.environ.get("CC") or "cc"
        self.include_dir = kernels_dir()
        # -std=c11 (not gnu11) also means -ffp-contract=off: a*b+c is not fused
        # into an FMA behind our back, so generated arithmetic rounds like NumPy's.
        # No -ffast-math: it breaks NaN/inf handling and reassociates sums.
        self.flags = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11",
                      f"-I{self.include_dir}")
        self._by_source: dict[tuple[str, str], ctypes.CDLL] = {}

    # -- public -----------------------------------------------------------

    def load(self, name: str, source: str) -> ctypes.CDLL:
        """The loaded library for ``source``: compiled on a cache miss, else reused."""
        lib = self._by_source.get((name, source))
        if lib is not None:
            return lib
        with _LOCK:
            path = self.library_path(name, source)
            lib = _LOADED.get(path)
            if lib is None:
                self._ensure_safe_cache_dir()
                if self._verified(path):
                    metrics.disk_cache_hits += 1
                else:
                    self._compile(name, source, path)
                openmp_env()
                lib = ctypes.CDLL(path)
                _LOADED[path] = lib
            self._by_source[(name, source)] = lib
            return lib

    def library_path(self, name: str, source: str) -> str:
        """Where the binary for ``source`` lives (or will live) in the cache."""
        stem = re.sub(r"[^A-Za-z0-9_]", "_", name)[:64] or "kernel"
        return os.path.join(self.cache_dir, f"{stem}-{self._key(source)[:24]}.so")

    # -- key --------------------------------------------------------------

    def _key(self, source: str) -> str:
        h = hashlib.sha256()
        for part in (_lazyrt_version(), self._compiler_identity(), "\0".join(self.flags),
                     _host_cpu(), _headers_digest(self.include_dir), source):
            h.update(part.encode())
            h.update(b"\0\1\0")
        return h.hexdigest()

    def _compiler_argv(self) -> list[str]:
        argv = shlex.split(self.cc)
        exe = shutil.which(argv[0]) if argv else None
        if exe is None:
            where = " (from $CC)" if os.environ.get("CC") == self.cc else ""
            raise BackendError(f"the C backend needs a C compiler, but '{self.cc}'{where} "
                               f"was not found: {_INSTALL_HINT}.")
        return [exe] + argv[1:]

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

    def _ensure_safe_cache_dir(self):
        """Create the cache folders 0700; refuse folders other users could write."""
        for d in (self.cache_root, self.cache_dir):
            if not os.path.isdir(d):
                try:
                    os.makedirs(d, mode=0o700, exist_ok=True)
                    os.chmod(d, 0o700)
                except OSError as e:
                    raise BackendError(f"cannot create the lazyrt kernel cache {d}: {e}. "
                                       "Set $LAZYRT_CACHE_DIR to a writable private folder.")
            st = os.stat(d)
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                why = ("is owned by another user" if st.st_uid != os.getuid() else
                       f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
                raise BackendError(
                    f"lazyrt refuses to load compiled kernels from {d}: it {why}, so someone "
                    "else could plant code that this process would run. Fix it with "
                    f"`chmod 700 {d}` (as its owner), or set $LAZYRT_CACHE_DIR to a private "
                    "folder.")

    def _verified(self, so_path: str) -> bool:
        """True when the binary exists, is ours, and matches its recorded sha256."""
        try:
            with open(so_path[:-3] + ".sha256") as f:
                expected = f.read().strip()
            st = os.stat(so_path)
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
            return _file_sha256(so_path) == expected
        except OSError:
            return False

    def _compile(self, name: str, source: str, so_path: str):
        """Compile into a temp file in the cache folder, then rename: atomic for readers."""
        base = so_path[:-3]
        c_path = base + ".c"
        _atomic_write(c_path, source.encode())
        tmp_so = f"{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp.so"
        cmd = self._compiler_argv() + ["-pipe"] + list(self.flags) + ["-o", tmp_so, c_path, "-lm"]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise BackendError(f"the C compiler '{self.cc}' could not be run ({e}): "
                               f"{_INSTALL_HINT}.") from None
        finally:
            metrics.compiles += 1
            metrics.compile_time_s += time.perf_counter() - t0
        if proc.returncode != 0:
            _remove(tmp_so)
            if not self._openmp_works():
                raise BackendError(
                    f"the C compiler '{self.cc}' cannot build OpenMP code (-fopenmp, omp.h, "
                    f"libgomp): {_INSTALL_HINT}.\nCompiler output for kernel '{name}':\n"
                    f"{proc.stderr.strip()}")
            raise CompileError(
                f"C kernel '{name}' failed to compile.\n  source: {c_path}\n"
                f"  command: {shlex.join(cmd)}\n  compiler output:\n{proc.stderr.rstrip()}")
        os.chmod(tmp_so, 0o700)  # whatever the umask: never group/other-writable
        digest = _file_sha256(tmp_so)
        os.replace(tmp_so, so_path)
        # The checksum goes in after the binary: a reader that races us sees a
        # mismatch, and compiles again, rather than trusting a half-written entry.
        _atomic_write(base + ".sha256", (digest + "\n").encode())
        if self.cache_dir not in _SWEPT:  # once per process: the folder can be large
            _SWEPT.add(self.cache_dir)
            _remove_stale_temp_files(self.cache_dir)

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


def _headers_digest(include_dir: str) -> str:
    h = hashlib.sha256()
    for fname in sorted(os.listdir(include_dir)):
        if fname.endswith(".h"):
            h.update(fname.encode() + b"\0")
            with open(os.path.join(include_dir, fname), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


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


def _file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _atomic_write(path: str, data: bytes):
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _remove_stale_temp_files(folder: str, age_s: float = 3600.0):
    """Temp files of compiles that were killed midway (a live compile is younger)."""
    cutoff = time.time() - age_s
    with os.scandir(folder) as entries:
        for entry in entries:
            if ".tmp" in entry.name and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                _remove(entry.path)


def _remove(path: str):
    try:
        os.remove(path)
    except OSError:
        pass
