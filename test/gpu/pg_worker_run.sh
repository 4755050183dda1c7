#!/usr/bin/env bash
# The GPU worker on the GPU machine, in one command (issue 6). Inside a device run
# with .gpu carried (see ../shared/gpu/README.md; stage first, here:
#   bash ../shared/gpu/make-pg-runtime.sh
#   make && make install DESTDIR=$PWD/.gpu/stage      # pg_tsdg_cuda.so lands there too
# ), from the project root:
#   bash test/gpu/pg_worker_run.sh [tests|bench|all|pending|merge]
# starts PostgreSQL with pg_tsdg preloaded (the worker loads pg_tsdg_cuda.so), then
#   tests: the worker regression test (sql/worker.sql against expected/worker.out, the
#          searches answered by the GPU) and test/tap/worker_fallback.sh with the CUDA
#          worker (SIGKILL during searches and during CREATE INDEX, terminated sessions)
#          and test/tap/worker_cache.sh (resident indexes: loads, eviction, reloads);
#   bench: test/gpu/pg_worker_bench.py: ROWS x DIM (default 1M x 128) clustered rows
#          loaded with COPY, CREATE INDEX on the GPU and on the CPU, recall@10 of both,
#          GPU and CPU searches compared, pgbench at CLIENTS, tsdg_search_batch.
#   pending: (not part of all) test/gpu/pg_pending_bench.py: searches of an index of ROWS
#          with PENDING (default 100k) pending rows: the worker's copy of them, each
#          session's own scan, the CPU path; one session, pgbench, tsdg_search_batch.
#   merge: (not part of all) issue 7's GPU merge benchmark, bench/merge_bench.sh
#          against this server: CHUNK x (BASE_CHUNKS + LOADS) rows (default 100k x
#          (10 + 10)), an index built on the GPU on the first 1M, then 10 loads of 100k
#          each merged on the GPU worker; a fresh GPU CREATE INDEX on all 2M rows as
#          the reference; the worker's LOG lines say where each merge's time went.
# PG_EXTRA_CONF: one more postgresql.conf line (e.g. "tsdg.worker_backend = cpu" to try
# a mode on a machine without a GPU).
# Writes under $OUT: run.log, worker_regress.diff, worker_fallback.log, bench.log,
# worker_bench.json, pending_bench.{json,log}, merge_bench.md, merge_bench.log, worker_merges.log, server.log.
set -uo pipefail
mode=${1:-all}
OUT=${OUT:-/tmp/pg_worker_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1

# Containers often cap /dev/shm: DSM segments then live in files (pg_dynshmem/).
shm_kb=$(df -k --output=size /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
dsm_type=posix
if [ -z "$shm_kb" ] || [ "$shm_kb" -lt $((8 * 1024 * 1024)) ]; then dsm_type=mmap; fi
echo "== /dev/shm: ${shm_kb:-?} kB -> dynamic_shared_memory_type = $dsm_type"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv

PG_FRESH=1 source .gpu/pg-on-device.sh "shared_preload_libraries = 'pg_tsdg'" \
  "dynamic_shared_memory_type = $dsm_type" "jit = off" "max_wal_size = 20GB" \
  "checkpoint_timeout = 30min" "log_min_duration_statement = 1000" "log_statement = 'ddl'" \
  "track_wal_io_timing = on" \
  "tsdg.batch_wait_us = ${BATCH_WAIT_US:-100}" ${PG_EXTRA_CONF:+"$PG_EXTRA_CONF"} || exit 1
trap 'cp /tmp/pg.log "$OUT/server.log"' EXIT
pg -q -c "CREATE EXTENSION IF NOT EXISTS pg_tsdg"

state=""
for _ in $(seq 1 120); do
  state=$(pg -At -c "SELECT state FROM tsdg_gpu_status()" 2>/dev/null)
  [ "$state" = ready ] || [ "$state" = "no gpu" ] && break
  sleep 0.5
done
pg -x -c "SELECT * FROM tsdg_gpu_status()"
if [ "$state" != ready ]; then
  echo "FAIL: the GPU worker is not ready (state: $state)"
  exit 1
fi

failed=0
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  echo "== worker regression test (GPU searches)"
  pg -q -c "DROP DATABASE IF EXISTS contrib_regression" -c "CREATE DATABASE contrib_regression"
  pg -q -d contrib_regression -c "CREATE EXTENSION pg_tsdg"
  "$PGBIN/psql" -X -a -q -d contrib_regression <sql/worker.sql >"$OUT/worker_regress.out" 2>&1
  if diff -u expected/worker.out "$OUT/worker_regress.out" >"$OUT/worker_regress.diff"; then
    echo "worker regression test: ok"
  else
    echo "worker regression test: FAILED"; head -60 "$OUT/worker_regress.diff"; failed=1
  fi
  rm -f "$OUT/worker_regress.out"
  pg -At -c "SELECT 'after the regression test: ' || batches || ' batches, ' || fallbacks || ' fallbacks' FROM tsdg_gpu_status()"

  echo "== worker_fallback.sh with the CUDA worker"
  work=$(mktemp -d /tmp/worker_fallback.XXXXXX)
  chmod 755 "$work"
  if TSDG_WORKER_BACKEND=cuda TSDG_BIG_ROWS=${TSDG_BIG_ROWS:-1000000} timeout 300 bash test/tap/worker_fallback.sh "$work" >"$OUT/worker_fallback.log" 2>&1; then
    echo "worker_fallback.sh: ok"; tail -12 "$OUT/worker_fallback.log"
  else
    echo "worker_fallback.sh: FAILED"; tail -40 "$OUT/worker_fallback.log"; failed=1
  fi
  echo "== worker_cache.sh with the CUDA worker"
  if TSDG_WORKER_BACKEND=cuda timeout 120 bash test/tap/worker_cache.sh "$work" >>"$OUT/worker_fallback.log" 2>&1; then
    echo "worker_cache.sh: ok"; tail -8 "$OUT/worker_fallback.log"
  else
    echo "worker_cache.sh: FAILED"; tail -30 "$OUT/worker_fallback.log"; failed=1
  fi
fi

if [ "$mode" = bench ] || [ "$mode" = all ]; then
  echo "== benchmark"
  PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-480}" python3 test/gpu/pg_worker_bench.py \
    --rows "${ROWS:-1000000}" --dim "${DIM:-128}" --clients "${CLIENTS:-1,8,32,128}" \
    --seconds "${SECONDS_PER_POINT:-8}" ${BENCH_ARGS:-} --out "$OUT/worker_bench.json" \
    >"$OUT/bench.log" 2>&1 || { echo "benchmark: FAILED or cut short"; failed=1; }
  cat "$OUT/bench.log" | tail -40
fi
if [ "$mode" = pending ]; then
  echo "== pending rows benchmark"
  PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-480}" python3 test/gpu/pg_pending_bench.py \
    --rows "${ROWS:-1000000}" --pending "${PENDING:-100000}" --dim "${DIM:-128}" \
    --clients "${CLIENTS:-1,8,32}" --seconds "${SECONDS_PER_POINT:-6}" ${BENCH_ARGS:-} \
    --out "$OUT/pending_bench.json" >"$OUT/pending_bench.log" 2>&1 ||
    { echo "pending benchmark: FAILED or cut short"; failed=1; }
  tail -30 "$OUT/pending_bench.log"
fi
if [ "$mode" = merge ]; then
  echo "== merge benchmark"
  PATH=$PGBIN:$PATH TSDG_BENCH_EXTERNAL=1 TSDG_BENCH_SERVER_LOG=/tmp/pg.log \
    CHUNK=${CHUNK:-100000} BASE_CHUNKS=${BASE_CHUNKS:-10} LOADS=${LOADS:-10} \
    timeout "${MERGE_BENCH_TIMEOUT:-530}" bash bench/merge_bench.sh "$OUT" >"$OUT/merge_bench.log" 2>&1 ||
    { echo "merge benchmark: FAILED or cut short"; tail -30 "$OUT/merge_bench.log"; failed=1; }
  [ -f "$OUT/merge_bench.md" ] && cat "$OUT/merge_bench.md"
fi
pg -x -c "SELECT * FROM tsdg_gpu_status()"
exit $failed
