#!/usr/bin/env bash
# Benchmark of the tsdg access method on the CPU path: CREATE INDEX time,
# index size, and recall@10 with single-client QPS of ORDER BY <-> LIMIT 10
# over a sweep of tsdg.ef_search, next to the exact sequential scan in the same
# run. Data: synthetic clustered rows (test/support/clustered_vectors.py).
#
# usage: bench/am_bench.sh [ROWS] [QUERIES]   (defaults 200000, 200)
# Starts its own cluster on port 54343 in a temp dir; prints a Markdown table.
source "$(dirname "$0")/../scripts/common.sh"
rows=${1:-200000}
queries=${2:-200}
dims=128
py=$(command -v /usr/bin/python3 || command -v python3)
work=$(mktemp -d /tmp/tsdg_am_bench.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
start_cluster "$work" 54343 "shared_buffers = '1GB'" "maintenance_work_mem = '2GB'" "max_parallel_workers_per_gather = 0"

"$py" "$TSDG_ROOT/test/support/clustered_vectors.py" "$rows" $dims 1 > "$work/items.tsv"
"$py" "$TSDG_ROOT/test/support/clustered_vectors.py" "$queries" $dims 2 > "$work/queries.tsv"
psql -X -q -v ON_ERROR_STOP=1 \
  -c "CREATE EXTENSION pg_tsdg CASCADE" \
  -c "CREATE TABLE items (id int PRIMARY KEY, v vector($dims))" \
  -c "\\copy items FROM '$work/items.tsv'" \
  -c "VACUUM ANALYZE items"

"$py" - "$work" "$rows" "$queries" <<'PY'
import os, subprocess, sys, time
work, rows, nq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
queries = [line.split("\t")[1].strip() for line in open(os.path.join(work, "queries.tsv"))]

def psql(sql):
    return subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1"], input=sql,
                          capture_output=True, text=True, check=True).stdout

def run_queries(settings):
    """One session, one query at a time; returns (result id lists, seconds)."""
    body = "".join("SELECT array_agg(id) FROM (SELECT id FROM items ORDER BY v <-> '%s' LIMIT 10) s;\n" % q
                   for q in queries)
    psql(settings + body)  # warm the cache with the same queries
    start = time.perf_counter()
    out = psql(settings + body)
    seconds = time.perf_counter() - start
    lists = [set(map(int, line.strip("{}").split(","))) for line in out.split("\n") if line.startswith("{")]
    assert len(lists) == nq, len(lists)
    return lists, seconds

truth, exact_s = run_queries("SET enable_indexscan = off;\n")
start = time.perf_counter()
psql("CREATE INDEX items_tsdg ON items USING tsdg (v vector_l2_ops);")
build_s = time.perf_counter() - start
size = int(psql("SELECT pg_relation_size('items_tsdg');"))
heap = int(psql("SELECT pg_relation_size('items');"))

print("rows %d, %d dims, %d queries, k = 10, L2; CREATE INDEX %.1f s; index %.1f MB (heap %.1f MB)"
      % (rows, 128, nq, build_s, size / 2**20, heap / 2**20))
print()
print("| search | tsdg.ef_search | recall@10 | QPS |")
print("|---|---|---|---|")
print("| exact (seq scan) | - | 1.000 | %.1f |" % (nq / exact_s))
for ef in (10, 20, 40, 64, 100, 200, 400):
    found, seconds = run_queries("SET enable_seqscan = off; SET tsdg.ef_search = %d;\n" % ef)
    recall = sum(len(a & b) for a, b in zip(found, truth)) / (10.0 * nq)
    print("| tsdg | %d | %.3f | %.1f |" % (ef, recall, nq / seconds))
PY
