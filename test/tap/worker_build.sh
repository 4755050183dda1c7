#!/usr/bin/env bash
# CREATE INDEX through the GPU worker, the session's side: the heap scan writes
# the rows into the worker's shared memory segment, which grows when the
# table's row estimate falls short; the worker computes the entry points after
# answering, and the session computes them itself when the worker dies first.
# Every index built must find each of its rows. Runs the worker with the
# core's CPU backend (any machine) unless TSDG_WORKER_BACKEND says otherwise.
# Usage: worker_build.sh WORKDIR (starts its own cluster on port 54338).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/worker_build
port=54338
start_worker_cluster
log_lines() { tail -n +"$1" "$dir/server.log"; }
# 200 rows of table $1 find themselves first through index scans: the first
# 200, or with $3 = spread 200 spread over the table (over all its row pages,
# written while the worker built the graph), searched widely enough that a
# miss means a wrong row or list page rather than a greedy search that
# stopped short; up to $4 (default 0) may miss
finds_itself() {
  local missed sample="ORDER BY id" ef="" allowed=${4:-0}
  if [ "${3:-}" = spread ]; then
    sample="WHERE id % GREATEST(1, (SELECT count(*) FROM $1) / 200) = 0 ORDER BY id"
    ef="SET tsdg.ef_search = 200;"
  fi
  missed=$(sql -At -c "SET enable_seqscan = off; SET tsdg.device = cpu; $ef
    SELECT count(*) FROM (SELECT id, v FROM $1 $sample LIMIT 200) p
    WHERE (SELECT t.id FROM $1 t ORDER BY t.v <-> p.v LIMIT 1) <> p.id")
  [ "$missed" -le "$allowed" ] || fail "$1: $missed of 200 rows do not find themselves ($2)"
}

sql -c "CREATE EXTENSION pg_tsdg"
wait_for_worker_or_skip "$backend" || fail "the worker is not ready"

# 1. The estimate falls short: ANALYZE sees 300 wide rows (about 6 a page),
# which are deleted, and 6000 narrow rows are added without a new ANALYZE, so
# the planner's density says a few hundred rows where the scan finds 6000.
sql <<'SQL'
SELECT setseed(0.25) \g /dev/null
CREATE TABLE grown (id int, pad text, v vector(16));
ALTER TABLE grown ALTER COLUMN pad SET STORAGE PLAIN;
INSERT INTO grown SELECT -i, (SELECT string_agg(md5(random()::text || j), '') FROM generate_series(1, 40) j WHERE i > 0),
  '[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]' FROM generate_series(1, 300) i;
ANALYZE grown;
DELETE FROM grown;
INSERT INTO grown SELECT i, NULL,
  (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector
  FROM generate_series(1, 6000) i;
SQL
from=$(wc -l < "$dir/server.log")
sql -c "CREATE INDEX grown_idx ON grown USING tsdg (v vector_l2_ops)"
line=$(log_lines "$from" | grep 'tsdg index "grown_idx" built from' || true)
echo "$line" | grep -q "into shared memory, grown [0-9]* times" ||
  fail "the build did not grow its shared memory segment: ${line:-no LOG line}"
log_lines "$from" | grep -q 'tsdg index "grown_idx" built on the GPU worker' ||
  fail "the worker did not build grown_idx"
[ "$(sql -At -c "SELECT entry_points > 0 FROM tsdg_index_info('grown_idx')")" = t ] ||
  fail "grown_idx has no entry points"
finds_itself grown "segment grown during the heap scan" spread
echo "grown: $(echo "$line" | grep -o 'heap scan [^)]*)')"

# 2. The worker dies after answering the build, while it computes the entry
# points (about a second for this table on a CPU worker): the session
# computes them itself and the index is complete.
sql <<'SQL'
SELECT setseed(0.5) \g /dev/null
CREATE TABLE orphan (id int, v vector(32));
INSERT INTO orphan SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
  FROM generate_series(1, 60000) i;
ANALYZE orphan;
SQL
from=$(wc -l < "$dir/server.log")
sql -c "CREATE INDEX orphan_idx ON orphan USING tsdg (v vector_l2_ops) WITH (iterations = 2)" &
build=$!
killed=no
for _ in $(seq 1 6000); do
  if log_lines "$from" | grep -q "pg_tsdg GPU worker: built the graph of index"; then
    pid=$(sql -At -c "SELECT worker_pid FROM tsdg_gpu_status()" 2>/dev/null || true)
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null && killed=yes
    break
  fi
  sleep 0.01
done
wait "$build" || fail "CREATE INDEX failed after the worker was killed"
[ "$killed" = yes ] || fail "the worker was never seen building orphan_idx"
if log_lines "$from" | grep -q 'tsdg index "orphan_idx": the GPU worker did not compute the entry points'; then
  echo "orphan: the session computed the entry points after the worker died"
elif log_lines "$from" | grep -q "entry points and statistics of index"; then
  echo "orphan: the worker had finished the entry points before it was killed (the kill came late)"
else
  fail "orphan_idx: neither the worker nor the session computed the entry points"
fi
[ "$(sql -At -c "SELECT entry_points > 0 FROM tsdg_index_info('orphan_idx')")" = t ] ||
  fail "orphan_idx has no entry points"
# a graph of 2 GNND iterations over uniform 32-dimensional rows: a greedy
# search misses about one row in 200 of it on the GPU
[ "$(sql -At -c "SELECT rows FROM tsdg_index_info('orphan_idx')")" = 60000 ] ||
  fail "orphan_idx does not hold every row"
finds_itself orphan "worker killed after answering the build" first 3

# 3. The CPU path of the same table: no shared memory, the same answers.
from=$(wc -l < "$dir/server.log")
sql -c "SET tsdg.device = cpu" -c "CREATE INDEX grown_cpu ON grown USING tsdg (v vector_l2_ops)"
log_lines "$from" | grep 'tsdg index "grown_cpu" built from' | grep -q "shared memory" &&
  fail "a tsdg.device = cpu build used the worker's shared memory"
sql -c "DROP INDEX grown_idx"
finds_itself grown "built on the CPU" spread
echo "worker_build: all checks passed"
