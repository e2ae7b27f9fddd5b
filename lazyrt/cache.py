"""lazyrt's on-disk kernel cache: where it is, what is in it, and safe writes.

>>> import lazyrt.cache as cache
>>> cache.cache_root().endswith("lazyrt") or "LAZYRT_CACHE_DIR" in __import__("os").environ
True

The cache lives in ``$LAZYRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/lazyrt``,
else ``~/.cache/lazyrt``; each backend keeps its entries in one folder::

    <cache>/v<lazyrt version>/   c: <name>-<key>.c, .so and .sha256 (see backends/c_compiler.py)
    <cache>/triton/              triton: <name>_<digest>.py, imported by Triton's jit
    <cache>/blas/                c's matmul: the host's BLAS choice, the library copy
                                 (see backends/c_blas.py)

Both backends write through :class:`CacheFolder`, which gives every entry
the same safety: folders created 0700 and refused when another user could
write them (binaries in them are run), atomic writes (temp file + rename),
and, when the cache cannot be created or written (a read-only ``$HOME``),
a private temporary folder for this process (0700, removed at exit) with one
:class:`~lazyrt.errors.PerformanceWarning`.

:func:`entries`, :func:`verify` and :func:`clear` are for people and the CLI:
list what is cached by backend with sizes, find entries that do not match
their checksum, and remove them.
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import os
import secrets
import shlex
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass

from ._version import __version__
from .errors import BackendError
from .performance_warning import warn_performance

#: What a write into a folder we may only read fails with.
READ_ONLY_ERRNOS = frozenset((errno.EACCES, errno.EPERM, errno.EROFS))

_LOCK = threading.RLock()
# Cache folders this process cannot write -> the private temporary folder that
# holds what it writes instead (one temporary root per process).
_PRIVATE: dict[str, str] = {}
_PRIVATE_ROOT: list[str] = []
_SWEPT: set[str] = set()


def cache_root() -> str:
    """``$LAZYRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/lazyrt``, else ``~/.cache/lazyrt``."""
    if os.environ.get("LAZYRT_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(os.environ["LAZYRT_CACHE_DIR"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lazyrt")


def backend_folder(backend: str, root: str | None = None) -> str:
    """The folder of ``backend``'s entries (``c``: one per lazyrt version)."""
    root = root or cache_root()
    if backend == "c":
        return os.path.join(root, "v" + __version__)
    return os.path.join(root, backend)


def _backend_of(folder_name: str) -> str:
    return "c" if folder_name.startswith("v") and folder_name[1:2].isdigit() else folder_name


class CacheFolder:
    """One backend's cache folder, written safely (see the module docstring).

    ``what`` names its entries in messages ("C kernels"); ``root`` is the
    cache root above it, created and checked with it. ``warn=False`` for entries
    cheap to rebuild (plans): their private folder is not worth a warning of its
    own beside the kernels' one.
    """

    def __init__(self, path: str, root: str | None = None, what: str = "kernels",
                 warn: bool = True):
        self.path = os.path.abspath(path)
        self.root = os.path.abspath(root) if root else None
        self.what = what
        self.warn = warn

    @property
    def write_dir(self) -> str:
        """Where new entries go: :attr:`path`, or this process's private
        temporary folder once :attr:`path` turned out not writable."""
        return _PRIVATE.get(self.path, self.path)

    @property
    def private(self) -> bool:
        return self.path in _PRIVATE

    def ensure(self):
        """Create the folders 0700; refuse folders other users could write.
        Folders that cannot be created send new entries to a private one."""
        for d in (self.root, self.path):
            if d is None:
                continue
            if not os.path.isdir(d):
                if self.path in _PRIVATE:
                    return  # known missing: nothing there to load
                try:
                    os.makedirs(d, mode=0o700, exist_ok=True)
                    os.chmod(d, 0o700)
                except OSError as e:
                    self.use_private(e)
                    return
            refuse_unsafe_folder(d)

    def use_private(self, error: OSError) -> str:
        """Send new entries to this process's private temporary folder, with one
        warning per unwritable folder; returns the folder."""
        with _LOCK:
            if self.path not in _PRIVATE:
                why = error.strerror or str(error)
                try:
                    private = os.path.join(_private_root(), os.path.basename(self.path))
                    os.makedirs(private, mode=0o700, exist_ok=True)
                except OSError as e:
                    raise BackendError(
                        f"lazyrt cannot write its kernel cache {self.path} ({why}), nor "
                        f"create a temporary one ({e}). Set $LAZYRT_CACHE_DIR to a folder you "
                        "can write.") from None
                _PRIVATE[self.path] = private
                if not self.warn:
                    return private
                warn_performance(
                    f"lazyrt cannot write its kernel cache {self.path} ({why}): the "
                    f"{self.what} this process compiles go to a private temporary cache, "
                    f"{private} (removed at exit), and are compiled again by every new "
                    "process. Set $LAZYRT_CACHE_DIR to a folder you can write to keep them.")
            return _PRIVATE[self.path]

    def write(self, filename: str, data: bytes) -> str:
        """Write ``filename`` atomically into :attr:`write_dir` (the private
        folder when this one may only be read); returns its path."""
        self.ensure()
        while True:  # at most twice: the cache folder, then the private one
            folder = self.write_dir
            path = os.path.join(folder, filename)
            try:
                atomic_write(path, data)
                return path
            except OSError as e:
                if e.errno not in READ_ONLY_ERRNOS or folder != self.path:
                    raise
                self.use_private(e)

    def find(self, filename: str) -> str | None:
        """The path of ``filename`` in this folder or its private stand-in, if there."""
        for folder in (self.path, _PRIVATE.get(self.path)):
            if folder:
                path = os.path.join(folder, filename)
                if os.path.isfile(path):
                    return path
        return None

    def sweep_once(self):
        """Remove temp files of writes that were killed midway, once per process."""
        folder = self.write_dir
        if folder not in _SWEPT:  # once per process: the folder can be large
            _SWEPT.add(folder)
            remove_stale_temp_files(folder)


# --- listing, verifying, clearing ----------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One cached kernel: its files (source, binary, checksum) under one stem."""
    backend: str
    name: str                 # the file stem: <kernel name>-<key>
    paths: tuple              # every file of the entry
    size: int                 # bytes, all files together

    @property
    def kernel(self) -> str:
        return self.name.rsplit("-", 1)[0] if self.backend == "c" else self.name.rsplit("_", 1)[0]


def entries(backend: str | None = None, root: str | None = None) -> list[Entry]:
    """Cached kernels by backend (``backend`` alone when given), sorted.

    >>> import lazyrt.cache as cache
    >>> all(e.size > 0 for e in cache.entries())
    True
    """
    root = root or cache_root()
    found = []
    try:
        folders = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    for folder in folders:
        if not folder.is_dir(follow_symlinks=False):
            continue
        which = _backend_of(folder.name)
        if backend is not None and which != backend:
            continue
        stems: dict[str, list] = {}
        with os.scandir(folder.path) as files:
            for f in files:
                if f.is_file(follow_symlinks=False) and ".tmp" not in f.name:
                    stem = f.name.rsplit(".", 1)[0]
                    stems.setdefault(stem, []).append((f.path, f.stat().st_size))
        for stem, files in sorted(stems.items()):
            found.append(Entry(which, stem, tuple(sorted(p for p, _ in files)),
                               sum(s for _, s in files)))
    return found


def summary(root: str | None = None) -> dict:
    """``{backend: (entries, bytes)}`` of the cache."""
    out: dict[str, tuple] = {}
    for e in entries(root=root):
        n, size = out.get(e.backend, (0, 0))
        out[e.backend] = (n + 1, size + e.size)
    return out


def verify(backend: str | None = None, root: str | None = None) -> list[tuple]:
    """``(entry, problem)`` for every entry that would not be trusted: a C binary
    without its checksum or whose bytes do not match it, a file another user
    owns or can write. An empty list means the cache is sound."""
    problems = []
    uid = os.getuid()
    for e in entries(backend, root):
        for p in e.paths:
            st = os.stat(p)
            if st.st_uid != uid:
                problems.append((e, f"{p} is owned by another user (uid {st.st_uid})"))
            elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                problems.append((e, f"{p} is writable by group or others"))
        if e.backend == "c":
            so = [p for p in e.paths if p.endswith(".so")]
            sums = [p for p in e.paths if p.endswith(".sha256")]
            if so and not sums:
                problems.append((e, "binary without its checksum"))
            elif so:
                with open(sums[0]) as f:
                    if file_sha256(so[0]) != f.read().strip():
                        problems.append((e, "binary does not match its checksum"))
    return problems


def clear(backend: str | None = None, root: str | None = None, only=None) -> int:
    """Remove cached entries (every backend's, or ``backend``'s; only the given
    :class:`Entry` objects when ``only`` is given); returns the bytes freed.
    Entries a running process has loaded stay valid in that process."""
    freed = 0
    chosen = entries(backend, root) if only is None else list(only)
    for e in chosen:
        for p in e.paths:
            try:
                size = os.stat(p).st_size
                os.remove(p)
            except OSError:
                continue
            freed += size
    return freed


# --- small file helpers shared by the backends ------------------------------------

def refuse_unsafe_folder(d: str):
    """Raise unless ``d`` is ours and only we can write it: code in it is run."""
    st = os.stat(d)
    if st.st_uid != os.getuid():
        raise BackendError(
            f"lazyrt refuses to load compiled kernels from {d}: it is owned by another user "
            f"(uid {st.st_uid}), who could plant code that this process would run. Set "
            "$LAZYRT_CACHE_DIR to a folder of your own (it is created if missing), or, if "
            f"this folder should be yours, take it back with `sudo chown -R {os.getuid()} "
            f"{shlex.quote(d)}`.")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise BackendError(
            f"lazyrt refuses to load compiled kernels from {d}: it is writable by group or "
            f"others (mode {stat.S_IMODE(st.st_mode):o}), so someone else could plant code "
            f"that this process would run. Fix it with `chmod 700 {shlex.quote(d)}`, or set "
            "$LAZYRT_CACHE_DIR to a folder of your own.")


def _private_root() -> str:
    """This process's private temporary cache root (0700), removed at exit."""
    with _LOCK:
        if not _PRIVATE_ROOT:
            root = tempfile.mkdtemp(prefix="lazyrt-cache-")
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _PRIVATE_ROOT.append(root)
        return _PRIVATE_ROOT[0]


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def atomic_write(path: str, data: bytes):
    """Write ``data`` to ``path`` through a temp file and a rename: a reader sees
    the old file or the whole new one, never half of it."""
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise


def remove_stale_temp_files(folder: str, age_s: float = 3600.0):
    """Temp files of writes that were killed midway (a live one is younger)."""
    cutoff = time.time() - age_s
    try:
        with os.scandir(folder) as entries_:
            for entry in entries_:
                if ".tmp" in entry.name and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    remove(entry.path)
    except OSError:
        pass


def remove(path: str):
    try:
        os.remove(path)
    except OSError:
        pass
