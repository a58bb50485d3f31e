#!/usr/bin/env bash
# One prepared run on a lent GPU machine (see benchmarks/RESULTS.md): the core benchmark on
# its CPU pinned to 2 cores (a clean stand-in for the 2-core dev machine), the same on the
# GPU, the 20k x 600 x 64 point on 2 CPU cores, and batched Hessian-vector products on the
# GPU (bench_uncertainty --quick). Writes logs/JSON into $OUT.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/dm-device}; mkdir -p "$OUT"
nvidia-smi -L 2>&1 | tee "$OUT/device.txt"; python3 -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tee -a "$OUT/device.txt"
JAX_PLATFORMS=cpu taskset -c 0,1 timeout 150 python3 benchmarks/bench_core.py --quick --out "$OUT/core_cpu2.json" 2>&1 | tee "$OUT/core_cpu2.log"
timeout 150 python3 benchmarks/bench_core.py --out "$OUT/core_gpu.json" 2>&1 | tee "$OUT/core_gpu.log"
JAX_PLATFORMS=cpu taskset -c 0,1 timeout 100 python3 benchmarks/bench_scaling.py --child 20000 600 64 2>&1 | tee "$OUT/scaling_cpu2_20k.log"
timeout 120 python3 benchmarks/bench_uncertainty.py --quick --out "$OUT/uncertainty_gpu.json" 2>&1 | tee "$OUT/uncertainty_gpu.log"
