#!/usr/bin/env bash
# The GPU worker inside PostgreSQL on the GPU machine, from the repository
# alone. Here: pack PostgreSQL with the extension built with CUDA
#   TSDG_PG_PREFIX=/tmp/gpu-pg bash scripts/gpu/pack-postgres.sh
# then, in a device run that carries .gpu, from the repository root:
#   bash scripts/gpu/on-device.sh bash test/gpu/pg_worker_run.sh [tests|bench|all|pending|merge|fairness]
# It starts a cluster with pg_tsdg preloaded (the worker loads
# pg_tsdg_cuda.so), then
#   tests: the worker regression test (test/regress/sql/worker.sql, the
#          searches answered by the GPU) and the worker TAP tests
#          (test/t/*worker*.pl and the navigating layer's, each on a cluster
#          of its own) with the CUDA
#          worker; 009_worker_fallback with TSDG_BIG_ROWS (default 1M) rows so
#          that the GPU build lasts long enough to be killed;
#   bench: test/gpu/pg_worker_bench.py: ROWS x DIM (default 1M x 128) clustered
#          rows loaded with COPY, CREATE INDEX on the GPU and on the CPU,
#          recall@10 of both, GPU and CPU searches compared, pgbench at CLIENTS,
#          tsdg_search_batch;
#   pending: (not part of all) test/gpu/pg_pending_bench.py: searches of an
#          index of ROWS with PENDING (default 100k) pending rows: the worker's
#          copy of them, each session's own scan, the CPU path;
#   fairness: (not part of all) bench/fairness_bench.sh against this server:
#          other sessions' index scans and a small batch while one session's
#          batch of BATCH (default 20000) queries at k 1000 holds the worker,
#          on ROWS x DIM (default 1M x 128) rows, and its cancel;
#   merge: (not part of all) bench/merge_bench.sh against this server: CHUNK x
#          (BASE_CHUNKS + LOADS) rows (default 100k x (10 + 10)), an index built
#          on the GPU on the first 1M, then 10 loads of 100k each merged on the
#          GPU worker; a fresh GPU CREATE INDEX on all 2M rows as the reference.
# PG_EXTRA_CONF: one more postgresql.conf line (e.g. "tsdg.worker_backend = cpu"
# to try a mode on a machine without a GPU).
# Writes under $OUT: run.log, regress/ (the regression test's output and
# diffs), tap_logs.tar.gz (the TAP tests' logs), bench.log, worker_bench.json,
# pending_bench.{json,log}, merge_bench.md, merge_bench.log, fairness_bench.{md,log}, server.log.
source "$(dirname "$0")/../../scripts/common.sh"
set +e
cd "$TSDG_ROOT"
mode=${1:-all}
OUT=${OUT:-/tmp/pg_worker_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1

dsm_type=$(shared_memory_type)
log "dynamic_shared_memory_type = $dsm_type"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv

work=$(mktemp -d /tmp/pg_worker_run.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; cp "$work/server.log" "$OUT/server.log"' EXIT
start_cluster "$work" "${TSDG_TEST_PORT:-5544}" \
  "dynamic_shared_memory_type = $dsm_type" "shared_buffers = 16GB" "maintenance_work_mem = 16GB" \
  "max_connections = 300" "jit = off" "max_wal_size = 20GB" "checkpoint_timeout = 30min" \
  "log_min_duration_statement = 1000" "log_statement = 'ddl'" "track_wal_io_timing = on" \
  "tsdg.batch_wait_us = ${BATCH_WAIT_US:-100}" ${PG_EXTRA_CONF:+"$PG_EXTRA_CONF"} || exit 1
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS pg_tsdg CASCADE"

state=$(settled_worker_state)
psql -X -x -c "SELECT * FROM tsdg_gpu_status()"
if [ "$state" != ready ]; then
  echo "FAIL: the GPU worker is not ready (state: $state)"
  exit 1
fi

failed=0
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  log "worker regression test (GPU searches)"
  pgxs=$(dirname "$(dirname "$(pg_config --pgxs)")")
  mkdir -p "$OUT/regress"
  chmod 777 "$OUT/regress"
  if "$pgxs/test/regress/pg_regress" --bindir="$PGBIN" --inputdir=test/regress \
       --outputdir="$OUT/regress" --load-extension=vector --load-extension=pg_tsdg --dbname=contrib_regression worker; then
    echo "worker regression test: ok"
  else
    echo "worker regression test: FAILED"; head -60 "$OUT/regress/regression.diffs"; failed=1
  fi
  psql -X -At -c "SELECT 'after the regression test: ' || batches || ' batches, ' || fallbacks || ' fallbacks' FROM tsdg_gpu_status()"

  log "worker TAP tests with the CUDA worker"
  if TSDG_WORKER_BACKEND=cuda TSDG_BIG_ROWS=${TSDG_BIG_ROWS:-1000000} \
       run_tap_tests "$work/tap" test/t/*worker*.pl test/t/032_navigating_layer.pl; then
    echo "worker TAP tests: ok"
  else
    echo "worker TAP tests: FAILED"; failed=1
  fi
  tar czf "$OUT/tap_logs.tar.gz" -C "$work/tap/tmp_check" log
fi

if [ "$mode" = bench ] || [ "$mode" = all ]; then
  log "benchmark"
  PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-480}" "$(numpy_python)" test/gpu/pg_worker_bench.py \
    --rows "${ROWS:-1000000}" --dim "${DIM:-128}" --clients "${CLIENTS:-1,8,32,128}" \
    --seconds "${SECONDS_PER_POINT:-8}" ${BENCH_ARGS:-} --out "$OUT/worker_bench.json" \
    >"$OUT/bench.log" 2>&1 || { echo "benchmark: FAILED or cut short"; failed=1; }
  tail -40 "$OUT/bench.log"
fi
if [ "$mode" = pending ]; then
  log "pending rows benchmark"
  PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-480}" "$(numpy_python)" test/gpu/pg_pending_bench.py \
    --rows "${ROWS:-1000000}" --pending "${PENDING:-100000}" --dim "${DIM:-128}" \
    --clients "${CLIENTS:-1,8,32}" --seconds "${SECONDS_PER_POINT:-6}" ${BENCH_ARGS:-} \
    --out "$OUT/pending_bench.json" >"$OUT/pending_bench.log" 2>&1 ||
    { echo "pending benchmark: FAILED or cut short"; failed=1; }
  tail -30 "$OUT/pending_bench.log"
fi
if [ "$mode" = fairness ]; then
  log "fairness benchmark"
  TSDG_BENCH_EXTERNAL=1 ROWS=${ROWS:-1000000} DIMS=${DIM:-128} BATCH=${BATCH:-20000} SCANS=${SCANS:-100} \
    timeout "${BENCH_TIMEOUT:-480}" bash bench/fairness_bench.sh "$OUT" >"$OUT/fairness_bench.log" 2>&1 ||
    { echo "fairness benchmark: FAILED or cut short"; tail -30 "$OUT/fairness_bench.log"; failed=1; }
  [ -f "$OUT/fairness_bench.md" ] && cat "$OUT/fairness_bench.md"
fi
if [ "$mode" = merge ]; then
  log "merge benchmark"
  TSDG_BENCH_EXTERNAL=1 TSDG_BENCH_SERVER_LOG="$work/server.log" \
    CHUNK=${CHUNK:-100000} BASE_CHUNKS=${BASE_CHUNKS:-10} LOADS=${LOADS:-10} \
    timeout "${MERGE_BENCH_TIMEOUT:-530}" bash bench/merge_bench.sh "$OUT" >"$OUT/merge_bench.log" 2>&1 ||
    { echo "merge benchmark: FAILED or cut short"; tail -30 "$OUT/merge_bench.log"; failed=1; }
  [ -f "$OUT/merge_bench.md" ] && cat "$OUT/merge_bench.md"
fi
psql -X -x -c "SELECT * FROM tsdg_gpu_status()"
exit $failed
