#!/usr/bin/env bash
# Faults of the GPU worker. The worker process that owns the device is killed
# with SIGKILL while sessions search and while it builds an index; sessions
# terminated while they wait leave no request behind. Every query must still
# return the right rows (searched on the CPU when the worker is gone), the
# build must finish on the CPU with a WARNING, the cluster must not go
# through crash recovery (no session is disconnected) and the supervisor must
# start a new worker.
#
# Runs on any machine: without a GPU the worker runs the core's CPU backend
# (tsdg.worker_backend = cpu), which goes through the same slots, DSM
# segments and restarts. TSDG_WORKER_BACKEND=cuda tests the CUDA worker
# (test/gpu/pg_worker_run.sh does, with TSDG_BIG_ROWS=1000000 so that the GPU
# build lasts long enough to be killed), and skips where no GPU is found.
# Usage: worker_fallback.sh WORKDIR (starts its own cluster on port 54336).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/worker_fallback
port=54336
start_worker_cluster "max_connections = 40" "maintenance_work_mem = 2GB"
status() { sql -At -c "SELECT $1 FROM tsdg_gpu_status()"; }

wait_ready() {
  local i state
  for i in $(seq 1 300); do
    state=$(status state)
    [ "$state" = ready ] && return 0
    [ "$state" = "no gpu" ] && return 2
    sleep 0.1
  done
  fail "the worker is not ready after 30 s (state: $state)"
}

sql -c "CREATE EXTENSION pg_tsdg"
rc=0; wait_ready || rc=$?
if [ "$rc" -eq 2 ]; then
  echo "SKIP: tsdg.worker_backend = $backend found no GPU: $(status last_error)"
  exit 0
fi
echo "worker ready on $(status device), pid $(status worker_pid)"

sql <<'SQL'
SELECT setseed(0.25) \g /dev/null
CREATE TABLE items (id int, v vector(16));
INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector
  FROM generate_series(1, 5000) i;
CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
CREATE TABLE queries (qid int, v vector(16), truth int[]);
INSERT INTO queries SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector
  FROM generate_series(1, 20) i;
UPDATE queries q SET truth = ARRAY(SELECT id FROM items i ORDER BY i.v <-> q.v LIMIT 10);
-- raises unless the index scan finds at least 9 of the exact 10
CREATE FUNCTION check_query(q int) RETURNS int LANGUAGE plpgsql
  SET enable_seqscan = off SET tsdg.ef_search = 200 AS $$
DECLARE got int[]; want int[]; hits int;
BEGIN
  SELECT truth INTO want FROM queries WHERE qid = q;
  got := ARRAY(SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE qid = q) LIMIT 10);
  SELECT count(*) INTO hits FROM unnest(got) g WHERE g = ANY (want);
  IF hits < 9 THEN
    RAISE EXCEPTION 'query %: % of the 10 nearest rows', q, hits;
  END IF;
  RETURN hits;
END $$;
SQL
[ "$(status builds)" -ge 1 ] || fail "CREATE INDEX did not build on the worker"
for q in $(seq 1 20); do sql -At -c "SELECT check_query($q)" >/dev/null || fail "query $q before the faults"; done
[ "$(status batches)" -ge 20 ] || fail "the searches did not go to the worker: $(status batches) batches"
echo "searches answered by the worker: $(status batches) batches"

# ---- SIGKILL while 4 sessions search ----
cat > "$dir/check.sql" <<'EOF'
\set qid random(1, 20)
SELECT check_query(:qid);
EOF
chmod 644 "$dir/check.sql"
fallbacks_before=$(status fallbacks)
old_pid=$(status worker_pid)
pgbench -n -c 4 -j 2 -T 6 -f "$dir/check.sql" >"$dir/pgbench.log" 2>&1 &
bench=$!
sleep 2
kill -9 "$old_pid"
echo "killed the worker (pid $old_pid) during the searches"
wait "$bench" || { cat "$dir/pgbench.log"; fail "a session failed or got a wrong answer"; }
grep -E "number of transactions actually processed" "$dir/pgbench.log"
wait_ready || fail "no worker after the kill"
new_pid=$(status worker_pid)
[ "$new_pid" != "$old_pid" ] || fail "the worker was not restarted"
grep -q "pg_tsdg GPU worker (PID $old_pid) was terminated by signal 9" "$dir/server.log" \
  || fail "no LOG line for the killed worker"
if grep -q "terminating any other active server processes" "$dir/server.log"; then
  fail "the kill went through crash recovery"
fi
[ "$(status fallbacks)" -gt "$fallbacks_before" ] || fail "no fallback was counted"
echo "restarted as pid $new_pid after $(status fallbacks) fallbacks; no crash recovery"
for q in $(seq 1 20); do sql -At -c "SELECT check_query($q)" >/dev/null || fail "query $q after the restart"; done

# ---- SIGKILL during CREATE INDEX: the build finishes on the CPU ----
# random rows; more where a GPU builds too fast to be caught (TSDG_BIG_ROWS)
big_rows=${TSDG_BIG_ROWS:-20000}
sql <<SQL
SELECT setseed(0.75) \\g /dev/null
CREATE TABLE big (id int, v vector(8));
INSERT INTO big SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 8) WHERE i > 0)::vector
  FROM generate_series(1, $big_rows) i;
SQL
sql -c "CREATE INDEX big_idx ON big USING tsdg (v vector_l2_ops)" >"$dir/build.log" 2>&1 &
build=$!
busy=0
for i in $(seq 1 2000); do
  if [ "$(status state)" = busy ]; then busy=1; break; fi
done
[ "$busy" -eq 1 ] || fail "the worker never started the build"
build_pid=$(status worker_pid)
kill -9 "$build_pid"
echo "killed the worker (pid $build_pid) during CREATE INDEX"
wait "$build" || { cat "$dir/build.log"; fail "CREATE INDEX failed after the worker was killed"; }
grep -q "WARNING:  tsdg index build falls back to the CPU" "$dir/build.log" \
  || { cat "$dir/build.log"; fail "no WARNING about the CPU build"; }
# rows used as queries must find themselves (distance 0) among their 10 nearest
found=$(sql -At <<SQL
SET enable_seqscan = off;
SELECT count(*) FILTER (WHERE q.id = ANY (ARRAY(SELECT id FROM big ORDER BY v <-> q.v LIMIT 10))) || '/' || count(*)
FROM (SELECT id, v FROM big WHERE id % ($big_rows / 200) = 1) q;
SQL
)
echo "index built on the CPU after the kill; rows that find themselves: $found"
[ $((100 * ${found%/*})) -ge $((95 * ${found#*/})) ] || fail "the CPU-built index finds only $found probe rows"
wait_ready || fail "no worker after the kill during the build"

# ---- sessions terminated while they wait leave no request behind ----
pgbench -n -c 6 -j 2 -T 4 -f "$dir/check.sql" >"$dir/pgbench2.log" 2>&1 &
bench=$!
sleep 1.5
sql -At -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'pgbench'" >/dev/null
wait "$bench" || true
sleep 0.5
[ "$(status queue_depth)" -eq 0 ] || fail "requests left queued: $(status queue_depth)"
batches=$(status batches)
for q in $(seq 1 20); do sql -At -c "SELECT check_query($q)" >/dev/null || fail "query $q after terminations"; done
[ "$(status batches)" -gt "$batches" ] || fail "the worker stopped answering after sessions were terminated"
echo "terminated sessions left no request; the worker answers ($(status batches) batches)"
echo "worker_fallback: all checks passed"
