#!/usr/bin/env bash
# CREATE INDEX's heap scan alone and shared with parallel workers: the same
# table (its parallel_workers storage parameter set to WORKERS, which a tsdg
# build needs to launch any) built with max_parallel_maintenance_workers 0
# and WORKERS, by turns,
# ROUNDS times; for each build the heap scan's and the whole build's seconds
# from the build's LOG line, the workers it launched, and recall@10 at
# tsdg.ef_search 64 against the exact answer (so that a faster scan is seen
# to build the same index). Data: hard rows (test/support/subspace_clusters.py:
# 100 clusters, each on its own random 16-dim subspace, overlapping).
#
# usage: bench/parallel_scan.sh [ROWS] [DIMS] [WORKERS] [ROUNDS]
#   defaults 2000000 128 1 2
# PARSCAN_DEVICE=cpu (default) builds in the session; auto builds on the GPU
# worker (PARSCAN_WORKER_BACKEND=cpu runs it on the core's CPU backend, on a
# machine without a GPU). PARSCAN_OPTIONS: the index's WITH options (default
# a small graph, degree 8, build_k 8, 1 iteration: the scan is what is
# measured). maintenance_work_mem is 8GB, so that the rows fit it. Starts its
# own cluster (port 54357 + TSDG_PORT_OFFSET) in a temp dir; prints a
# Markdown table.
source "$(dirname "$0")/../scripts/common.sh"
rows=${1:-2000000}
dims=${2:-128}
workers=${3:-1}
rounds=${4:-2}
queries=20
py=$(numpy_python)
work=$(mktemp -d /tmp/tsdg_parallel_scan.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
dsm_type=$(shared_memory_type)
start_cluster "$work" 54357 "shared_buffers = '1GB'" "maintenance_work_mem = '8GB'" \
  "max_parallel_workers_per_gather = 0" "dynamic_shared_memory_type = $dsm_type" \
  "tsdg.device = ${PARSCAN_DEVICE:-cpu}" "tsdg.worker_backend = ${PARSCAN_WORKER_BACKEND:-cuda}" \
  "log_min_messages = log" "autovacuum = off"

"$py" "$TSDG_ROOT/test/support/subspace_clusters.py" "$rows" "$dims" 100 1 1 > "$work/items.tsv"
"$py" "$TSDG_ROOT/test/support/subspace_clusters.py" "$queries" "$dims" 100 1 2 > "$work/queries.tsv"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_tsdg CASCADE"
load_vector_tables "$work" "$work/items.tsv" "$work/queries.tsv" truth
rm -f "$work/items.tsv"
worker=$(settled_worker_state)
export PARSCAN_LOG=$work/server.log PARSCAN_WORKER=${worker:-none}

"$py" - "$rows" "$dims" "$workers" "$rounds" "${PARSCAN_OPTIONS:-degree = 8, build_k = 8, iterations = 1}" <<'PY'
import os, re, subprocess, sys
rows, dims, workers, rounds, options = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                        int(sys.argv[4]), sys.argv[5])
log = os.environ["PARSCAN_LOG"]

def psql(sql):
    return subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1"], input=sql,
                          capture_output=True, text=True, check=True).stdout.strip()

def build(n):
    psql("DROP INDEX IF EXISTS items_v;")
    start = os.path.getsize(log)
    psql("SET max_parallel_maintenance_workers = %d;\n"
         "CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops) WITH (%s);" % (n, options))
    with open(log) as f:
        f.seek(start)
        line = re.search(r'tsdg index "items_v" built from .*', f.read()).group(0)
    total, scan = re.search(r"in ([\d.]+) s: heap scan ([\d.]+) s", line).groups()
    launched = re.search(r"with (\d+) parallel worker", line)
    return float(scan), float(total), int(launched.group(1)) if launched else 0

def recall(ef):
    return float(psql(
        "SET enable_seqscan = off; SET tsdg.ef_search = %d;\n"
        "SELECT avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0)"
        " FROM truth t JOIN queries q ON q.id = t.qid,"
        " LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids) r;" % ef
    ).splitlines()[-1])

print("rows %d, %d dims, hard data (100 subspace clusters, spread 1), L2, WITH (%s);"
      " tsdg.device %s, GPU worker: %s (tsdg.worker_backend %s), maintenance_work_mem 8GB, %d CPUs"
      % (rows, dims, options, os.environ.get("PARSCAN_DEVICE", "cpu"), os.environ["PARSCAN_WORKER"],
         os.environ.get("PARSCAN_WORKER_BACKEND", "cuda"), os.cpu_count()))
print()
psql("ALTER TABLE items SET (parallel_workers = %d);" % workers)
print("| round | max_parallel_maintenance_workers | workers launched | heap scan s | CREATE INDEX s | recall@10 ef 64 |")
print("|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    for n in (0, workers):
        scan, total, launched = build(n)
        print("| %d | %d | %d | %.3f | %.1f | %.3f |" % (r, n, launched, scan, total, recall(64)), flush=True)
PY
