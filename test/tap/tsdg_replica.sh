#!/usr/bin/env bash
# Replication of tsdg indexes: a streaming replica made with pg_basebackup -R
# answers index scans the same as its primary, for an index that existed at
# the base backup and one built after it, through inserts, merges and VACUUM;
# a merge's new region, of which only the graph's pages and the last page are
# logged, has the same size on the replica.
# Usage: tsdg_replica.sh WORKDIR (starts its own clusters on ports 54341 and 54342).
source "$(dirname "$0")/../../scripts/common.sh"
primary=$1/primary
replica=$1/replica
primary_port=$(test_port 54341) replica_port=$(test_port 54342)
start_cluster "$primary" 54341 "autovacuum = off"
trap 'stop_cluster "$replica"; stop_cluster "$primary"' EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
answers() {
  sql -At -h "$1" -p "$2" <<'SQL'
SET enable_seqscan = off;
SELECT string_agg(ids::text, ';' ORDER BY qid) FROM (
  SELECT q.id AS qid,
         ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS l2,
         ARRAY(SELECT i.id FROM items i ORDER BY i.v <=> q.v LIMIT 10) AS ids
  FROM queries q) s;
SELECT concat_ws(',', rows, pending, deleted, graph_version) FROM tsdg_index_info('items_l2');
SELECT concat_ws(',', rows, pending, deleted, graph_version) FROM tsdg_index_info('items_cos');
SQL
}
wait_for_replay() {
  local lsn
  lsn=$(sql -At -h "$primary" -p $primary_port -c "SELECT pg_current_wal_lsn()")
  for _ in $(seq 1 300); do
    if [ "$(sql -At -h "$replica" -p $replica_port -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'")" = t ]; then
      return 0
    fi
    sleep 0.2
  done
  echo "FAIL: the replica did not replay up to $lsn"; exit 1
}
compare() {
  local p r
  wait_for_replay
  p=$(answers "$primary" $primary_port)
  r=$(answers "$replica" $replica_port)
  if [ "$p" != "$r" ]; then
    echo "FAIL: the replica answers differently $1"; echo "primary: $p"; echo "replica: $r"; exit 1
  fi
  echo "replica answers the same $1"
}

sql -h "$primary" -p $primary_port -v seed=0.25 -v rows=4000 -f "$(dirname "$0")/../support/random_items.sql"
sql -h "$primary" -p $primary_port <<'SQL'
CREATE INDEX items_l2 ON items USING tsdg (v vector_l2_ops);
SQL

mkdir -p "$replica"
chown "$CLUSTER_USER" "$replica"
as_cluster_user pg_basebackup -h "$primary" -p $primary_port -U postgres -D "$replica/data" -R -X stream
{
  echo "port = $replica_port"
  echo "unix_socket_directories = '$replica'"
} >> "$replica/data/postgresql.conf"
as_cluster_user pg_ctl -D "$replica/data" -l "$replica/server.log" -w start >/dev/null

sql -h "$primary" -p $primary_port -c "CREATE INDEX items_cos ON items USING tsdg (v vector_cosine_ops)"
compare "after CREATE INDEX"

sql -h "$primary" -p $primary_port \
    -c "INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 16) WHERE i > 0)::vector FROM generate_series(4001, 4600) i"
compare "after inserts"

sql -h "$primary" -p $primary_port -c "SELECT tsdg_merge('items_l2'), tsdg_merge('items_cos')" >/dev/null
compare "after merges"
for index in items_l2 items_cos; do
  p=$(sql -At -h "$primary" -p $primary_port -c "SELECT pg_relation_size('$index')")
  r=$(sql -At -h "$replica" -p $replica_port -c "SELECT pg_relation_size('$index')")
  if [ "$p" != "$r" ]; then
    echo "FAIL: $index has $p bytes on the primary, $r on the replica"; exit 1
  fi
done
echo "merged indexes of the same size on the replica"

sql -h "$primary" -p $primary_port -c "DELETE FROM items WHERE id % 4 = 0" -c "VACUUM items"
compare "after VACUUM"
