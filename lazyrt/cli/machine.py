"""``lazyrt cache``, ``lazyrt doctor`` and ``lazyrt bench``: the machine and
the kernel cache, rather than a script."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from time import perf_counter

from . import output
from .script import CommandError, UsageError


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


# --- cache ------------------------------------------------------------------------------

def cmd_cache(args) -> int:
    from .. import cache
    root = cache.cache_root()
    if args.action == "info":
        print(f"cache: {root}" + ("" if os.path.isdir(root) else " (not created yet)"))
        if os.path.isdir(root):
            st = os.stat(root)
            print(f"mode {stat.filemode(st.st_mode)}, owner uid {st.st_uid}"
                  f"{' (you)' if st.st_uid == os.getuid() else ' (NOT you: lazyrt refuses it)'}")
        summary = cache.summary()
        rows = [[b, n, _size(size)] for b, (n, size) in sorted(summary.items())
                if args.backend in (None, b)]
        total = sum(size for _, (n, size) in summary.items())
        output.table(["backend", "entries", "size"], rows or [["-", 0, "0 B"]])
        print(f"total {_size(total)}")
        return 0
    if args.action == "list":
        found = cache.entries(args.backend)
        output.table(["backend", "kernel", "entry", "files", "size"],
                     [[e.backend, e.kernel, e.name, len(e.paths), _size(e.size)] for e in found])
        print(f"{len(found)} entries in {root}")
        return 0
    if args.action == "verify":
        total = len(cache.entries(args.backend))
        problems = cache.verify(args.backend)
        bad = {}
        for entry, why in problems:
            print(f"removing {entry.backend} {entry.name}: {why}")
            bad[(entry.backend, entry.name)] = entry
        freed = cache.clear(only=list(bad.values()))
        print(f"verified {total} entries in {root}: {len(bad)} not trusted, "
              f"{_size(freed)} removed")
        return 0
    freed = cache.clear(args.backend)
    print(f"cleared {_size(freed)} from {root}"
          + (f" ({args.backend} entries)" if args.backend else ""))
    return 0


# --- doctor -------------------------------------------------------------------------------
#
# Each check says pass, skip (an optional part that is absent here, as expected: no GPU, no
# triton or jax installed), warn (lazyrt works, slower: no AVX2, no OpenBLAS) or FAIL (a part
# lazyrt needs is broken or missing). `lazyrt doctor` exits 1 when any check fails.

PASS, SKIP, WARN, FAIL = "pass", "skip", "warn", "FAIL"

_OPENMP_PROBE = r"""
#include <stdio.h>
#include <omp.h>
int main(void) { int n = 0;
#pragma omp parallel reduction(+:n)
  n += 1;
  printf("%d\n", n); return n < 1; }
"""


def _check_c():
    import numpy as np
    import lazyrt as lr
    from ..backends import c_compiler
    problem = c_compiler.compiler_problem()
    if problem:
        return FAIL, problem
    cc = " ".join(c_compiler.compiler_command())
    try:
        t = perf_counter()
        with lr.backend("c"):
            got = (lr.tensor(np.arange(8, dtype=np.float32)) * 2 + 1).sum().item()
        ms = (perf_counter() - t) * 1e3
    except Exception as e:
        return FAIL, f"{cc}: a tiny kernel failed: {str(e).splitlines()[0]}"
    if got != 64.0:
        return FAIL, f"{cc}: a tiny kernel computed {got}, not 64.0"
    return PASS, f"{cc}: compiled and ran a kernel ({ms:.0f} ms)"


def _check_openmp():
    from ..backends import c_compiler
    if c_compiler.compiler_problem():
        return SKIP, "no C compiler (see above)"
    cc = c_compiler.compiler_command()
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "omp.c"), os.path.join(d, "omp")
        with open(src, "w") as f:
            f.write(_OPENMP_PROBE)
        built = subprocess.run(cc + ["-fopenmp", src, "-o", exe], capture_output=True, text=True)
        if built.returncode:  # the c backend compiles every kernel with -fopenmp
            return FAIL, f"-fopenmp does not build: {built.stderr.strip().splitlines()[-1:]}"
        ran = subprocess.run([exe], capture_output=True, text=True)
        if ran.returncode:
            return FAIL, "an OpenMP program did not run"
    return PASS, f"{ran.stdout.strip()} threads"


def _check_vectors():
    import platform
    from ..backends.c_compiler import cpu_flags
    machine = platform.machine()
    flags = cpu_flags()
    if not flags:
        return PASS, f"{machine} (flags unknown on this platform)"
    if machine in ("aarch64", "arm64"):
        return (PASS if "asimd" in flags else WARN), \
            f"{machine}: NEON {'yes' if 'asimd' in flags else 'no: kernels run scalar'}"
    from ..backends.c import vector_width
    have = [x for x in ("sse4_2", "avx2", "fma", "avx512f") if x in flags]
    return (PASS if "avx2" in flags else WARN), \
        f"{machine}: {', '.join(have) or 'none of SSE4.2/AVX2/AVX-512'}" \
        + ("" if "avx512f" in flags else " (no AVX-512)") \
        + f"; kernels tuned for {vector_width()}-bit vectors"


def _check_parallel():
    from ..backends.c import CBackend
    from ..backends.c_parallel import NEVER, measurement
    m = measurement(CBackend().compiler)
    if "why" in m:
        return WARN, f"kernels of more than {m['n']} elements run on the team: {m['why']}"
    if m["n"] == NEVER:
        return PASS, f"{m['threads']} thread(s): every kernel runs on one"
    return PASS, (f"kernels of more than {m['n']} elements run on {m['threads']} threads "
                  f"(measured break-even here)")


def _check_blas():
    from ..backends.c_blas import KINDS, SMALL_MNK, gemm_choice
    from ..backends.c_gemm import numpy_openblas
    from ..errors import BackendError
    found = numpy_openblas()
    if found is None:
        return WARN, "NumPy's OpenBLAS (ILP64) not found: matmul goes through np.matmul"
    try:
        choice = gemm_choice(found)
    except BackendError as e:  # $LAZYRT_BLAS set to something lazyrt does not call
        return FAIL, str(e)

    def which(chosen):
        if chosen.blas == "MKL":
            name = f"MKL {chosen.version} {chosen.core}, sequential"
        else:
            name = f"OpenBLAS {chosen.core}, " + ("a private single-threaded copy"
                                                  if chosen.private else "NumPy's instance")
        return f"{name} ({chosen.why})"

    def products(kind):
        shape = kind.removesuffix(" f64")
        size = "large" if shape == "large" else f"small {shape[-2:].upper()}"
        return f"{'float64' if kind.endswith(' f64') else 'float32'} {size}"
    first = choice[KINDS[0]]
    if all(choice[kind] == first for kind in KINDS):
        parts = [f"every product: {which(first)}"]
    else:
        parts = [f"{products(kind)}: {which(choice[kind])}" for kind in KINDS]
    parts.append(f"small: M*N*K <= {SMALL_MNK:,}; from "
                 + ", ".join(dict.fromkeys(chosen.path for chosen in choice.values())))
    # a library that won or was asked for did not load, or the measurement failed
    fallback = any(chosen.fallback for chosen in choice.values())
    return (WARN if fallback else PASS), "; ".join(parts)


def _gpu_present() -> bool:
    """A GPU here, whether or not triton is installed (the device nodes, then torch)."""
    from ..backends.triton import cuda_device_present
    if cuda_device_present():
        return True
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd")


def _triton_kernel_on_gpu() -> str:
    """Compile and run a tiny kernel on the triton backend; its GPU's name."""
    import numpy as np
    import lazyrt as lr
    import torch
    with lr.backend("triton"):
        got = (lr.tensor(np.arange(8, dtype=np.float32)) * 2 + 1).sum().item()
    if got != 64.0:
        raise RuntimeError(f"a tiny kernel computed {got}, not 64.0")
    return torch.cuda.get_device_name(0)


def _check_triton():
    try:
        import triton
    except ImportError:
        if _gpu_present():  # lazyrt cannot use the GPU it sees
            return WARN, "a GPU is here, but triton is not installed (pip install triton)"
        return SKIP, "not installed, and no GPU here (optional: pip install triton)"
    from ..backends.triton import cuda_device_present
    if not cuda_device_present():
        if _gpu_present():
            return FAIL, (f"triton {triton.__version__}: a GPU device node is here, but torch "
                          "cannot use it (torch.cuda.is_available() is False)")
        return SKIP, (f"triton {triton.__version__}: no GPU here (TRITON_INTERPRET=1 runs "
                      "the triton backend on the CPU, slowly)")
    try:
        t = perf_counter()
        name = _triton_kernel_on_gpu()
    except Exception as e:
        return FAIL, f"triton {triton.__version__}: a tiny kernel failed: {str(e).splitlines()[0]}"
    return PASS, (f"triton {triton.__version__} on {name}: compiled and ran a kernel "
                  f"({(perf_counter() - t) * 1e3:.0f} ms)")


def _check_jax():
    try:
        import jax
    except ImportError:
        return SKIP, "not installed (optional: pip install 'lazyrt[jax]')"
    return PASS, f"jax {jax.__version__}: " + ", ".join(str(d) for d in jax.devices())


def _check_cache():
    from .. import cache
    root = cache.cache_root()
    if not os.path.isdir(root):
        parent = os.path.dirname(root)
        ok = os.access(parent if os.path.isdir(parent) else os.path.expanduser("~"), os.W_OK)
        return (PASS, f"{root}: not created yet") if ok else \
            (WARN, f"{root}: not created yet, and its folder is not writable: kernels go to "
                   "a temporary cache, compiled again by every process")
    st = os.stat(root)
    if st.st_uid != os.getuid():
        return FAIL, f"{root} is owned by uid {st.st_uid}: lazyrt refuses it"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return FAIL, f"{root} is writable by others ({stat.filemode(st.st_mode)}): lazyrt refuses it"
    if not os.access(root, os.W_OK):
        return WARN, f"{root} is not writable: kernels go to a temporary cache"
    total = sum(size for _, size in cache.summary().values())
    return PASS, f"{root} ({stat.filemode(st.st_mode)}, {_size(total)})"


def cmd_doctor(args) -> int:
    import lazyrt as lr
    checks = [("C compiler", _check_c), ("OpenMP", _check_openmp),
              ("CPU vectors", _check_vectors), ("parallel kernels", _check_parallel),
              ("BLAS", _check_blas),
              ("Triton", _check_triton), ("JAX", _check_jax), ("kernel cache", _check_cache)]
    rows = []
    for name, check in checks:
        try:
            status, detail = check()
        except Exception as e:  # a probe that breaks is a failed line, not a crash
            status, detail = FAIL, f"{type(e).__name__}: {e}"
        rows.append([status, name, detail])
    output.table(["", "check", "detail"], rows)
    failed = [name for status, name, _ in rows if status == FAIL]
    try:
        default = lr.backends.describe(lr.runtime.current_backend_name())
    except lr.BackendError as e:  # $LAZYRT_BACKEND names a backend unavailable here
        default = f"none: {e}"
        failed.append("default backend")
    print(f"backends here: {', '.join(lr.available_backends())}; default: {default}")
    if failed:
        print(f"lazyrt doctor: {len(failed)} failed: {', '.join(failed)}")
        return 1
    return 0


# --- bench --------------------------------------------------------------------------------

#: the suites of ``python -m bench`` (bench/__main__.py's SUITES; a test keeps them equal)
BENCH_SUITES = ("record", "cpu", "gpu", "torch", "planning")

def _checkout() -> str:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isfile(os.path.join(here, "bench", "__main__.py")):
        raise CommandError("the benchmarks live in a source checkout's bench/ folder, which "
                           f"is not next to this lazyrt ({here}): run it from a git clone")
    return here


def cmd_bench(args) -> int:
    root = _checkout()
    suites = BENCH_SUITES if args.suite == "all" else (args.suite,)
    if args.json and len(suites) > 1:
        raise UsageError("--json names one file: choose one --suite")
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    code = 0
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=output.console(stderr=True), transient=False) as bar:
        task = bar.add_task("bench", total=len(suites))
        for suite in suites:
            bar.update(task, description=f"suite {suite}")
            cmd = [sys.executable, "-m", "bench", "--suite", suite]
            if args.json:
                cmd += ["--json", os.path.abspath(args.json)]
            if args.plot:
                cmd += ["--png", os.path.abspath(args.plot)]
            if args.quick:
                cmd.append("--quick")
            code = subprocess.run(cmd, cwd=root).returncode or code
            bar.advance(task)
    return code

