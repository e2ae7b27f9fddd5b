#!/usr/bin/env bash
# One check for a lent GPU machine (nothing is downloaded there): the triton
# backend's tests WITHOUT the interpreter (real Triton compiles on the GPU),
# the backend-parametrized suite restricted to triton, then the GPU
# micro-benchmarks. Fits in 8 minutes: every stage has its own `timeout`.
# Usage (repo root): bash bench/gpu_check.sh [python]   -> table last.
set -u
cd "$(dirname "$0")/.."
PY="${1:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"
export TRITON_INTERPRET=0            # real kernels (conftest only defaults it to 1)
export LAZYRT_TEST_BACKENDS=triton
export LAZYRT_HYPOTHESIS_PROFILE=quick
export LAZYRT_TRITON_AUTOTUNE=0      # tests: first config only (autotuning is for the bench)
LOG="${TMPDIR:-/tmp}/lazyrt-gpu-check.$$"
mkdir -p "$LOG"
declare -a ROWS

stage() {  # stage NAME SECONDS CMD...
    local name="$1" limit="$2"; shift 2
    local t0=$SECONDS rc
    timeout --kill-after=10 "$limit" "$@" >"$LOG/$name.log" 2>&1
    rc=$?
    local summary
    summary=$(grep -E "passed|failed|error|skipped" "$LOG/$name.log" | tail -1 | tr -s ' ' | cut -c1-70)
    [ "$rc" = 124 ] && summary="TIMEOUT after ${limit}s; $summary"
    ROWS+=("$(printf '%-14s rc=%-4s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$summary")")
}

"$PY" - <<'PYEOF' 2>&1 | tee "$LOG/env.log"
import torch, triton
print("torch", torch.__version__, "triton", triton.__version__,
      "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
PYEOF

stage triton-tests 90 "$PY" -m pytest -q -x -p no:cacheprovider tests/test_triton_backend.py
stage suite-triton 120 "$PY" -m pytest -q -p no:cacheprovider -k triton tests
unset LAZYRT_TRITON_AUTOTUNE LAZYRT_TEST_BACKENDS LAZYRT_HYPOTHESIS_PROFILE
stage bench-gpu 240 "$PY" -m bench --suite gpu --quick

echo "---- failures (first 40 lines per test stage) ----"
for s in triton-tests suite-triton; do
    grep -E "^(FAILED|ERROR)" "$LOG/$s.log" | head -40
done
echo "---- bench table ----"
tail -n 40 "$LOG/bench-gpu.log"
echo "---- lazyrt gpu check (logs in $LOG) ----"
printf '%s\n' "${ROWS[@]}"
