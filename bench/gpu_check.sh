#!/usr/bin/env bash
# One check for a lent GPU machine (nothing is downloaded or installed there):
# first the ahead-of-time check for the device's own target (every kernel the
# triton tests generate compiled for it, under the interpreter: a compile
# failure shows here in seconds, with its ptxas resources), then the triton
# backend's tests WITHOUT the interpreter (real Triton compiles on the GPU),
# the backend-parametrized suite restricted to triton, then the GPU
# micro-benchmarks, and last a table of modelled (bench/roofline.py) and
# measured times side by side. Fits in 8 minutes: every stage has its own
# `timeout`. Usage (repo root): bash bench/gpu_check.sh [python]
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

# the device's own target, e.g. cuda:90 on an H200 (cuda:90 when torch cannot tell)
TARGET=$("$PY" -c "import torch; m, n = torch.cuda.get_device_capability(0); print(f'cuda:{m}{n}')" \
         2>/dev/null || echo cuda:90)
echo "AOT target: $TARGET"
stage aot-check 150 env TRITON_INTERPRET=1 LAZYRT_TRITON_AOT_TARGET="$TARGET" \
    "$PY" -m pytest -q -x -p no:cacheprovider -n 8 tests/test_triton_backend.py tests/test_triton_aot.py

stage triton-tests 90 "$PY" -m pytest -q -x -p no:cacheprovider tests/test_triton_backend.py
stage suite-triton 120 "$PY" -m pytest -q -p no:cacheprovider -k triton tests
unset LAZYRT_TRITON_AUTOTUNE LAZYRT_TEST_BACKENDS LAZYRT_HYPOTHESIS_PROFILE
stage bench-gpu 240 "$PY" -m bench --suite gpu --quick --json "$LOG/gpu.json"

echo "---- failures (first 40 lines per test stage) ----"
for s in aot-check triton-tests suite-triton; do
    grep -E "^(FAILED|ERROR)" "$LOG/$s.log" | head -40
done
echo "---- bench table ----"
tail -n 40 "$LOG/bench-gpu.log"
echo "---- modelled vs measured (ms) ----"
"$PY" - "$LOG/gpu.json" <<'PYEOF' 2>&1 || echo "(no bench results: see $LOG/bench-gpu.log)"
import json, sys
payload = json.load(open(sys.argv[1]))
roof = payload["roofline"]
impls = ["lazyrt-triton", "torch eager", "torch.compile"]
print(f"{'case':<32s} {'model':>8s} " + " ".join(f"{i:>14s}" for i in impls))
for r in roof["rows"]:
    cells = [f"{r[i]:14.3f}" if r.get(i) is not None else f"{'-':>14s}" for i in impls]
    print(f"{r['case']:<32s} {r['model_ms']:8.3f} " + " ".join(cells))
print("model:", roof["bandwidth"] + ";", roof["peaks"])
PYEOF
echo "---- lazyrt gpu check (logs in $LOG) ----"
printf '%s\n' "${ROWS[@]}"
