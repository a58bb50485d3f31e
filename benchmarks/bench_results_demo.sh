#!/bin/sh
# End-to-end demo with and without figures, each in a fresh process; prints the demo's own
# step times. Usage: sh benchmarks/bench_results_demo.sh [N_CELL]   (run from the repo root)
N=${1:-2500}
for flag in --no-plots ""; do
  OUT=$(mktemp -d)/demo
  /usr/bin/time -f "wall %e s  user %U s" python -m dopplermap.cli -v demo --n-cell "$N" --out "$OUT" $flag 2>&1 \
    | grep -E "write results|chi2|wall|precompute:|solve:"
  python - "$OUT/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print({k: round(s[k], 3) for k in ("write_time", "plot_time", "save_time", "total_time")})
PY
done
