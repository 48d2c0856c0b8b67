#!/usr/bin/env bash
# The GPU measurement of issue 6, as one script for the device machine:
#   1. correctness of the CUDA paths (Triton kernel and chunked torch) against the plain head;
#   2. benchmarks/head.py in GPU mode (BERT-base and ModernBERT-base shapes, bf16).
# Usage (repository root): OUT=/some/folder bash benchmarks/gpu.sh
set -euo pipefail
OUT="${OUT:-/tmp/spladekit-gpu}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
"$PY" -m pytest tests/model/test_fused.py -q -p no:cacheprovider -k cuda 2>&1 | tee "$OUT/tests-cuda.txt"
"$PY" benchmarks/head.py --mode gpu --out "$OUT/head-gpu.json" 2> "$OUT/head-gpu.log" | tee "$OUT/head-gpu.md"
