#!/usr/bin/env bash
# One prepared run on a GPU machine (see benchmarks/RESULTS.md), under 9.5 minutes: the core
# benchmark on its host CPU pinned to 2 cores (machine class h200host-cpu2, an unloaded
# stand-in for a 2-core VM) and on the GPU, the Newton solver against L-BFGS-B on the GPU at
# both sizes, and the user's end-to-end view (invert-seed, invert of the small real-layout
# set) on the GPU (the seed's own script needs its jaxopt environment, absent there: skipped).
# PART=2 instead runs 20k x 600 x 64 on 2 CPU cores and the batched Hessian-vector products on
# the GPU. PART=many times many solves on the GPU (bench_device_many.py: a single solve, a
# 64-member batch and a calibration, each first and compiled) into many-h200.json. CPU=1 runs
# PART=many on the CPU at the demo size instead (a check of the script where no GPU is:
# many-cpu-quick.json). Writes logs/JSON into $OUT, named as in benchmarks/results/ (<benchmark>-<machine>.json;
# copy the ones a figure in RESULTS.md comes from there).
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/dm-device}; mkdir -p "$OUT"
if [ "${CPU:-0}" = 1 ]; then
  export JAX_PLATFORMS=cpu
  timeout 550 python3 benchmarks/bench_device_many.py --quick --out "$OUT/many-cpu-quick.json" 2>&1 | tee "$OUT/many-cpu-quick.log"
  exit "${PIPESTATUS[0]}"
fi
nvidia-smi -L 2>&1 | tee "$OUT/device.txt"; python3 -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tee -a "$OUT/device.txt"
if [ "${PART:-1}" = 1 ]; then
  JAX_PLATFORMS=cpu taskset -c 0,1 timeout 150 python3 benchmarks/bench_core.py --quick --out "$OUT/core-h200host-cpu2-quick.json" 2>&1 | tee "$OUT/core-h200host-cpu2-quick.log"
  timeout 150 python3 benchmarks/bench_core.py --out "$OUT/core-h200.json" 2>&1 | tee "$OUT/core-h200.log"
  timeout 120 python3 benchmarks/bench_newton.py --sizes seed large --tols 1e-5 1e-8 --out "$OUT/newton-h200.json" 2>&1 | tee "$OUT/newton-h200.log"
  timeout 120 python3 benchmarks/bench_end_to_end.py --skip-seed --sizes seed --workdir "$OUT/e2e" --out "$OUT/end_to_end-h200.json" 2>&1 | tee "$OUT/end_to_end-h200.log"
elif [ "${PART}" = many ]; then
  timeout 500 python3 benchmarks/bench_device_many.py --out "$OUT/many-h200.json" 2>&1 | tee "$OUT/many-h200.log"
else
  JAX_PLATFORMS=cpu taskset -c 0,1 timeout 100 python3 benchmarks/bench_scaling.py --child 20000 600 64 2>&1 | tee "$OUT/scaling-h200host-cpu2-20k.log"
  timeout 120 python3 benchmarks/bench_uncertainty.py --quick --out "$OUT/uncertainty-h200-quick.json" 2>&1 | tee "$OUT/uncertainty-h200-quick.log"
fi
