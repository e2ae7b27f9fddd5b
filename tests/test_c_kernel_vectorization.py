"""The C backend's generated kernels vectorize where they call math functions.

The header functions vectorizing on their own (tests/test_c_math.py) is not
enough: a generated kernel puts several of them in one loop beside loads,
reductions and casts, and one statement GCC cannot vectorize keeps the whole
loop scalar (an out-of-line erf made GELU 15x slower). So each workload here
is recorded through lazyrt, its kernels' generated C is compiled with the
backend's own flags and GCC's vectorization report, and every loop the
emitter marked `#pragma omp [parallel for] simd` must be reported vectorized.
"""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import lazyrt as lr
from lazyrt.backends.c_compiler import CCompiler


def _is_gcc():
    cc = shutil.which(os.environ.get("CC", "cc"))
    return cc is not None and b"Free Software Foundation" in subprocess.run(
        [cc, "--version"], capture_output=True).stdout


pytestmark = pytest.mark.skipif(not _is_gcc(), reason="the -fopt-info report is GCC's")

#: float math the C backend claims vectorized, float32 and float64
UNARY = ["exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "tanh", "sigmoid", "erf",
         "erfc", "softplus", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
         "asinh", "acosh", "atanh"]
BINARY = ["pow", "atan2", "logaddexp"]
#: float64 functions that still call libm (a scalar call: the loop cannot vectorize)
F64_LIBM = {"erf", "erfc", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh",
            "logaddexp"}


def _workloads(dtype):
    rng = np.random.default_rng(0)
    x = lr.tensor(rng.uniform(0.1, 0.9, (8, 300)).astype(dtype))
    y = lr.tensor(rng.uniform(0.1, 0.9, (8, 300)).astype(dtype))
    skip = F64_LIBM if dtype == np.float64 else set()
    fns = {name: (lambda n: lambda: getattr(lr, n)(x))(name) for name in UNARY if name not in skip}
    fns.update({name: (lambda n: lambda: getattr(lr, n)(x, y))(name) for name in BINARY
                if name not in skip})
    fns["softmax"] = lambda: lr.nn.softmax(x)
    if "erf" not in skip:
        fns["gelu"] = lambda: lr.nn.gelu(x)
    fns["gelu_tanh"] = lambda: lr.nn.gelu(x, approximate="tanh")
    fns["layer_norm"] = lambda: lr.nn.layer_norm(x, (300,))
    if dtype == np.float32:
        # several big functions in one loop (GELU forward and backward, SiLU)
        fns["gelu_and_grad"] = lambda: lr.nn.gelu(x) * lr.erf(x * 0.7) + lr.exp(-x * x) * x
        fns["silu_tanh_log"] = lambda: lr.nn.silu(x) + lr.tanh(x) * lr.log(x) + lr.tanh(y)
    return fns


def _unvectorized_simd_loops(source, tmp_path):
    """Line numbers of the `#pragma omp simd` loops GCC did not vectorize."""
    src = tmp_path / "kernel.c"
    src.write_text(source)
    cc = CCompiler(cache_dir=str(tmp_path))
    report = subprocess.run([os.environ.get("CC", "cc"), *cc.flags, "-fopt-info-vec-optimized",
                             "-o", str(tmp_path / "kernel.so"), str(src)],
                            capture_output=True, text=True, check=True).stderr
    vectorized = {int(m) for m in re.findall(r"kernel\.c:(\d+):\d+: optimized: loop vectorized",
                                             report)}
    lines = source.splitlines()
    missed = []
    for i, line in enumerate(lines):
        if not re.match(r"#pragma omp (parallel )?(for )?simd", line.strip()):
            continue
        # the loop runs from the `for` after the pragma to its closing brace; GCC
        # names the pragma's line (reductions) or one inside the loop (1-based)
        depth, end = 0, i + 1
        for end in range(i + 1, len(lines)):
            depth += lines[end].count("{") - lines[end].count("}")
            if depth <= 0 and "{" in "".join(lines[i + 1:end + 1]):
                break
        if not vectorized & set(range(i + 1, end + 2)):
            missed.append(i + 2)
    return missed


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generated_kernels_with_math_are_vectorized(dtype, tmp_path):
    lr.set_backend("c")
    failures = {}
    for name, fn in _workloads(dtype).items():
        lr.sync(fn())
        for k in lr.debug.last_record().kernels:
            if k.language != "c" or "lz_" not in k.source:
                continue
            missed = _unvectorized_simd_loops(k.source, tmp_path)
            if missed:
                failures[f"{name}: {k.name}"] = [k.source.splitlines()[n - 1].strip()
                                                 for n in missed]
    assert failures == {}
