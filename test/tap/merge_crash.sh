#!/usr/bin/env bash
# Crash during a merge: the server is stopped with -m immediate while
# tsdg_merge() writes the new graph (the pending rows being merged, deleted
# rows being dropped, inserts arriving); after recovery the index still has the old graph
# and every pending row, answers like an exact scan for rows equal to rows of
# the table, and the next merge completes. Usage: merge_crash.sh WORKDIR
# (starts its own cluster on 54347).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/merge_crash
port=54347
start_cluster "$dir" "$port" "autovacuum = off" "maintenance_work_mem = '512MB'"
trap 'stop_cluster "$dir"' EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# rows: live rows the index returns, how many of 40 probes (rows of the table)
# come back first for their own vector, and the index's counters
state() {
  sql -At <<'SQL'
SET enable_seqscan = off;
SET tsdg.ef_search = 128;
SET tsdg.max_scan_tuples = 1000000;
SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 7) LIMIT 100000) s;
SELECT count(*) FROM (SELECT p.id, (SELECT i.id FROM items i ORDER BY i.v <-> p.v LIMIT 1) AS first
                      FROM items p WHERE p.id % 997 = 1) s WHERE first = id;
SELECT concat_ws(',', pending, deleted, graph_version, merges) FROM tsdg_index_info('items_idx');
SQL
}

sql <<'SQL'
CREATE EXTENSION pg_tsdg;
SELECT setseed(0.25);
CREATE TABLE items (id int PRIMARY KEY, v vector(32));
INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
  FROM generate_series(1, 30000) i;
-- wide lists make the new graph's region long to write: the crash below must
-- land between its first block and the switch, which an incremental merge of
-- the default-sized graph on an idle machine could finish before
CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops) WITH (degree = 64, build_k = 128);
INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector
  FROM generate_series(30001, 40000) i;
DELETE FROM items WHERE id % 50 = 0;
SET tsdg.merge_threshold = -1;
VACUUM items;
SQL
live=$(sql -At -c "SELECT count(*) FROM items")
probes=$(sql -At -c "SELECT count(*) FROM items WHERE id % 997 = 1")
before=$(state)
expected="$live"$'\n'"$probes"$'\n'"9800,600,1,0"
[ "$before" = "$expected" ] || fail "before the merge: expected $expected, got $before"

# the merge runs in the background; rows arrive meanwhile; the server dies
# once the merge has allocated the blocks of the new graph and writes them
size_before=$(sql -At -c "SELECT pg_relation_size('items_idx')")
sql -c "SELECT tsdg_merge('items_idx')" >/dev/null 2>&1 &
merge_pid=$!
for _ in $(seq 1 100); do
  running=$(sql -At -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT tsdg_merge%' AND state = 'active'")
  [ "$running" = 1 ] && break
  sleep 0.1
done
[ "$running" = 1 ] || fail "the merge did not start"
sql -c "INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 32) WHERE i > 0)::vector FROM generate_series(40001, 40100) i"
for _ in $(seq 1 1200); do
  size=$(sql -At -c "SELECT pg_relation_size('items_idx')")
  [ "$size" -gt $((size_before + 16 * 8192)) ] && break
  sleep 0.01
done
[ "$size" -gt $((size_before + 16 * 8192)) ] || fail "the merge never extended the index"
still=$(sql -At -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT tsdg_merge%' AND state = 'active'")
[ "$still" = 1 ] || fail "the merge ended before the crash"
as_cluster_user pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null
wait "$merge_pid" || true
as_cluster_user pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
echo "crashed during a merge"

after=$(state)
expected="$((live + 100))"$'\n'"$probes"$'\n'"9900,600,1,0"
[ "$after" = "$expected" ] || fail "after the crash: expected $expected, got $after"
echo "old graph and every pending row intact after the crash"

merged=$(sql -At -c "SELECT tsdg_merge('items_idx')")
[ "$merged" = 9900 ] || fail "the merge after the crash merged $merged rows, expected 9900"
after=$(state)
expected="$((live + 100))"$'\n'"$probes"$'\n'"0,0,2,1"
[ "$after" = "$expected" ] || fail "after the next merge: expected $expected, got $after"
echo "the next merge completed: $(sql -At -c "SELECT rows FROM tsdg_index_info('items_idx')") rows in the graph"

# and the merged graph itself survives a crash
as_cluster_user pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null
as_cluster_user pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
[ "$(state)" = "$expected" ] || fail "the merged graph changed after a crash: $(state)"
echo "the merged graph is the same after a crash"
