#!/usr/bin/env bash
# tsdg_search_batch and tsdg_search_batch_arrays through the GPU worker, the
# session's side: the segment a session keeps for its batches is reused by a
# smaller batch, replaced by a larger one, and given up after a batch
# cancelled while the worker searched it; every answer equals the CPU path's,
# and the arrays form holds the rows of the row form. Runs the worker with the core's CPU
# backend (any machine) unless TSDG_WORKER_BACKEND says otherwise.
# Usage: worker_batch.sh WORKDIR (starts its own cluster on port 54339).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/worker_batch
port=54339
backend=${TSDG_WORKER_BACKEND:-cpu}
start_cluster "$dir" "$port" "autovacuum = off" "tsdg.worker_backend = $backend" \
  "log_min_messages = log"
trap 'stop_cluster "$dir"' EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
fail() { echo "FAIL: $*"; tail -30 "$dir/server.log"; exit 1; }

sql -c "CREATE EXTENSION pg_tsdg"
for _ in $(seq 1 300); do
  [ "$(sql -At -c "SELECT state FROM tsdg_gpu_status()")" = ready ] && break
  sleep 0.1
done
state=$(sql -At -c "SELECT state FROM tsdg_gpu_status()")
if [ "$state" != ready ]; then
  [ "$state" = "no gpu" ] && { echo "SKIP: no GPU for tsdg.worker_backend = $backend"; exit 0; }
  fail "the worker is not ready: $state"
fi

sql <<'SQL'
SELECT setseed(0.75) \g /dev/null
CREATE TABLE items (id int, v vector(32));
INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
  FROM generate_series(1, 20000) i;
CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
CREATE TABLE queries AS SELECT i AS q, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector AS v
  FROM generate_series(1, 20000) i;
SQL

# one line per call: a digest of its (query, tid, distance) rows; $2 the form
digest() {
  if [ "$2" = arrays ]; then
    echo "SELECT md5(string_agg(b.query || ':' || t.tid || ':' || t.distance, ',' ORDER BY b.query, t.distance, t.tid))
          FROM tsdg_search_batch_arrays('items_idx', (SELECT array_agg(v ORDER BY q) FROM queries WHERE q <= $1), 10) b,
               unnest(b.tids, b.distances) AS t(tid, distance);"
  else
    echo "SELECT md5(string_agg(b.query || ':' || b.tid || ':' || b.distance, ',' ORDER BY b.query, b.distance, b.tid))
          FROM tsdg_search_batch('items_idx', (SELECT array_agg(v ORDER BY q) FROM queries WHERE q <= $1), 10) b;"
  fi
}
run_session() {
  # $1: tsdg.device, $2: the form; one session: a small batch, a larger one, a cancelled one, a small one again
  {
    echo "SET tsdg.device = $1;"
    digest 100 "$2"
    digest 3000 "$2"
    echo "SET statement_timeout = '30ms';"
    digest 20000 "$2"
    echo "RESET statement_timeout;"
    digest 100 "$2"
    digest 3000 "$2"
  } | psql -X -q -At 2>&1
}
worker=$(run_session auto rows)
cpu=$(run_session cpu rows)
echo "$worker" | grep -q "canceling statement due to statement timeout" ||
  fail "the 20000-query batch was not cancelled: $worker"
[ "$worker" = "$cpu" ] || fail "worker and CPU batches differ:
worker: $worker
cpu:    $cpu"
batches=$(sql -At -c "SELECT batches FROM tsdg_gpu_status()")
[ "$batches" -ge 4 ] || fail "the worker answered $batches batches, expected at least 4"
echo "worker_batch: 4 batches in one session equal the CPU's around a cancelled one ($batches worker batches)"

worker_arrays=$(run_session auto arrays)
cpu_arrays=$(run_session cpu arrays)
echo "$worker_arrays" | grep -q "canceling statement due to statement timeout" ||
  fail "the 20000-query batch of arrays was not cancelled: $worker_arrays"
[ "$worker_arrays" = "$cpu_arrays" ] || fail "worker and CPU arrays differ:
worker: $worker_arrays
cpu:    $cpu_arrays"
[ "$worker_arrays" = "$worker" ] || fail "the arrays hold other neighbors than the rows:
arrays: $worker_arrays
rows:   $worker"
after=$(sql -At -c "SELECT batches FROM tsdg_gpu_status()")
[ "$after" -ge $((batches + 4)) ] || fail "the worker answered $((after - batches)) batches of arrays, expected at least 4"
echo "worker_batch: the arrays form equals the rows form and the CPU's around a cancelled batch ($((after - batches)) worker batches)"
echo "worker_batch: all checks passed"
