#!/usr/bin/env bash
# The GPU check (docs/validation.md): on one CUDA GPU, run the GPU tests, the engine benchmark,
# the profile, the calibration, the validation of vanilla / orca / vllm / sarathi on 150 Azure
# conv requests, a calibration refitted on the replays' steps, and write one report
# (OUT/report.md, OUT/report.json) with issue 24's targets marked met or not, and each replay's
# host pace (eager vs CUDA-graph steps against the model). About 5 minutes on an H200; longer
# when the machine's CPU is slow (the eager phases run at its pace). Every phase runs even if an
# earlier one failed; each writes OUT/<phase>.log.
#
#   bash scripts/gpu_check.sh [OUT]          # default OUT: results/gpu_check
#   GPU_CHECK_SKIP="tests bench bench_eager refit" bash scripts/gpu_check.sh OUT
#                                            # skip phases (a short rerun of the validation)
#
# Reads the Azure conv trace from $SIMSERVE_DATA_DIR/traces (default ../shared/data). On a lent
# GPU machine that has neither ../shared nor simpy, `bash scripts/gpu_carry.sh` first: it fills
# the ignored folder .gpu_carry/ (the trace and a simpy wheel), which this script then uses.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu_check}
PY=${PYTHON:-python3}
if [ -e "$OUT" ] && [ ! -d "$OUT" ]; then
  echo "error: OUT='$OUT': exists and is not a folder" >&2; exit 2
fi
mkdir -p "$OUT"
: > "$OUT/phases.tsv"
if [ -d .gpu_carry ]; then
  export SIMSERVE_DATA_DIR=${SIMSERVE_DATA_DIR:-$PWD/.gpu_carry/data}
  if ! $PY -c "import simpy" 2>/dev/null && ls .gpu_carry/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --target /tmp/gpu_check_site .gpu_carry/*.whl
    export PYTHONPATH=/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}
  fi
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

phase() {  # phase NAME COMMAND...: run it, log it, time it, never stop the script
  local name=$1; shift
  case " ${GPU_CHECK_SKIP:-} " in *" $name "*) echo "== $name: skipped"; return 0;; esac
  local start=$(date +%s%N)
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%s\t%d.%01d s\trc=%d\n' "$name" $((ms / 1000)) $(((ms % 1000) / 100)) "$rc" \
    >> "$OUT/phases.tsv"
  echo "== $name: rc=$rc, $((ms / 1000)) s"
  tail -n 25 "$OUT/$name.log"
}

GPU=$($PY -c "import torch; n = torch.cuda.get_device_name(); \
print('H200' if 'H200' in n else 'H100-80GB' if 'H100' in n else 'A100-80GB')")
phase env $PY - "$OUT/env.json" <<'PYEOF'
import json, subprocess, sys
import torch
try:
    import triton
    triton_version = triton.__version__
except Exception as exc:  # reported, not fatal: the paged kernels need it
    triton_version = f"missing ({exc})"
driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                        capture_output=True, text=True).stdout.strip()
env = {"device_name": torch.cuda.get_device_name(), "torch": torch.__version__,
       "cuda": torch.version.cuda, "triton": triton_version, "driver": driver,
       "python": sys.version.split()[0]}
json.dump(env, open(sys.argv[1], "w"), indent=2)
print(env)
PYEOF
phase tests $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_real_gpu.py \
  tests/test_real_kernels.py --junitxml="$OUT/tests.xml"
phase bench $PY -m benchmarks.real_engine --model llama-2-7b --device cuda --dtype bf16 \
  --gpu "$GPU" --reps 10 --out "$OUT/bench.json"
phase bench_eager $PY -m benchmarks.real_engine --model llama-2-7b --device cuda --dtype bf16 \
  --gpu "$GPU" --reps 5 --batches 1 64 --no-cuda-graphs --out "$OUT/bench_eager.json"
phase profile $PY -m real.profile --model llama-2-7b --device cuda --dtype bf16 --reps 3 \
  --out "$OUT/profile.csv"
phase calibrate $PY -m real.calibrate "$OUT/profile.csv" --gpu "$GPU" --out "$OUT/calibration.json"
phase validate $PY -m experiments.validate experiments/configs/validate_gpu.yaml \
  --calibration "$OUT/calibration.json" --out "$OUT/validate" --set "cluster.gpu=$GPU"
phase refit timeout 120 $PY -m real.calibrate "$OUT/profile.csv" --gpu "$GPU" --no-learned \
  --steps "$OUT"/validate/runs/*__real --out "$OUT/calibration_steps.json"
$PY -m real.check_report "$OUT"
