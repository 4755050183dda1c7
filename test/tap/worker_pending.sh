#!/usr/bin/env bash
# The pending rows searched by the GPU worker (tsdg.worker_pending_rows): once
# an index has that many, the sessions send the worker the rows its copy
# lacks and it searches them with the graph. Its answers equal those of the
# session's own scan of the pending rows (tsdg.worker_pending_rows = -1) for
# index scans and batches, and filtered scans that go past the worker's
# round return every pending row they should;
# rows inserted later reach the copy and are found first; rows VACUUM
# removes from the pending pages are never returned from the copy; a merge
# leaves the new graph's copy empty; past tsdg.gpu_memory_limit the copy takes
# no more rows. Runs the worker with the core's CPU
# backend (any machine) unless TSDG_WORKER_BACKEND says otherwise.
# Usage: worker_pending.sh WORKDIR (starts its own cluster on port 54351).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/worker_pending
port=54351
start_worker_cluster

sql -c "CREATE EXTENSION pg_tsdg"
wait_for_worker_or_skip "$backend" || fail "the worker is not ready"

sql <<'SQL'
SELECT setseed(0.25) \g /dev/null
CREATE TABLE items (id int, v vector(32));
INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
  FROM generate_series(1, 6000) i;
CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
  FROM generate_series(6001, 8500) i;
CREATE TABLE queries AS SELECT i AS q, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector AS v
  FROM generate_series(1, 200) i;
SQL

# the pending rows the worker's copy holds for items_idx (0 when none)
worker_pending() {
  sql -At -c "SELECT coalesce(max((c->>'pending_rows')::bigint), 0)
              FROM tsdg_gpu_status(), jsonb_array_elements(cached_indexes) c WHERE c->>'index' = 'items_idx'"
}
# a digest of the $2 (10) nearest ids of every query at tsdg.ef_search $3
# (100), $1 the setting of tsdg.worker_pending_rows. Past the 32 pending rows
# of the worker's round the scan reads the others itself. The ids as sets:
# the worker computes a pending row's distance otherwise than the session,
# which may swap near ties.
scans() {
  sql -At -c "SET enable_seqscan = off" -c "SET tsdg.worker_pending_rows = $1" \
    -c "SET tsdg.ef_search = ${3:-100}" -c "
    SELECT md5(string_agg(r.ids, ';' ORDER BY q.q)) FROM queries q,
      LATERAL (SELECT string_agg(id::text, ',' ORDER BY id) AS ids
               FROM (SELECT id FROM items ORDER BY v <-> q.v LIMIT ${2:-10}) n) r"
}
# Through a filter that keeps one row in 20, the scan goes past the worker's
# round: prints "missed of expected", the pending rows among the exact 10
# nearest filtered rows of 40 queries that the index scan did not return
# ($1 the setting of tsdg.worker_pending_rows). Graph rows may differ between
# the settings (the worker's round holds fewer of them when pending rows are
# among it, so later rounds start elsewhere); pending rows are scanned
# exactly and must all be there.
filtered_pending_misses() {
  sql -At -c "SET enable_indexscan = off" -c "
    CREATE TEMP TABLE exact AS SELECT q.q, n.id FROM (SELECT * FROM queries WHERE q <= 40) q,
      LATERAL (SELECT id FROM items WHERE id % 20 = 3 ORDER BY v <-> q.v LIMIT 10) n WHERE n.id > 6000" \
    -c "RESET enable_indexscan" -c "SET enable_seqscan = off" -c "SET tsdg.worker_pending_rows = $1" -c "
    SELECT count(*) FILTER (WHERE NOT EXISTS (
             SELECT 1 FROM (SELECT id FROM items WHERE id % 20 = 3
                            ORDER BY v <-> (SELECT v FROM queries WHERE q = e.q) LIMIT 10) i
             WHERE i.id = e.id)) || ' of ' || count(*) FROM exact e"
}
# the rows of tsdg_search_batch per query, not their distances: the CUDA
# worker computes a pending row's distance otherwise than the session
batch() {
  sql -At -c "SET tsdg.worker_pending_rows = $1" -c "
    SELECT md5(string_agg(b.query || ':' || b.tid, ',' ORDER BY b.query, b.tid))
    FROM tsdg_search_batch('items_idx', (SELECT array_agg(v ORDER BY q) FROM queries), 10) b"
}
# rows of items with id in [$1, $2] not found first by their own vector
self_misses() {
  sql -At -c "SET enable_seqscan = off" -c "
    SELECT count(*) FILTER (WHERE first IS DISTINCT FROM p.id) FROM items p,
      LATERAL (SELECT t.id AS first FROM items t ORDER BY t.v <-> p.v LIMIT 1) f
    WHERE p.id BETWEEN $1 AND $2"
}

# 1. Below the threshold the session scans the pending rows itself.
sql -c "SET tsdg.worker_pending_rows = 5000" -c "SET enable_seqscan = off" \
  -c "SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE q = 1) LIMIT 1" >/dev/null
[ "$(worker_pending)" = 0 ] || fail "the worker took 2500 pending rows under a threshold of 5000"

# 2. Above it the worker gets all 2500 and answers as the session's scan does.
with_worker=$(scans 1000)
held=$(worker_pending)
[ "$held" = 2500 ] || fail "the worker holds $held pending rows, expected 2500"
by_session=$(scans -1)
[ "$with_worker" = "$by_session" ] || fail "index scans differ with the worker's pending rows"
# about 44 of the 150 nearest rows are pending, all within a round of 400
[ "$(scans 1000 150 400)" = "$(scans -1 150 400)" ] ||
  fail "index scans of 150 rows differ with the worker's pending rows"
for setting in 1000 -1; do
  result=$(filtered_pending_misses $setting)
  case "$result" in
    "0 of "[1-9]*) ;;
    *) fail "filtered scans (tsdg.worker_pending_rows = $setting) missed pending rows: $result" ;;
  esac
done
[ "$(batch 1000)" = "$(batch -1)" ] || fail "batches differ with the worker's pending rows"
misses=$(self_misses 6001 8500)
[ "$misses" = 0 ] || fail "$misses of 2500 pending rows not found first through the worker"
echo "worker_pending: the worker holds the 2500 pending rows; scans of 10 and 150 rows and batches equal the session's, filtered scans miss no pending row ($result)"

# 3. Rows inserted later reach the copy on the next search.
sql -c "INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
        FROM generate_series(8501, 8530) i"
misses=$(self_misses 8501 8530)
[ "$misses" = 0 ] || fail "$misses of 30 rows inserted later not found first"
held=$(worker_pending)
[ "$held" = 2530 ] || fail "the worker holds $held pending rows after 30 more, expected 2530"
# one row at a time, each looked up right after: the sessions send each from
# where the worker's copy ends, in the tail page
sql -c "SET enable_seqscan = off" -c "
  DO \$\$
  DECLARE first int;
  BEGIN
    FOR i IN 8531..8560 LOOP
      INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector;
      SELECT t.id INTO first FROM items t ORDER BY t.v <-> (SELECT v FROM items WHERE id = i) LIMIT 1;
      IF first IS DISTINCT FROM i THEN
        RAISE EXCEPTION 'row % inserted one at a time came back as %', i, first;
      END IF;
    END LOOP;
  END \$\$" >/dev/null || fail "a row inserted one at a time was not found first"
held=$(worker_pending)
[ "$held" = 2560 ] || fail "the worker holds $held pending rows after 30 more one at a time, expected 2560"
[ "$(scans 1000)" = "$(scans -1)" ] || fail "index scans differ after rows were sent one at a time"
echo "worker_pending: 30 rows inserted later, then 30 one at a time, were sent and found first"

# 4. VACUUM removes pending rows and new rows take their heap TIDs: a copy of
# the old epoch would answer with those TIDs at the old rows' distances.
sql -c "DELETE FROM items WHERE id BETWEEN 7001 AND 7500" -c "SET tsdg.merge_threshold = -1" -c "VACUUM items"
sql -c "INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
        FROM generate_series(9001, 9500) i"
[ "$(scans 1000)" = "$(scans -1)" ] || fail "index scans differ after VACUUM removed pending rows"
[ "$(batch 1000)" = "$(batch -1)" ] || fail "batches differ after VACUUM removed pending rows"
held=$(worker_pending)
[ "$held" = 2560 ] || fail "the worker holds $held pending rows after VACUUM removed 500 and 500 came, expected 2560"
misses=$(self_misses 9001 9500)
[ "$misses" = 0 ] || fail "$misses of 500 rows inserted after VACUUM not found first"
echo "worker_pending: after VACUUM removed 500 pending rows and 500 came the worker holds the 2560 live ones"

# 5. A merge takes the pending rows into the graph; the new graph's copy starts empty.
sql -c "SELECT tsdg_merge('items_idx')" >/dev/null
scans 1000 >/dev/null
held=$(worker_pending)
[ "$held" = 0 ] || fail "the merged graph's copy holds $held pending rows, expected 0"
sql -c "INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
        FROM generate_series(10001, 11200) i"
[ "$(scans 1000)" = "$(scans -1)" ] || fail "index scans of the merged graph differ with the worker's pending rows"
held=$(worker_pending)
[ "$held" = 1200 ] || fail "the merged graph's copy holds $held pending rows, expected 1200"
echo "worker_pending: a merge left the new graph's copy empty; 1200 rows inserted after it were sent"

# 6. tsdg.gpu_memory_limit holds for the copies too: past it the worker takes
# no more pending rows (it drops no index for them) and the sessions scan them.
set_limit() {
  sql -c "ALTER SYSTEM SET tsdg.gpu_memory_limit = '$1'" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 100); do
    [ "$(sql -At -c "SELECT coalesce(memory_limit, 0) FROM tsdg_gpu_status()")" = "$2" ] && return
    sleep 0.1
  done
  fail "the worker did not take tsdg.gpu_memory_limit = $1"
}
set_limit 1MB 1048576
sql -c "INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
        FROM generate_series(11201, 21200) i"
# the session's WARNING (the server log keeps LOG and above, not WARNING)
warning=$(sql -At -c "SET enable_seqscan = off" \
  -c "SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE q = 1) LIMIT 1" 2>&1 >/dev/null)
echo "$warning" | grep -q "would pass tsdg.gpu_memory_limit" ||
  fail "no WARNING says the pending rows would pass tsdg.gpu_memory_limit: $warning"
[ "$(scans 1000 2>/dev/null)" = "$(scans -1)" ] || fail "index scans differ with the copy past tsdg.gpu_memory_limit"
held=$(worker_pending)
[ "$held" = 1200 ] || fail "the worker holds $held pending rows past tsdg.gpu_memory_limit, expected 1200"
set_limit 0 0
misses=$(self_misses 11201 21200)
[ "$misses" = 0 ] || fail "$misses of 10000 rows not found first once the limit was lifted"
held=$(worker_pending)
[ "$held" = 11200 ] || fail "the worker holds $held pending rows once the limit was lifted, expected 11200"
echo "worker_pending: past tsdg.gpu_memory_limit the worker took no more pending rows and the sessions scanned them; without it, all 11200"
