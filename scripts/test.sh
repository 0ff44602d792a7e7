#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run it.
# torch is pinned first so the extras below do not pull a CUDA build of gigabytes.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,hf,predictor,real,ray]"
python -m pytest -q "$@"
