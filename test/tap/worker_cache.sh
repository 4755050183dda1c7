#!/usr/bin/env bash
# The GPU worker's resident indexes: keyed by (database, index storage,
# graph_version), loaded on first use by the session that asks, reloaded after
# a merge or a REINDEX, evicted least recently used under
# tsdg.gpu_memory_limit; the worker's answers, pending rows included, are the
# CPU path's. Runs the worker with the core's CPU backend (any machine) unless
# TSDG_WORKER_BACKEND says otherwise.
# Usage: worker_cache.sh WORKDIR (starts its own cluster on port 54336).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/worker_cache
port=54336
# room for one of the two indexes below (each about 1.1 MB of rows and graph)
start_worker_cluster "tsdg.gpu_memory_limit = 1MB"
status() { sql -At -c "SELECT $1 FROM tsdg_gpu_status()"; }
resident() {
  sql -At -c "SELECT coalesce(string_agg((c->>'index') || '@' || (c->>'graph_version'), ',' ORDER BY c->>'index'), '')
              FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c"
}
expect_resident() {
  local got
  got=$(resident)
  [ "$got" = "$1" ] || fail "resident indexes: expected '$1', got '$got' ($2)"
  echo "resident: ${got:-none} ($2)"
}
# the ids (sorted: the probe's copy ties with it) a query returns through the
# index, on the worker or on the CPU; wide enough a search to be exact here
answer() {
  sql -At -c "SET enable_seqscan = off; SET tsdg.device = $2; SET tsdg.ef_search = 400;
              SELECT string_agg(id::text, ',' ORDER BY id)
              FROM (SELECT id FROM $1 ORDER BY v <-> (SELECT v FROM probe) LIMIT 10) s"
}
same_answers() {
  local worker cpu
  worker=$(answer "$1" auto)
  cpu=$(answer "$1" cpu)
  [ "$worker" = "$cpu" ] || fail "$1: the worker answered $worker, the CPU $cpu ($2)"
}

sql -c "CREATE EXTENSION pg_tsdg"
for _ in $(seq 1 300); do [ "$(status state)" = ready ] && break; sleep 0.1; done
if [ "$(status state)" != ready ]; then
  [ "$(status state)" = "no gpu" ] && { echo "SKIP: no GPU for tsdg.worker_backend = $backend"; exit 0; }
  fail "the worker is not ready: $(status state)"
fi

sql <<'SQL'
SELECT setseed(0.5) \g /dev/null
CREATE TABLE a (id int, v vector(16));
CREATE TABLE b (id int, v vector(16));
INSERT INTO a SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector
  FROM generate_series(1, 5000) i;
INSERT INTO b SELECT id, v FROM a;
CREATE TABLE probe AS SELECT v FROM a WHERE id = 77;
CREATE INDEX a_idx ON a USING tsdg (v vector_l2_ops);
SQL
expect_resident "a_idx@1" "a fresh build stays resident"
sql -c "CREATE INDEX b_idx ON b USING tsdg (v vector_l2_ops)"
expect_resident "b_idx@1" "the second build evicts the first under the limit"

loads=$(status index_loads)
same_answers a "a shipped by the session that asked"
[ "$(status index_loads)" -gt "$loads" ] || fail "a was not loaded"
expect_resident "a_idx@1" "a loaded, b evicted"
same_answers b "b again"
expect_resident "b_idx@1" "b loaded, a evicted"

# pending rows do not change the graph: the copy stays, the session merges them
sql -c "INSERT INTO b SELECT 100000 + id, v FROM a WHERE id BETWEEN 70 AND 89"
loads=$(status index_loads)
same_answers b "with pending rows"
[ "$(status index_loads)" -eq "$loads" ] || fail "pending rows reloaded the index"
answer b auto | grep -q "100077" || fail "the pending copy of the probe row was not found"

# a merge bumps graph_version, a REINDEX gives the index new storage: both reload
sql -At -c "SELECT tsdg_merge('b_idx')" >/dev/null
same_answers b "after a merge"
expect_resident "b_idx@2" "the merged graph"
sql -c "REINDEX INDEX b_idx"
expect_resident "b_idx@1" "REINDEX builds a new graph"
same_answers b "after REINDEX"
echo "worker_cache: all checks passed ($(status index_loads) loads, $(status batches) batches)"
