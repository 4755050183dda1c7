#!/usr/bin/env bash
# Crash safety of tsdg indexes: the server is stopped with -m immediate (no
# checkpoint, recovery replays the WAL) after CREATE INDEX, after inserts into
# the pending list and after VACUUM; every time the index gives the same
# answers and counts as before. An unlogged table's index comes back empty
# and usable. Usage: tsdg_crash.sh WORKDIR (starts its own cluster on 54340).
source "$(dirname "$0")/../../scripts/common.sh"
dir=$1/crash
port=54340
start_cluster "$dir" "$port" "autovacuum = off"
trap 'stop_cluster "$dir"' EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
crash_and_restart() {
  as_cluster_user pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null
  as_cluster_user pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}
answers() {
  sql -At <<'SQL'
SET enable_seqscan = off;
SELECT string_agg(ids::text, ';' ORDER BY qid) FROM (
  SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids
  FROM queries q) s;
SELECT concat_ws(',', rows, pending, deleted, graph_version, size) FROM tsdg_index_info('items_idx');
SQL
}
expect_same() {
  local what=$1 before=$2 after
  after=$(answers)
  if [ "$before" != "$after" ]; then
    echo "FAIL: answers differ after a crash $what"; echo "before: $before"; echo "after:  $after"; exit 1
  fi
  echo "same answers after a crash $what"
}

sql -v seed=0.5 -v rows=5000 -f "$(dirname "$0")/../support/random_items.sql"
sql <<'SQL'
CREATE INDEX items_idx ON items USING tsdg (v vector_l2_ops);
CREATE UNLOGGED TABLE scratch (id int, v vector(16));
INSERT INTO scratch SELECT id, v FROM items WHERE id <= 500;
CREATE INDEX scratch_idx ON scratch USING tsdg (v vector_l2_ops);
SQL

before=$(answers)
crash_and_restart
expect_same "after CREATE INDEX" "$before"

sql -c "INSERT INTO items SELECT 5000 + id, v FROM queries" \
    -c "INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector FROM generate_series(6001, 7000) i"
before=$(answers)
grep -q ",1010,0," <<<"$before" || { echo "FAIL: expected 1010 pending rows: $before"; exit 1; }
crash_and_restart
expect_same "after inserts" "$before"

sql -c "DELETE FROM items WHERE id % 3 = 0" -c "VACUUM items"
before=$(answers)
crash_and_restart
expect_same "after VACUUM" "$before"

unlogged=$(sql -At -c "SELECT rows, pending FROM tsdg_index_info('scratch_idx')" \
               -c "SET enable_seqscan = off" -c "SELECT count(*) FROM (SELECT id FROM scratch ORDER BY v <-> (SELECT v FROM queries WHERE id = 1) LIMIT 5) s")
if [ "$unlogged" != $'0|0\n0' ]; then
  echo "FAIL: the unlogged index is not empty after a crash: $unlogged"; exit 1
fi
sql -c "INSERT INTO scratch SELECT id, v FROM items WHERE id <= 10"
found=$(sql -At -c "SET enable_seqscan = off" -c "SELECT count(*) FROM (SELECT id FROM scratch ORDER BY v <-> (SELECT v FROM queries WHERE id = 1) LIMIT 5) s")
[ "$found" = 5 ] || { echo "FAIL: the unlogged index does not take rows after a crash ($found)"; exit 1; }
echo "the unlogged index came back empty and usable"
