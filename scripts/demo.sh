#!/usr/bin/env bash
# The demo: installs what is missing, builds and installs pg_tsdg, starts a
# private PostgreSQL cluster in a temporary directory, fills a table with
# random vectors and runs a few distance queries, exact and through a tsdg
# index. Stops the cluster at the end.
#   TSDG_DEMO_PORT (54330), TSDG_DEMO_ROWS (5000), TSDG_DEMO_DIMS (128)
source "$(dirname "$0")/common.sh"
cd "$TSDG_ROOT"

install_dependencies
build_and_install

work=$(mktemp -d /tmp/pg_tsdg_demo.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
log "starting a private cluster in $work"
start_cluster "$work" "${TSDG_DEMO_PORT:-54330}"

log "random vectors and distance queries"
psql -X -v ON_ERROR_STOP=1 -v rows="${TSDG_DEMO_ROWS:-5000}" -v dims="${TSDG_DEMO_DIMS:-128}" <<'SQL'
\set QUIET on
CREATE EXTENSION pg_tsdg CASCADE;
CREATE TABLE items (id bigint PRIMARY KEY, embedding vector(:dims));
-- one row per id, its dims random components aggregated into a vector
INSERT INTO items
  SELECT i, array_agg(random() - 0.5 ORDER BY d)::vector
  FROM generate_series(1, :rows) i, generate_series(1, :dims) d
  GROUP BY i;
ANALYZE items;
\set QUIET off

SELECT count(*) AS rows, max(vector_dims(embedding)) AS dims FROM items;
SELECT embedding AS query FROM items WHERE id = 1 \gset
\echo 'a vector, printed in the text form:'
SELECT subvector(embedding, 1, 4) AS first_four_components FROM items WHERE id = 1;

\echo 'the 5 nearest rows to row 1 by L2 distance (<->), exact scan:'
\timing on
SELECT id, embedding <-> :'query' AS l2_distance
  FROM items ORDER BY embedding <-> :'query' LIMIT 5;
\timing off
\echo 'by cosine distance (<=>) and by inner product (<#> is its negative):'
SELECT id, embedding <=> :'query' AS cosine_distance
  FROM items ORDER BY embedding <=> :'query' LIMIT 5;
SELECT id, -(embedding <#> :'query') AS inner_product
  FROM items ORDER BY embedding <#> :'query' LIMIT 5;
\echo 'the mean vector, its norm, and the mean distance to it:'
SELECT l2_norm(avg(embedding)) AS norm_of_mean FROM items;
SELECT avg(embedding <-> (SELECT avg(embedding) FROM items)) AS mean_distance_to_mean FROM items;

\echo 'a tsdg graph index for L2 distance, and the same query through it'
\echo '(a table this small is cheaper to scan, so sequential scans are turned off):'
\timing on
CREATE INDEX items_embedding_tsdg ON items USING tsdg (embedding vector_l2_ops);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM items
  ORDER BY embedding <-> (SELECT embedding FROM items WHERE id = 1) LIMIT 5;
SELECT id, embedding <-> :'query' AS l2_distance
  FROM items ORDER BY embedding <-> :'query' LIMIT 5;
RESET enable_seqscan;
\timing off
SELECT rows, pending, degree, pg_size_pretty(size) AS size, graph_version, build_k, alpha, lambda0
  FROM tsdg_index_info('items_embedding_tsdg');
SQL
log "demo finished"
