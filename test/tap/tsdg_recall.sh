#!/usr/bin/env bash
# recall@10 of tsdg index scans against the exact answer (a sequential scan)
# on 50k synthetic clustered rows of 128 dimensions, at default index options
# and GUCs, for each operator class; and the plain plan of ORDER BY ... LIMIT
# using the index. Usage: tsdg_recall.sh WORKDIR (cluster from PGHOST/PGPORT).
source "$(dirname "$0")/../../scripts/common.sh"
work=$1
py=$(command -v /usr/bin/python3 || command -v python3)
db=tsdg_recall
rows=50000
queries=100
min_recall=0.95

sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$db" "$@"; }

psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
sql -c "CREATE EXTENSION pg_tsdg"

"$py" "$(dirname "$0")/../support/clustered_vectors.py" $rows 128 1 > "$work/recall_items.tsv"
"$py" "$(dirname "$0")/../support/clustered_vectors.py" $queries 128 2 > "$work/recall_queries.tsv"
sql -c "CREATE TABLE items (id int PRIMARY KEY, v vector(128))" \
    -c "CREATE TABLE queries (id int PRIMARY KEY, v vector(128))" \
    -c "\\copy items FROM '$work/recall_items.tsv'" \
    -c "\\copy queries FROM '$work/recall_queries.tsv'" \
    -c "ANALYZE items"

failed=0
for spec in "vector_l2_ops <->" "vector_ip_ops <#>" "vector_cosine_ops <=>"; do
  read -r opclass op <<<"$spec"
  start=$(date +%s)
  sql -c "CREATE INDEX items_idx ON items USING tsdg (v $opclass)"
  build_s=$(( $(date +%s) - start ))

  if [ "$opclass" = vector_l2_ops ]; then
    plan=$(sql -At -c "EXPLAIN SELECT id FROM items ORDER BY v $op (SELECT v FROM queries WHERE id = 1) LIMIT 10")
    if ! grep -q "Index Scan using items_idx" <<<"$plan"; then
      echo "FAIL: ORDER BY ... LIMIT does not use the index:"; echo "$plan"; failed=1
    fi
  fi

  recall=$(sql -At <<SQL
SET enable_indexscan = off;
CREATE TEMP TABLE truth AS
  SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.v $op q.v LIMIT 10) AS ids
  FROM queries q;
RESET enable_indexscan;
SET enable_seqscan = off;
SELECT round(avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0), 4)
  FROM truth t JOIN queries q ON q.id = t.qid,
  LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v $op q.v LIMIT 10) AS ids) r;
SQL
)
  echo "$opclass: recall@10 = $recall over $queries queries (build ${build_s}s, $rows rows)"
  if awk -v r="$recall" -v m="$min_recall" 'BEGIN { exit !(r < m) }'; then
    echo "FAIL: $opclass recall@10 $recall < $min_recall"; failed=1
  fi
  sql -c "DROP INDEX items_idx"
done

psql -X -q -d postgres -c "DROP DATABASE $db"
exit $failed
