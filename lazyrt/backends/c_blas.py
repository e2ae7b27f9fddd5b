"""Which BLAS the C backend's matmuls call: NumPy's OpenBLAS, with which of its
kernel families, or Intel MKL where it is installed.

NumPy's wheel ships one OpenBLAS built for many CPUs: when it loads, it picks a
kernel family (a *core type*: ``Haswell`` is the AVX2 one, ``SkylakeX`` an
AVX-512 one) from the CPU's features. That pick is a rule, not a measurement.
On an AMD EPYC with AVX-512 it picks ``SkylakeX``, and the AVX2 family measured
4-7% faster per core on the benchmark models' shapes, interleaved in one
process, and 0.4-0.9 ms faster per MLP training step (of 19-20 ms). On an Intel
Xeon, MKL (:mod:`.c_mkl`, optional) beat OpenBLAS on the same products, small
ones most of all.

Which library and family is faster also depends on the product. The AVX-512
family has small-matrix kernels (no packing) that OpenBLAS uses for products of
at most about 100^3 multiply-adds: on that EPYC they ran attention's per-head
products (64x64x32) at 190-225 GF/s against the AVX2 family's 120-170, except
where only B is transposed (110-130 against 120-160). So large products and
small ones of each transposition, float32 and float64, are chosen separately.

The family is fixed when the library loads (OpenBLAS reads ``$OPENBLAS_CORETYPE``
then), and NumPy has loaded its copy before lazyrt can say anything. So, once
per host and set of libraries:

* **measure**: a child process per candidate (NumPy's OpenBLAS file with the
  library's own pick, with the family of the other vector width this CPU can
  run, and MKL's sequential layer where MKL is installed) times single-threaded
  sgemms and dgemms the way lazyrt calls them (one call per OpenMP thread):
  384^3 products, one of each transposition, and runs of 96^3 ones in each of
  the four transpositions; each the fastest of nine samples (other processes
  only ever add time: medians moved with a shared machine's load, and the
  choice flipped between runs), two alternating rounds, the best of each.
  384^3 is about the size of the slices lazyrt's threads run of the benchmark
  MLP's products (256x784x256, 392x256x512 on two threads), where MKL led
  OpenBLAS on an Intel Xeon by 3-6% without B transposed and 7-13% with it;
  at 512^3 its lead was inside the noise. For each kind of product
  (:func:`product_kind`) the candidates are taken in order of preference
  (:data:`PREFERENCE`: NumPy's own instance, then a private copy of it, then
  MKL), and a later one wins only by :data:`MARGIN` or more over the one
  chosen so far.
* **remember** the outcome in ``<cache>/blas/`` (keyed by the CPU model and
  flags, the library files and the probe), so every process on the host makes
  the same choice and measures nothing.
* **load**: when the other family won, a byte-for-byte copy of the library in
  ``<cache>/blas/`` (the loader would hand back NumPy's instance for the same
  file) is loaded with that family and one thread; when MKL won, MKL with its
  sequential threading layer. A private single-threaded instance never starts
  BLAS threads, so :mod:`.c_gemm`'s launch need not lower NumPy's BLAS thread
  count around it. Where the library's pick won, or anything on this path
  fails, lazyrt calls the next best that loads, at last NumPy's own instance.

``$LAZYRT_BLAS`` forces a library: ``mkl`` (MKL for every product, measured or
not), ``openblas`` (OpenBLAS only, its families measured), or ``auto`` (the
default). ``$LAZYRT_BLAS_CORETYPE`` forces OpenBLAS's family: ``numpy`` (NumPy's
instance), or an OpenBLAS core type name (a private copy with it, measured or
not). A user's own ``$OPENBLAS_CORETYPE`` is respected: lazyrt then calls
NumPy's instance, which honours it.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import Optional

from .. import cache
from ..errors import BackendError
from . import c_mkl
from .c_compiler import _host_cpu, cpu_flags

#: a candidate must be this much faster (GF/s ratio) than the one chosen so far
MARGIN = 1.03

#: products of at most this many multiply-adds (M*N*K) are "small": about where
#: OpenBLAS's AVX-512 family stops using its small-matrix kernels (measured on an
#: EPYC: it won at 100^3 and lost at 128x128x64)
SMALL_MNK = 1_000_000

_SHAPES = ("large", "small nn", "small nt", "small tn", "small tt")
#: the kinds of product measured and chosen for separately (see product_kind):
#: float32 ones, then the same of float64
KINDS = _SHAPES + tuple(f"{kind} f64" for kind in _SHAPES)

#: the candidates' order of preference ("": NumPy's instance with its own pick,
#: "other": a private copy running the other family, "mkl"): cheaper to use first
PREFERENCE = ("", "other", "mkl")

#: OpenBLAS's AVX-512 families (x86-64), and the AVX2 one they are measured against
AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
AVX2_CORES = ("haswell", "zen")
_AVX512_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd")

#: what $LAZYRT_BLAS may say ("" and "auto": measure)
LIBRARIES = ("auto", "mkl", "openblas")

_LOCK = threading.Lock()
_CHOICE_LOCK = threading.Lock()

# Times single-threaded sgemms and dgemms in a child process: argv = library path,
# sgemm and dgemm symbols, then OpenBLAS's corename symbol or "mkl" (set MKL's
# sequential layer first); prints {"core": ..., "gflops": {kind: GF/s}} for the
# kinds of KINDS: four 384^3 products (one per transposition) per sample, and 32
# products of 96^3 per sample in each transposition. For MKL, "core" is the lines
# of /proc/self/maps naming its libraries (c_mkl.family_from_maps reads them).
_PROBE = r"""
import ctypes, json, sys, time
lib = ctypes.CDLL(sys.argv[1])
family = sys.argv[4]
if family == "mkl" and lib.MKL_Set_Threading_Layer(1) != 1:
    sys.exit("MKL refused its sequential threading layer")
i64, ptr = ctypes.c_int64, ctypes.c_void_p
n, s = 384, 96  # 96^3 < SMALL_MNK; big enough that ctypes' call overhead is a few percent
def gflops(run, flops):
    for _ in range(3):
        run()
    times = []
    for _ in range(9):
        t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
    return flops / min(times) / 1e9  # noise (other processes) only ever adds time
out = {}
for suffix, name, real in (("", sys.argv[2], ctypes.c_float),
                           (" f64", sys.argv[3], ctypes.c_double)):
    gemm = getattr(lib, name)
    gemm.argtypes = [ctypes.c_int] * 3 + [i64] * 3 + [real, ptr, i64, ptr, i64, real, ptr, i64]
    gemm.restype = None
    a, b, c = ((real * (n * n))(*([0.5] * (n * n))) for _ in range(3))
    base = [ctypes.addressof(x) for x in (a, b, c)]
    size = ctypes.sizeof(real)
    def large():  # one of each transposition: a training step has NN, NT and TN ones
        for ta, tb in ((111, 111), (111, 112), (112, 111), (112, 112)):
            gemm(101, ta, tb, n, n, n, 1.0, a, n, b, n, 0.0, c, n)
    def small(ta, tb):
        for i in range(32):
            off = size * s * s * (i % 8)  # eight products, each with operands of its own
            gemm(101, 112 if ta else 111, 112 if tb else 111, s, s, s, 1.0,
                 base[0] + off, s, base[1] + off, s, 0.0, base[2] + off, s)
    out["large" + suffix] = gflops(large, 4 * 2 * n ** 3)
    for ta in (0, 1):
        for tb in (0, 1):
            kind = "small " + "nt"[ta] + "nt"[tb] + suffix
            out[kind] = gflops(lambda: small(ta, tb), 2 * s ** 3 * 32)
if family == "mkl":
    core = "".join(line for line in open("/proc/self/maps") if "libmkl_" in line)
else:
    corename = getattr(lib, family)
    corename.restype = ctypes.c_char_p
    core = corename().decode()
print(json.dumps({"core": core, "gflops": out}))
"""


def product_kind(m: int, n: int, k: int, a_transposed: bool, b_transposed: bool,
                 double: bool = False) -> str:
    """Which of :data:`KINDS` an ``m x k @ k x n`` product (float64 if ``double``) is."""
    if m * n * k > SMALL_MNK:
        kind = "large"
    else:
        kind = "small " + "nt"[bool(a_transposed)] + "nt"[bool(b_transposed)]
    return f"{kind} f64" if double else kind


@dataclass(frozen=True)
class GemmLibrary:
    """What ``lz_gemm`` calls: sgemm and dgemm addresses, and NumPy's OpenBLAS
    thread count getter and setter (0 for a private single-threaded instance, a
    copy of OpenBLAS or MKL's sequential layer, whose count never changes)."""
    sgemm: int
    dgemm: int
    get_threads: int
    set_threads: int
    library: object = field(repr=False)   # the ctypes.CDLL: keeps it loaded
    path: str = ""
    core: str = ""                        # the kernel family it runs
    private: bool = False
    why: str = ""                         # how it was chosen, for `lazyrt doctor`
    blas: str = "OpenBLAS"                # or "MKL"
    version: str = ""                     # MKL's (2026.2)
    fallback: bool = False                # what won or was asked for did not load or run


def gemm_library(numpy_blas, kind: str = "large") -> Optional[GemmLibrary]:
    """The library lazyrt's matmuls of ``kind`` (:func:`product_kind`) call, given
    :func:`.c_gemm.numpy_openblas`'s answer (None: there is none)."""
    choice = gemm_choice(numpy_blas)
    return None if choice is None else choice[kind]


def gemm_choice(numpy_blas) -> Optional[dict]:
    """``{kind: GemmLibrary}`` for every kind of :data:`KINDS`, chosen once per
    process and override (None where NumPy has no OpenBLAS)."""
    if numpy_blas is None:
        return None
    library = os.environ.get("LAZYRT_BLAS", "").strip().lower()
    if library and library not in LIBRARIES:
        raise BackendError(f"$LAZYRT_BLAS={os.environ['LAZYRT_BLAS']!r} names no BLAS lazyrt "
                           f"calls: set it to one of {', '.join(LIBRARIES)}, or unset it")
    override = os.environ.get("LAZYRT_BLAS_CORETYPE", "").strip()
    if library == "mkl" and override:
        raise BackendError(f"$LAZYRT_BLAS=mkl and $LAZYRT_BLAS_CORETYPE={override} disagree: "
                           "the core type is OpenBLAS's; unset one of them")
    with _CHOICE_LOCK:  # two threads compiling at once measure and copy once
        return _chosen(override, numpy_blas, "" if library == "auto" else library)


#: what each kind's measurement timed, for the reasons `lazyrt doctor` prints
_PROBED = {f"{shape}{f64}": f"{'d' if f64 else 's'}gemm " + (
    "384^3 NN+NT+TN+TT" if shape == "large" else f"96^3 {shape[-2:].upper()}")
           for f64 in ("", " f64") for shape in _SHAPES}


@functools.lru_cache(maxsize=None)
def _chosen(override: str, numpy_blas, library: str = "") -> dict:
    lib = numpy_blas[0]
    own = _numpy_instance(numpy_blas)

    def every(chosen):
        return {kind: chosen for kind in KINDS}
    if override.lower() == "numpy":
        return every(replace(own, why="$LAZYRT_BLAS_CORETYPE=numpy"))
    mkl = c_mkl.mkl_path() if library != "openblas" else None
    if library == "mkl":
        return every(_forced_mkl(own, mkl))
    if os.environ.get("OPENBLAS_CORETYPE"):
        return every(replace(own, why=f"$OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} "
                                      "chose NumPy's kernels"))
    if override:
        return every(_private_or(own, _private(own, override),
                                 f"$LAZYRT_BLAS_CORETYPE={override}"))
    other = other_family(own.core, cpu_flags())
    no_mkl = "$LAZYRT_BLAS=openblas" if library else "no MKL installed (pip install mkl)"
    if other is None and mkl is None:
        return every(replace(own, why=f"OpenBLAS's own pick; no other kernel family to "
                                      f"measure here, and {no_mkl}"))
    try:
        measured = _measured(lib, other, mkl)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return every(replace(own, why=f"OpenBLAS's own pick (measuring failed: {e})",
                             fallback=True))
    names = {"": own.core, "other": other, "mkl": "MKL"}
    order = [c for c in PREFERENCE if c == "" or (c == "other" and other) or
             (c == "mkl" and mkl)]
    loaded: dict = {"": own}

    def instance(candidate):
        if candidate not in loaded:  # each one loaded once, and only where it won
            loaded[candidate] = _mkl_instance(mkl) if candidate == "mkl" else \
                _private(own, other)
        return loaded[candidate]
    chosen = {}
    for kind in KINDS:
        speeds = {c: measured[kind][other if c == "other" else c] for c in order}
        got, why = _pick(speeds, order, instance, names, _PROBED[kind])
        chosen[kind] = replace(got, why=why + ("" if mkl else f", {no_mkl}"),
                               fallback=got is not instance(_winner(speeds, order)))
    return chosen


def _pick(speeds: dict, order: list, instance, names: dict, probed: str):
    """(GemmLibrary, why) of the measured winner (:func:`_winner`) among the
    candidates of ``order`` that load (``instance(candidate)``: a GemmLibrary or
    the OSError that kept it from loading); NumPy's instance, first, always loads."""
    numbers = " vs ".join(f"{names[c]} {speeds[c]:.0f}" if speeds[c] > 0 else
                          f"{names[c]} (did not run)" for c in reversed(order))
    numbers += f" GF/s per core ({probed})"
    left, failed = list(order), ""
    while True:
        pick = _winner(speeds, left)
        got = instance(pick)
        if not isinstance(got, OSError):
            break
        failed += f", {names[pick]} won, but failed to load ({got})"
        left.remove(pick)
    head = "OpenBLAS's own pick, measured: " if pick == "" else "measured faster here: "
    return got, head + numbers + failed


def _winner(speeds: dict, order: list) -> str:
    """The first of ``order``, unless a later one beats the one chosen so far by
    :data:`MARGIN` (a candidate that did not run measures 0 and never wins)."""
    best = order[0]
    for candidate in order[1:]:
        if speeds[candidate] >= MARGIN * speeds[best] > 0:
            best = candidate
    return best


def other_family(core: str, flags) -> Optional[str]:
    """The kernel family of the other vector width this CPU runs, or None."""
    core = core.lower()
    if core in AVX512_CORES and {"avx2", "fma"} <= flags:
        return "Haswell"
    if core in AVX2_CORES and set(_AVX512_FLAGS) <= flags:
        return "SkylakeX"
    return None


#: the name prefixes of ILP64 OpenBLAS builds' exports (NumPy's wheels: ``scipy_``)
_PREFIXES = ("scipy_", "")


def symbol(lib, name: str) -> str:
    """The exported name of OpenBLAS function ``name`` (``cblas_sgemm``,
    ``openblas_get_num_threads``...) in ILP64 build ``lib``; OSError if none."""
    for prefix in _PREFIXES:
        if hasattr(lib, f"{prefix}{name}64_"):
            return f"{prefix}{name}64_"
    raise OSError(f"no ILP64 {name} in {lib._name}")


def address(lib, name: str) -> int:
    """The address of OpenBLAS function ``name`` in ``lib`` (see :func:`symbol`)."""
    return ctypes.cast(getattr(lib, symbol(lib, name)), ctypes.c_void_p).value


def _corename(lib) -> str:
    fn = getattr(lib, symbol(lib, "openblas_get_corename"))
    fn.restype = ctypes.c_char_p
    return fn().decode()


def _numpy_instance(numpy_blas) -> GemmLibrary:
    lib, sgemm, dgemm, get_threads, set_threads = numpy_blas
    return GemmLibrary(sgemm, dgemm, get_threads, set_threads, lib, lib._name, _corename(lib))


def _private(own: GemmLibrary, core: str):
    """A private single-threaded instance of ``own``'s library running ``core``, or
    the OSError that kept it from loading."""
    try:
        lib, path = _load_private(own.path, core)
    except OSError as e:
        return e
    return GemmLibrary(address(lib, "cblas_sgemm"), address(lib, "cblas_dgemm"), 0, 0, lib,
                       path, _corename(lib), True)


def _private_or(own: GemmLibrary, private, why: str) -> GemmLibrary:
    """``private`` (from :func:`_private`) chosen for ``why``, else NumPy's instance."""
    if isinstance(private, OSError):
        return replace(own, why=f"{why}, but its private copy failed to load ({private}): "
                                "NumPy's instance", fallback=True)
    return replace(private, why=why)


def _mkl_instance(path: str):
    """MKL at ``path``, single-threaded (:func:`.c_mkl.load`), or the OSError that
    kept it from loading."""
    try:
        lib, sgemm, dgemm, family, version = c_mkl.load(path)
    except OSError as e:
        return e
    return GemmLibrary(sgemm, dgemm, 0, 0, lib, path, family, True, blas="MKL", version=version)


def _forced_mkl(own: GemmLibrary, mkl: Optional[str]) -> GemmLibrary:
    """MKL for ``$LAZYRT_BLAS=mkl``, else NumPy's instance saying why not."""
    if mkl is None:
        return replace(own, why="$LAZYRT_BLAS=mkl, but no MKL is installed (pip install mkl): "
                                "NumPy's instance", fallback=True)
    got = _mkl_instance(mkl)
    if isinstance(got, OSError):
        return replace(own, why=f"$LAZYRT_BLAS=mkl, but MKL failed to load ({got}): "
                                "NumPy's instance", fallback=True)
    return replace(got, why="$LAZYRT_BLAS=mkl")


def _folder() -> cache.CacheFolder:
    root = cache.cache_root()
    return cache.CacheFolder(os.path.join(root, "blas"), root, what="BLAS library copies")


def _file_ident(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}"


def _library_key(path: str, mkl: Optional[str] = None) -> str:
    """The library files (OpenBLAS's, and MKL's where present), this host's CPU and
    the probe's text, hashed: what a measurement holds for (a lazyrt that times
    other products measures again)."""
    ident = _file_ident(path) + (f"\0{_file_ident(mkl)}" if mkl else "") + \
        f"\0{_host_cpu()}\0{_PROBE}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _measured(lib, other: Optional[str], mkl: Optional[str] = None) -> dict:
    """``{kind: {"": library's pick GF/s, other: GF/s, "mkl": GF/s}}`` (the last two
    where ``other`` and ``mkl`` are given) for every kind of :data:`KINDS`, from the
    cache or measured now. An MKL that fails to run measures 0 GF/s."""
    path, folder = lib._name, _folder()
    name = f"choice-{_library_key(path, mkl)}.json"
    candidates = [""] + ([other] if other else []) + (["mkl"] if mkl else [])
    found = folder.find(name)
    if found:
        try:
            with open(found) as f:
                kept = json.load(f)
            if set(kept) == set(KINDS) and all(set(v) == set(candidates) for v in kept.values()):
                return kept
        except (OSError, ValueError, TypeError):
            pass  # unreadable, or from a lazyrt that measured other things: measure
    openblas = (symbol(lib, "cblas_sgemm"), symbol(lib, "cblas_dgemm"),
                symbol(lib, "openblas_get_corename"))
    best: dict = {kind: {} for kind in KINDS}
    for _ in range(2):  # alternate, so all see the same machine; keep each one's best
        for core in candidates:
            if core == "mkl":
                try:
                    speeds = _probe(mkl, "mkl", (c_mkl.SGEMM, c_mkl.DGEMM, "mkl"))
                except (OSError, ValueError, subprocess.SubprocessError):
                    speeds = dict.fromkeys(KINDS, 0.0)  # OpenBLAS is measured all the same
            else:
                speeds = _probe(path, core, openblas)
            for kind in KINDS:
                best[kind][core] = max(best[kind].get(core, 0.0), speeds[kind])
    folder.write(name, json.dumps(best).encode())
    return best


def _probe(path: str, core: str, symbols) -> dict:
    """``{kind: GF/s}`` of one child process running ``core`` ("": the library's
    pick; "mkl": ``path`` is MKL's); ``symbols``: sgemm, dgemm, and OpenBLAS's
    corename or "mkl"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    if core and core != "mkl":
        env["OPENBLAS_CORETYPE"] = core
    done = subprocess.run([sys.executable, "-c", _PROBE, path, *symbols], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    if not isinstance(result, dict) or not {"core", "gflops"} <= set(result) or \
            set(result["gflops"]) != set(KINDS):
        raise ValueError(f"the probe printed {done.stdout.strip()[-200:]!r}")
    if core == "mkl" and not c_mkl.family_from_maps(result["core"]):
        raise ValueError("MKL loaded none of its kernel libraries")
    if core and core != "mkl" and result["core"].lower() != core.lower():
        raise ValueError(f"OpenBLAS ran {result['core']} when asked for {core}")
    return {kind: float(v) for kind, v in result["gflops"].items()}


def _load_private(path: str, core: str):
    """(CDLL, path) of a copy of the library at ``path`` loaded with kernel family
    ``core`` and one thread. The copy is verified byte for byte before loading."""
    folder = _folder()
    st = os.stat(path)
    name = f"{os.path.basename(path).rsplit('.so', 1)[0]}-{st.st_size}-{st.st_mtime_ns}.so"
    with open(path, "rb") as f:
        data = f.read()
    copy = folder.find(name)
    if copy is None or not _same_bytes(copy, data):
        copy = folder.write(name, data)
    with _LOCK:  # OpenBLAS reads these when it loads, so set them just then
        saved = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")}
        os.environ["OPENBLAS_CORETYPE"], os.environ["OPENBLAS_NUM_THREADS"] = core, "1"
        try:
            lib = ctypes.CDLL(copy, mode=os.RTLD_LOCAL)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if lib._handle == ctypes.CDLL(path)._handle:
        raise OSError("the loader returned NumPy's own instance for the copy")
    if _corename(lib).lower() != core.lower():
        raise OSError(f"it runs {_corename(lib)}, not {core}")
    return lib, copy


def _same_bytes(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False
