#!/usr/bin/env bash
# tsdg_search_batch and tsdg_search_batch_arrays through the GPU worker, the
# session's side: the segment a session keeps for its batches is reused by a
# smaller batch, replaced by a larger one, and given up after a batch
# cancelled while the worker searched it; every answer equals the CPU path's,
# and the arrays form holds the rows of the row form. The batch area of the
# main shared memory (tsdg.batch_memory): one session at a time uses it, a
# concurrent one its own segment; a batch given up while the worker searches
# it keeps the area from the next batch until the worker lets go, and a
# worker killed during such a batch does not keep it. Runs the worker with the core's CPU
# backend (any machine) unless TSDG_WORKER_BACKEND says otherwise. The GPU
# walks the graph otherwise than the CPU and computes distances from norms:
# with TSDG_WORKER_BACKEND=cuda the worker's answers are compared with its
# own answer to the same batch, and where a batch may be answered by either
# (the worker killed meanwhile), with either.
# Usage: worker_batch.sh WORKDIR (starts its own cluster on port 54339).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/worker_batch
port=54339
start_worker_cluster

sql -c "CREATE EXTENSION pg_tsdg"
wait_for_worker_or_skip "$backend" || fail "the worker is not ready"

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
# the lines of a session's digests, less the cancelled batch's error
answers() { echo "$1" | grep -v "canceling statement"; }
# a session's two answers to each size, before and after the cancelled batch, are the same
same_around_cancel() { [ "$(answers "$1" | sed -n 1,2p)" = "$(answers "$1" | sed -n 3,4p)" ]; }
worker=$(run_session auto rows)
cpu=$(run_session cpu rows)
echo "$worker" | grep -q "canceling statement due to statement timeout" ||
  fail "the 20000-query batch was not cancelled: $worker"
if [ "$backend" = cpu ]; then
  [ "$worker" = "$cpu" ] || fail "worker and CPU batches differ:
worker: $worker
cpu:    $cpu"
else
  same_around_cancel "$worker" || fail "the worker's batches differ around a cancelled one: $worker"
fi
batches=$(sql -At -c "SELECT batches FROM tsdg_gpu_status()")
[ "$batches" -ge 4 ] || fail "the worker answered $batches batches, expected at least 4"
echo "worker_batch: 4 batches in one session, the same around a cancelled one$([ "$backend" = cpu ] && echo " and equal to the CPU's") ($batches worker batches)"

worker_arrays=$(run_session auto arrays)
cpu_arrays=$(run_session cpu arrays)
echo "$worker_arrays" | grep -q "canceling statement due to statement timeout" ||
  fail "the 20000-query batch of arrays was not cancelled: $worker_arrays"
[ "$cpu_arrays" = "$cpu" ] || fail "the CPU path's arrays hold other neighbors than its rows"
[ "$worker_arrays" = "$worker" ] || fail "the arrays hold other neighbors than the rows:
arrays: $worker_arrays
rows:   $worker"
after=$(sql -At -c "SELECT batches FROM tsdg_gpu_status()")
[ "$after" -ge $((batches + 4)) ] || fail "the worker answered $((after - batches)) batches of arrays, expected at least 4"
echo "worker_batch: the arrays form equals the rows form around a cancelled batch ($((after - batches)) worker batches)"

# where the last logged call of a size ran: "(batch area)" or "(own segment)"
where_ran() {
  grep -o "tsdg_search_batch: $1 queries on the [^:]*" "$dir/server.log" | tail -1 | sed 's/.*(\(.*\))/\1/'
}
one_digest() { digest "$1" rows | psql -X -q -At 2>&1; }
cpu_digest() { { echo "SET tsdg.device = cpu;"; digest "$1" rows; } | psql -X -q -At 2>&1; }
cpu3000=$(cpu_digest 3000)
cpu20000=$(cpu_digest 20000)
# what the worker's answers must equal: the CPU path's, or on a GPU its own
if [ "$backend" = cpu ]; then
  ref3000=$cpu3000
  ref20000=$cpu20000
else
  ref3000=$(answers "$worker" | sed -n 2p)
  ref20000=$(one_digest 20000)
fi

# a batch while another session's batch holds the area: its own segment, both right
one_digest 20000 > "$dir/long_batch.out" &
long_pid=$!
sleep 0.3
concurrent=$(one_digest 3000)
wait $long_pid
[ "$(cat "$dir/long_batch.out")" = "$ref20000" ] || fail "the batch in the area differs from the worker's answer"
[ "$concurrent" = "$ref3000" ] || fail "the concurrent batch differs from the worker's answer"
# the CPU-backed worker is still searching the 20000 queries 0.3 s later; a GPU may be done
if [ "$backend" = cpu ]; then
  [ "$(where_ran 3000)" = "own segment" ] ||
    fail "the batch beside one in the area ran in: $(where_ran 3000)"
fi
[ "$(where_ran 20000)" = "batch area" ] || fail "the first batch ran in: $(where_ran 20000)"
echo "worker_batch: two sessions' batches at once, the first in the batch area, the second in $(where_ran 3000), both right"

# a batch given up while the worker searches it: the area waits for the worker
given_up=$({
  echo "SET statement_timeout = '30ms';"
  digest 20000 rows
  echo "RESET statement_timeout;"
  digest 3000 rows
} | psql -X -q -At 2>&1)
echo "$given_up" | grep -q "canceling statement due to statement timeout" || fail "the batch was not cancelled: $given_up"
[ "$(echo "$given_up" | tail -1)" = "$ref3000" ] || fail "the batch after a cancelled one differs from the worker's answer"
if [ "$backend" = cpu ]; then
  # the CPU-backed worker searches 20000 queries for far longer than the next batch takes to start
  [ "$(where_ran 3000)" = "own segment" ] ||
    fail "a batch took the area while the worker still searched a given-up batch in it"
fi
for _ in $(seq 1 300); do
  [ "$(sql -At -c "SELECT queue_depth FROM tsdg_gpu_status()")" = 0 ] &&
    grep -q "searched a batch of 20000" "$dir/server.log" && break
  sleep 0.1
done
sleep 0.5
[ "$(one_digest 3000)" = "$ref3000" ] || fail "the batch after the worker let go differs from the worker's answer"
[ "$(where_ran 3000)" = "batch area" ] || fail "the area was not free again after the worker let go: $(where_ran 3000)"
echo "worker_batch: a batch given up while the worker searched it keeps the area from the next batch until the worker lets go"

# the worker killed while it searches a batch in the area: the batch answered on the CPU, the area free again
worker_pid=$(sql -At -c "SELECT worker_pid FROM tsdg_gpu_status()")
one_digest 20000 > "$dir/killed_batch.out" &
killed_pid=$!
sleep 0.3
kill -9 "$worker_pid"
wait $killed_pid
killed=$(cat "$dir/killed_batch.out")
[ "$killed" = "$cpu20000" ] || [ "$killed" = "$ref20000" ] ||
  fail "the batch whose worker was killed is neither the CPU's answer nor the worker's: $killed"
for _ in $(seq 1 300); do
  [ "$(sql -At -c "SELECT state FROM tsdg_gpu_status()")" = ready ] && break
  sleep 0.1
done
# The restarted worker holds no index yet: the CPU worker's first batch ships
# it; the GPU's first batches may run on the CPU while it settles, so up to
# five are tried there
for _ in 1 2 3 4 5; do
  after_restart=$(one_digest 3000)
  [ "$after_restart" = "$ref3000" ] || [ "$after_restart" = "$cpu3000" ] ||
    fail "the batch after the restart is neither the worker's answer nor the CPU's: $after_restart"
  { [ "$backend" = cpu ] || [ "$(where_ran 3000)" = "batch area" ]; } && break
  sleep 0.5
done
[ "$(where_ran 3000)" = "batch area" ] || fail "the area was not free after the worker died: $(where_ran 3000)"
echo "worker_batch: the worker killed during a batch in the area: the batch answered, the area free for the restarted worker"
echo "worker_batch: all checks passed"
