#!/usr/bin/env python3
"""The GPU worker's checks and benchmarks through SQL, against the running
server named by PGHOST/PGPORT/PGUSER (test/gpu/pg_worker_run.sh starts it):

  * synthetic clustered rows (by default 64 overlapping clusters of intrinsic
    dimension 32; --clusters, --intrinsic-dim, --spread and --absolute-scale
    give the hard classes; the model of bench/sqlbench/dataset.py) loaded with
    COPY BINARY;
  * CREATE INDEX on the GPU worker and on the CPU (tsdg.device = cpu) of the same
    table, each timed end to end, recall@10 of both at default search settings
    (they must agree within 0.01);
  * the same index searched by the worker and by the session on the CPU: recall and
    how many of the rows they return agree;
  * pgbench throughput and latency at several client counts, GPU path and CPU path,
    with a script that picks a random query vector per transaction;
  * tsdg_search_batch and tsdg_search_batch_arrays with many queries: time
    inside the call (EXPLAIN ANALYZE, a new session per call, best of 3) and recall;
  * with --gpu-ef, the GPU path's recall and pgbench at other tsdg.ef_search values.

Writes JSON (--out) after every step, so a run cut short still reports what it did.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from sqlbench import dataset, pg  # noqa: E402

K = 10
DB = "worker_bench"


def psql(sql, db=DB, settings=None, check=True):
    """sql: one statement, or a list of statements run one after another in one session"""
    env = dict(os.environ)
    if settings:
        env["PGOPTIONS"] = " ".join("-c %s=%s" % kv for kv in settings.items())
    commands = [arg for statement in ([sql] if isinstance(sql, str) else sql) for arg in ("-c", statement)]
    done = subprocess.run([os.path.join(os.environ["PGBIN"], "psql"), "-X", "-q", "-At",
                           "-v", "ON_ERROR_STOP=1", "-d", db] + commands,
                          capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise RuntimeError("psql failed: %s\n%s" % (str(sql)[:200], done.stderr[-2000:]))
    return done.stdout.strip()


def status():
    row = psql("SELECT row_to_json(s) FROM tsdg_gpu_status() s")
    return json.loads(row)


def copy_in(table, ids, vectors):
    args = [os.path.join(os.environ["PGBIN"], "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
            "-d", DB, "-c", "COPY %s FROM STDIN (FORMAT binary)" % table]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    for chunk in pg.copy_binary_chunks(ids, vectors):
        proc.stdin.write(chunk)
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("COPY %s failed: %s" % (table, proc.stderr.read().decode()[-2000:]))


def timed(sql, settings=None):
    start = time.monotonic()
    out = psql(sql, settings=settings)
    return time.monotonic() - start, out


def search_results(settings, nq):
    """{query row: [item ids]} for the first nq queries, one session, by the index."""
    sql = ("SET enable_seqscan = off; SELECT q.id, r.id FROM queries q CROSS JOIN LATERAL "
           "(SELECT i.id FROM items i ORDER BY i.embedding <-> q.v LIMIT %d) r "
           "WHERE q.id <= %d" % (K, nq))
    start = time.monotonic()
    out = psql(sql, settings=settings)
    seconds = time.monotonic() - start
    found = {}
    for line in out.splitlines():
        qid, item = line.split("|")
        found.setdefault(int(qid) - 1, []).append(int(item))
    return found, nq / seconds


def agreement(a, b):
    common = sum(len(set(a.get(q, ())) & set(b.get(q, ()))) for q in set(a) | set(b))
    return common / (K * max(len(a), 1))


def pgbench(clients, seconds, nq, settings):
    with tempfile.TemporaryDirectory() as work:
        script = os.path.join(work, "search.sql")
        with open(script, "w") as f:
            f.write("\\set qid random(1, %d)\n"
                    "SELECT id FROM items ORDER BY embedding <-> "
                    "(SELECT v FROM queries WHERE id = :qid) LIMIT %d;\n" % (nq, K))
        env = dict(os.environ)
        env["PGOPTIONS"] = " ".join("-c %s=%s" % kv for kv in settings.items())
        done = subprocess.run([os.path.join(os.environ["PGBIN"], "pgbench"), "-n", "-M", "prepared",
                               "-f", script, "-c", str(clients), "-j", str(min(clients, 16)),
                               "-T", str(seconds), "-r", DB],
                              capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError("pgbench failed:\n%s\n%s" % (done.stdout[-1500:], done.stderr[-1500:]))
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
    lat = re.search(r"latency average = ([0-9.]+) ms", done.stdout)
    return {"clients": clients, "qps": float(tps.group(1)),
            "latency_ms": float(lat.group(1)) if lat else None}


class Run:
    """A benchmark's results, written as JSON to out after every step (so that a run
    cut short still reports what it did), and its step lines with the seconds since
    its start."""

    def __init__(self, out):
        self.out = out
        self.results = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        self.t0 = time.monotonic()

    def save(self):
        with open(self.out, "w") as f:
            json.dump(self.results, f, indent=1)

    def step(self, name):
        print("== %s (%.0f s)" % (name, time.monotonic() - self.t0), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=1000, help="queries of the recall passes and pgbench")
    p.add_argument("--batch-queries", type=int, default=10000)
    p.add_argument("--clients", default="1,8,32,128")
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--gpu-ef", default="",
                   help="also sweep the GPU path at these tsdg.ef_search values (recall and pgbench)")
    p.add_argument("--batch-ef", default="64",
                   help="also time both tsdg_search_batch forms on the GPU at these tsdg.ef_search values")
    p.add_argument("--clusters", type=int, default=64)
    p.add_argument("--intrinsic-dim", type=int, default=32)
    p.add_argument("--spread", type=float, default=1.0)
    p.add_argument("--absolute-scale", action="store_true",
                   help="clusters of absolute size, as tsdg-bench --absolute-scale (the hard classes: "
                        "--clusters rows/500 --intrinsic-dim 16 --spread 1 or 4)")
    p.add_argument("--skip-cpu-build", action="store_true")
    p.add_argument("--later-builds", default="",
                   help="comma-separated max_parallel_maintenance_workers values: after the benchmark's own "
                        "build and its recall, a GPU build of the table at each, dropped again")
    p.add_argument("--skip-cpu-batch", action="store_true",
                   help="batch functions and pgbench on the GPU worker only (the CPU's take minutes past 1M rows)")
    p.add_argument("--scan-workers", default="",
                   help="comma-separated parallel worker counts: a GPU build of the table with its "
                        "parallel_workers storage parameter and max_parallel_maintenance_workers set to "
                        "each, dropped again, before the benchmark's own build (with neither set)")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    run = Run(args.out)
    results, save, step, t0 = run.results, run.save, run.step, run.t0
    spec = dataset.SyntheticSpec(rows=args.rows, dim=args.dim, clusters=args.clusters,
                                 intrinsic_dim=args.intrinsic_dim, spread=args.spread, noise=0.05, seed=1,
                                 absolute_scale=args.absolute_scale)
    results["dataset"] = spec.describe()
    nq_total = max(args.queries, args.batch_queries)
    step("generating %d x %d rows and %d queries" % (args.rows, args.dim, nq_total))
    base, queries = dataset.synthetic(spec, nq_total)
    truth = dataset.exact_neighbors(base, queries, K)

    psql("DROP DATABASE IF EXISTS %s" % DB, db="postgres")
    psql("CREATE DATABASE %s" % DB, db="postgres")
    psql("CREATE EXTENSION pg_tsdg CASCADE")
    psql("CREATE TABLE items (id int4 NOT NULL, embedding vector(%d) NOT NULL);"
         "CREATE TABLE queries (id int4 PRIMARY KEY, v vector(%d) NOT NULL)" % (args.dim, args.dim))
    step("COPY")
    start = time.monotonic()
    copy_in("items", np.arange(args.rows), base)
    results["copy_seconds"] = time.monotonic() - start
    copy_in("queries", np.arange(1, nq_total + 1), queries)
    for sql in ("VACUUM ANALYZE items", "VACUUM ANALYZE queries", "CHECKPOINT"):
        psql(sql)
    results["worker_before"] = status()
    save()

    gpu = {"tsdg.device": "auto"}
    cpu = {"tsdg.device": "cpu"}
    mwm = {"maintenance_work_mem": "16GB"}

    for workers in [int(w) for w in args.scan_workers.split(",") if w]:
        step("CREATE INDEX on the GPU worker, %d parallel scan workers" % workers)
        psql("ALTER TABLE items SET (parallel_workers = %d)" % workers)
        seconds, _ = timed("CREATE INDEX items_scan_workers ON items USING tsdg (embedding vector_l2_ops)",
                           dict(gpu, max_parallel_maintenance_workers=str(workers), **mwm))
        results.setdefault("scan_workers_build_seconds", {})[workers] = seconds
        print(json.dumps({"scan_workers": workers, "build_seconds": seconds}), flush=True)
        psql(["DROP INDEX items_scan_workers", "ALTER TABLE items RESET (parallel_workers)"])
        save()

    step("CREATE INDEX on the GPU worker")
    seconds, _ = timed("CREATE INDEX items_gpu ON items USING tsdg (embedding vector_l2_ops)",
                       dict(gpu, **mwm))
    results["gpu_build_seconds"] = seconds
    results["worker_after_gpu_build"] = status()
    save()
    found_gpu, qps_gpu1 = search_results(gpu, args.queries)
    found_cpu, qps_cpu1 = search_results(cpu, args.queries)
    results["gpu_built"] = {
        "recall_gpu_search": dataset.recall_at_k(found_gpu, truth[:args.queries], K),
        "recall_cpu_search": dataset.recall_at_k(found_cpu, truth[:args.queries], K),
        "gpu_cpu_agreement": agreement(found_gpu, found_cpu),
        "one_session_qps_gpu": qps_gpu1, "one_session_qps_cpu": qps_cpu1}
    print(json.dumps(results["gpu_built"]), flush=True)
    save()

    for workers in [int(w) for w in args.later_builds.split(",") if w]:
        step("CREATE INDEX on the GPU worker again, max_parallel_maintenance_workers %d" % workers)
        seconds, _ = timed("CREATE INDEX items_again ON items USING tsdg (embedding vector_l2_ops)",
                           dict(gpu, max_parallel_maintenance_workers=str(workers), **mwm))
        results.setdefault("later_build_seconds", []).append({"workers": workers, "seconds": seconds})
        print(json.dumps({"later_build_workers": workers, "build_seconds": seconds}), flush=True)
        psql("DROP INDEX items_again")
        save()

    step("a GPU build cancelled while the worker builds frees its GPU memory")
    before = status()
    build = subprocess.Popen(
        [os.path.join(os.environ["PGBIN"], "psql"), "-X", "-q", "-d", DB, "-c",
         "SET application_name = 'cancelled_build'; SET maintenance_work_mem = '16GB'; "
         "CREATE INDEX items_cancelled ON items USING tsdg (embedding vector_l2_ops)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    busy = False
    for _ in range(600):
        if status()["state"] == "busy":
            busy = True
            break
        time.sleep(0.02)
    time.sleep(0.3)
    psql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cancelled_build'")
    _, err = build.communicate()
    time.sleep(2)
    after = status()
    results["cancelled_build"] = {
        "worker_was_building": busy, "error": err.strip()[-300:], "worker_state_after": after["state"],
        "device_free_before": before.get("memory_free"), "device_free_after": after.get("memory_free"),
        "freed": (before.get("memory_free") is not None and after.get("memory_free") is not None
                  and after["memory_free"] >= before["memory_free"] - (256 << 20))}
    print(json.dumps(results["cancelled_build"]), flush=True)
    save()

    # the query array built once, so the timed call is the function's own work
    psql("CREATE TABLE batch_queries AS SELECT array_agg(v ORDER BY id) AS a FROM queries WHERE id <= %d"
         % args.batch_queries)
    # each form: its rows as (query, item id) for the recall, and the timed call
    batch_forms = {
        "search_batch": (
            "SELECT b.query, i.id FROM tsdg_search_batch('items_gpu', (SELECT a FROM batch_queries), %d) b "
            "JOIN items i ON i.ctid = b.tid" % K,
            "tsdg_search_batch"),
        "search_batch_arrays": (
            "SELECT b.query, i.id FROM tsdg_search_batch_arrays('items_gpu', (SELECT a FROM batch_queries), %d) b "
            "CROSS JOIN unnest(b.tids) AS t(tid) JOIN items i ON i.ctid = t.tid" % K,
            "tsdg_search_batch_arrays"),
    }
    devices = [("gpu", gpu)] + ([] if args.skip_cpu_batch else [("cpu", cpu)])
    batch_settings = list(devices)
    batch_settings += [("gpu_ef%s" % ef, dict(gpu, **{"tsdg.ef_search": ef}))
                       for ef in args.batch_ef.split(",") if ef]
    for key, (rows_sql, function) in batch_forms.items():
        step("%s with %d queries" % (function, args.batch_queries))
        inside_sql = ("EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) SELECT count(*) FROM %s("
                      "'items_gpu', (SELECT a FROM batch_queries), %d)" % (function, K))
        batch = {}
        for label, settings in batch_settings:
            # three sessions of four calls each: the first call of a session
            # also maps the shared memory it touches (page faults), the later
            # ones are what an application on a pooled connection sees
            first_calls, later_calls = [], []
            for _ in range(3):
                plans = psql([inside_sql] * 4, settings=settings)
                times = [float(t) for t in re.findall(r"Execution Time: ([0-9.]+) ms", plans)]
                first_calls.append(times[0])
                later_calls.extend(times[1:])
            out = psql(rows_sql, settings=settings)
            found = {}
            for line in out.splitlines():
                q, item = line.split("|")
                found.setdefault(int(q) - 1, []).append(int(item))
            batch[label] = {"first_call_ms_runs": first_calls, "later_call_ms_runs": later_calls,
                            "queries_per_second_first_call": args.batch_queries / (min(first_calls) / 1000),
                            "queries_per_second": args.batch_queries / (min(later_calls) / 1000),
                            "recall": dataset.recall_at_k(found, truth[:args.batch_queries], K)}
            print(function, label, json.dumps(batch[label]), flush=True)
        results[key] = batch
        save()

    step("pgbench")
    bench = {"gpu": [], "cpu": []}
    for clients in [int(c) for c in args.clients.split(",")]:
        for label, settings in devices:
            point = pgbench(clients, args.seconds, args.queries, settings)
            bench[label].append(point)
            print(label, json.dumps(point), flush=True)
            results["pgbench"] = bench
            save()

    # The GPU path at other ef_search values: recall of one session, then pgbench.
    sweep = []
    for ef in [int(e) for e in args.gpu_ef.split(",") if e.strip()]:
        settings = dict(gpu, **{"tsdg.ef_search": str(ef)})
        found, one_session_qps = search_results(settings, args.queries)
        point = {"ef_search": ef, "recall": dataset.recall_at_k(found, truth[:args.queries], K),
                 "one_session_qps": one_session_qps, "pgbench": []}
        for clients in [int(c) for c in args.clients.split(",")]:
            point["pgbench"].append(pgbench(clients, args.seconds, args.queries, settings))
        print("gpu ef sweep", json.dumps(point), flush=True)
        sweep.append(point)
        results["gpu_ef_sweep"] = sweep
        save()
    results["worker_after_pgbench"] = status()
    save()

    if not args.skip_cpu_build:
        step("CREATE INDEX on the CPU")
        psql("DROP INDEX items_gpu")
        seconds, _ = timed("CREATE INDEX items_cpu ON items USING tsdg (embedding vector_l2_ops)",
                           dict(cpu, **mwm))
        results["cpu_build_seconds"] = seconds
        found_cpu_built, _ = search_results(cpu, args.queries)
        results["cpu_built"] = {"recall_cpu_search":
                                dataset.recall_at_k(found_cpu_built, truth[:args.queries], K)}
        results["build_recall_difference"] = abs(results["cpu_built"]["recall_cpu_search"] -
                                                 results["gpu_built"]["recall_cpu_search"])
        print(json.dumps(results["cpu_built"]), flush=True)
        save()
    results["worker_end"] = status()
    results["seconds"] = time.monotonic() - t0
    save()
    step("done")


if __name__ == "__main__":
    main()
