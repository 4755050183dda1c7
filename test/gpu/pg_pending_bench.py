#!/usr/bin/env python3
"""Searches of an index with many pending rows , against the running
server named by PGHOST/PGPORT/PGUSER (test/gpu/pg_worker_run.sh pending starts it):

  * synthetic clustered rows (bench/sqlbench/dataset.py's model): an index built
    by the worker on the first --rows, then --pending more rows loaded with COPY,
    which stay pending (autovacuum is off, no merge runs);
  * the same searches three ways, side by side: the worker searching its copy of the
    pending rows with the graph (tsdg.worker_pending_rows at its default), the worker
    searching the graph while each session scans the pending rows itself
    (tsdg.worker_pending_rows = -1, the path before this copy existed), and the
    session alone on the CPU (tsdg.device = cpu); and, for reference, the same index
    before the pending rows came;
  * per way: one session's index scans (queries per second, recall@10 against float64
    ground truth over all rows), pgbench at --clients, and tsdg_search_batch with
    --batch-queries queries (time inside the call, best of 3 later calls, recall);
  * the first search after the load, which sends the worker its copy.

Writes JSON (--out) after every step.
"""
import argparse
import json
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from sqlbench import dataset  # noqa: E402
import pg_worker_bench as wb  # noqa: E402

K = wb.K


def batch_run(nq, settings):
    """best later call of tsdg_search_batch (ms) and its recall input {query: [ids]}"""
    inside_sql = ("EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) SELECT count(*) FROM tsdg_search_batch("
                  "'items_idx', (SELECT a FROM batch_queries), %d)" % K)
    later = []
    for _ in range(2):
        plans = wb.psql([inside_sql] * 3, settings=settings)
        later.extend(float(t) for t in re.findall(r"Execution Time: ([0-9.]+) ms", plans)[1:])
    out = wb.psql("SELECT b.query, i.id FROM tsdg_search_batch('items_idx', (SELECT a FROM batch_queries), %d) b "
                  "JOIN items i ON i.ctid = b.tid" % K, settings=settings)
    found = {}
    for line in out.splitlines():
        q, item = line.split("|")
        found.setdefault(int(q) - 1, []).append(int(item))
    return min(later), found


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--pending", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--batch-queries", type=int, default=10000)
    p.add_argument("--clients", default="1,8,32")
    p.add_argument("--seconds", type=int, default=6)
    p.add_argument("--ways", default="worker_pending,session_pending,cpu",
                   help="the ways to search the index with its pending rows")
    p.add_argument("--skip-no-pending", action="store_true",
                   help="no measurement before the pending rows come")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    run = wb.Run(args.out)
    results, save, step, t0 = run.results, run.save, run.step, run.t0
    total = args.rows + args.pending
    spec = dataset.SyntheticSpec(rows=total, dim=args.dim, clusters=64, intrinsic_dim=32,
                                 spread=1.0, noise=0.05, seed=3)
    results["dataset"] = spec.describe()
    nq_total = max(args.queries, args.batch_queries)
    step("generating %d x %d rows and %d queries" % (total, args.dim, nq_total))
    base, queries = dataset.synthetic(spec, nq_total)
    # the pending rows are a random tenth, not the last clusters' rows
    order = np.random.default_rng(5).permutation(total)
    base = base[order]
    truth_indexed = dataset.exact_neighbors(base[:args.rows], queries, K)
    truth_all = dataset.exact_neighbors(base, queries, K)

    wb.psql("DROP DATABASE IF EXISTS %s" % wb.DB, db="postgres")
    wb.psql("CREATE DATABASE %s" % wb.DB, db="postgres")
    wb.psql("CREATE EXTENSION pg_tsdg CASCADE")
    wb.psql("CREATE TABLE items (id int4 NOT NULL, embedding vector(%d) NOT NULL);"
            "CREATE TABLE queries (id int4 PRIMARY KEY, v vector(%d) NOT NULL)" % (args.dim, args.dim))
    # the pending rows stay pending: autovacuum would merge them
    wb.psql("ALTER TABLE items SET (autovacuum_enabled = false)")
    step("COPY and CREATE INDEX on the worker")
    wb.copy_in("items", np.arange(args.rows), base[:args.rows])
    wb.copy_in("queries", np.arange(1, nq_total + 1), queries)
    for sql in ("VACUUM ANALYZE items", "VACUUM ANALYZE queries", "CHECKPOINT"):
        wb.psql(sql)
    seconds, _ = wb.timed("CREATE INDEX items_idx ON items USING tsdg (embedding vector_l2_ops)",
                          {"maintenance_work_mem": "16GB"})
    results["build_seconds"] = seconds
    wb.psql("CREATE TABLE batch_queries AS SELECT array_agg(v ORDER BY id) AS a FROM queries WHERE id <= %d"
            % args.batch_queries)

    ways = {"worker_pending": {"tsdg.device": "auto"},
            "session_pending": {"tsdg.device": "auto", "tsdg.worker_pending_rows": "-1"},
            "cpu": {"tsdg.device": "cpu"}}

    def measure(label, settings, truth, pgbench=True):
        found, qps = wb.search_results(settings, args.queries)
        point = {"one_session_qps": qps, "recall": dataset.recall_at_k(found, truth[:args.queries], K)}
        if pgbench:
            point["pgbench"] = [wb.pgbench(c, args.seconds, args.queries, settings)
                                for c in (int(c) for c in args.clients.split(","))]
        ms, found = batch_run(args.batch_queries, settings)
        point["batch_ms"] = ms
        point["batch_qps"] = args.batch_queries / (ms / 1000)
        point["batch_recall"] = dataset.recall_at_k(found, truth[:args.batch_queries], K)
        print(label, json.dumps(point), flush=True)
        return point

    if not args.skip_no_pending:
        step("no pending rows: the worker")
        results["no_pending"] = measure("no_pending", ways["worker_pending"], truth_indexed)
        save()

    step("COPY %d pending rows" % args.pending)
    start = time.monotonic()
    wb.copy_in("items", np.arange(args.rows, total), base[args.rows:])
    results["pending_copy_seconds"] = time.monotonic() - start
    wb.psql("ANALYZE items")
    results["pending_count"] = int(wb.psql(
        "SELECT (tsdg_index_info('items_idx')).pending"))
    seconds, _ = wb.timed("SELECT id FROM items ORDER BY embedding <-> (SELECT v FROM queries WHERE id = 1) LIMIT 10",
                          dict(ways["worker_pending"], enable_seqscan="off"))
    results["first_search_seconds"] = seconds
    cached = [c for c in wb.status()["cached_indexes"] if c.get("index") == "items_idx"]
    results["worker_copy_rows"] = cached[0]["pending_rows"] if cached else None
    print("first search %.3f s; the worker holds %s pending rows" % (seconds, results["worker_copy_rows"]),
          flush=True)
    save()

    for label in args.ways.split(","):
        settings = ways[label]
        step("%d pending rows: %s" % (args.pending, label))
        results[label] = measure(label, settings, truth_all, pgbench=label != "cpu")
        save()
    results["worker_end"] = wb.status()
    results["seconds"] = time.monotonic() - t0
    save()
    step("done")


if __name__ == "__main__":
    main()
