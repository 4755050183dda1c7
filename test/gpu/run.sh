#!/usr/bin/env bash
# Runs the GPU backend's tests and the tsdg-bench sweeps in one device
# run. Started from the project root on the GPU machine after a local build
# whose binaries were copied to BIN (default .device/):
#   tsdg_gpu_tests, tsdg-bench, pg_tsdg_cuda.so
# Usage: test/gpu/run.sh [tests|memcheck|bench-small|bench-128|bench-96|bench|all] ...
# Logs and JSON go to $OUT (default ./gpu-out).
set -uo pipefail

BIN=${BIN:-.device}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0

step_tests() {
  echo "== GPU tests"
  timeout 500 "$BIN/tsdg_gpu_tests" --gtest_output="json:$OUT/gpu_tests.json" > "$OUT/gpu_tests.log" 2>&1
  local rc=$?
  grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|recall|Failure|Expected|actual' "$OUT/gpu_tests.log"
  [ $rc -eq 0 ] || status=1
}

# Every kernel (brute force, GNND, GGM, both diversification stages, both
# searches: batch 2000 is above the small-batch limit at d = 36, batch 1
# below it) on a small set, under memcheck.
step_memcheck() {
  echo "== compute-sanitizer memcheck (small case)"
  timeout 500 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 \
    "$BIN/tsdg-bench" --backend cuda --rows 3000 --dim 36 --query-count 2000 --k 10 \
    --build-k 32 --exact-graph --ggm --no-hnsw --batch-sizes 2000,1 --ef 32 --min-seconds 0 \
    --recall-sample 200 --json "$OUT/memcheck_bench.json" > "$OUT/memcheck.log" 2>&1
  local rc=$?
  tail -n 5 "$OUT/memcheck.log"
  [ $rc -eq 0 ] || status=1
}

bench_one() {  # dim, label, extra flags
  local dim=$1 label=$2
  shift 2
  echo "== tsdg-bench cuda 1M x $dim"
  TSDG_GPU_TRACE=1 timeout 560 "$BIN/tsdg-bench" --backend cuda --rows 1000000 --dim "$dim" --query-count 10000 \
    --k 10 --build-k 64 --no-hnsw --json "$OUT/bench_${label}.json" "$@" > "$OUT/bench_${label}.log" 2>&1
  local rc=$?
  grep -v "gpu-trace\] \(gnnd\|ggm \) \(sample\|reverse\|cross\)" "$OUT/bench_${label}.log"
  [ $rc -eq 0 ] || status=1
}

step_bench_small() {
  echo "== tsdg-bench cuda 200k x 128 (smoke)"
  timeout 300 "$BIN/tsdg-bench" --backend cuda --rows 200000 --dim 128 --query-count 10000 --k 10 \
    --build-k 64 --exact-graph --ggm --no-hnsw --batch-sizes 10000,100,1 --ef 16,32,64,128 \
    --min-seconds 0.2 --json "$OUT/bench_small.json" > "$OUT/bench_small.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/bench_small.log"
  [ $rc -eq 0 ] || status=1
}

# 256 entry points: the navigating set then reaches every one of the 64
# clusters, which a best-first search from 32 cannot leave.
# GNND runs up to 16 iterations (the core's default stops at 12).
BENCH_FLAGS=(--exact-graph --ggm --iterations 16 --batch-sizes 10000,100,10,1
             --ef 16,24,32,48,64,96,128,192 --entry-samples 256 --min-seconds 0.3)

step_bench() {
  bench_one 128 1m_128 "${BENCH_FLAGS[@]}"
  bench_one 96 1m_96 "${BENCH_FLAGS[@]}"
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(all)
for step in "${steps[@]}"; do
  case $step in
    tests) step_tests ;;
    memcheck) step_memcheck ;;
    bench-small) step_bench_small ;;
    bench-128) bench_one 128 1m_128 "${BENCH_FLAGS[@]}" ;;
    bench-96) bench_one 96 1m_96 "${BENCH_FLAGS[@]}" ;;
    bench) step_bench ;;
    all) step_tests; step_memcheck; step_bench ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
exit $status
