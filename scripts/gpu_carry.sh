#!/usr/bin/env bash
# Fill .gpu_carry/ (ignored by git) with what scripts/gpu_check.sh reads on a lent GPU machine
# that has no ../shared and no simpy: the Azure conv trace and a simpy wheel. Pass it in the
# device tool's `carry` (docs/validation.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${SIMSERVE_DATA_DIR:-../shared/data}
if [ ! -f "$DATA/traces/azure_llm_2023_conv.csv" ]; then
  echo "error: $DATA/traces/azure_llm_2023_conv.csv: no such file (set SIMSERVE_DATA_DIR)" >&2
  exit 2
fi
mkdir -p .gpu_carry/data/traces
cp "$DATA/traces/azure_llm_2023_conv.csv" .gpu_carry/data/traces/
python -m pip download -q --no-deps --only-binary=:all: -d .gpu_carry "simpy>=4.1"
ls -la .gpu_carry .gpu_carry/data/traces
