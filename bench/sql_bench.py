#!/usr/bin/env python3
"""SQL-level benchmark of pg_tsdg: recall@10 against QPS at 1..N concurrent clients,
latency percentiles, build time and index size, measured through SQL the way a user
runs it (COPY, CREATE INDEX, ORDER BY embedding <-> q LIMIT 10 from pgbench clients).

Runs against the server named by the PG* environment variables or --dsn (see
bench/run.sh, which starts a private cluster). Writes results.json, results.md,
recall_qps.png and build.png under --out.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sqlbench import dataset, methods, report, workload  # noqa: E402
from sqlbench.pg import PgError, Server  # noqa: E402
from sqlbench.progress import Progress  # noqa: E402

K = 10

# Sizes: the default fits in a few minutes on a 2-core machine; --gpu is the 1M-row run
# for the GPU machine.
PRESETS = {
    "default": dict(rows=100_000, dim=128, queries=1000, exact_queries=100,
                    clients="1,2,4", ef="10,20,40,80,160", seconds=4, exact_seconds=4,
                    maintenance_work_mem="2GB"),
    "gpu": dict(rows=1_000_000, dim=128, queries=5000, exact_queries=50,
                clients="1,8,32,64", ef="16,32,64,128,256", seconds=8, exact_seconds=5,
                maintenance_work_mem="16GB"),
}


def int_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", action="store_true",
                   help="large preset for the GPU machine: 1M x 128, more clients")
    p.add_argument("--out", default="bench-out", help="folder for the results (created)")
    p.add_argument("--report-only", action="store_true",
                   help="measure nothing: redraw the table and plots from OUT/results.json")
    conn = p.add_argument_group("connection (default: the PG* environment variables)")
    conn.add_argument("--dsn", default="", help="libpq key=value connection string, without dbname")
    conn.add_argument("--pgbin", help="folder of psql and pgbench (default: $PGBIN, then PATH)")
    conn.add_argument("--dbname", default="tsdg_bench",
                      help="database for the tsdg runs (created); pgvector uses DBNAME_pgvector")
    data = p.add_argument_group("data (default: synthetic clustered)")
    data.add_argument("--rows", type=int)
    data.add_argument("--dim", type=int)
    data.add_argument("--clusters", type=int, default=64)
    data.add_argument("--intrinsic-dim", type=int, default=32)
    data.add_argument("--spread", type=float, default=1.0,
                      help="cluster radius relative to the spacing of the centers (>= 1: overlapping)")
    data.add_argument("--absolute-scale", action="store_true",
                      help="absolute sizes: centers N(0, spread^2) per coordinate, each cluster "
                           "z·B with z ~ N(0, I) and B of N(0, 1/intrinsic-dim) entries, noise "
                           "N(0, noise^2); --clusters rows/500 --intrinsic-dim 16 --spread 1 or 4 "
                           "are the hard classes")
    data.add_argument("--noise", type=float, default=0.05)
    data.add_argument("--seed", type=int, default=1)
    data.add_argument("--base-file", help=".fvecs or .fbin base vectors (instead of synthetic)")
    data.add_argument("--query-file", help=".fvecs or .fbin queries (default: hold out rows of the base)")
    data.add_argument("--queries", type=int, help="number of query vectors")
    data.add_argument("--copy-format", choices=["binary", "text"], default="binary")
    data.add_argument("--reuse-tables", action="store_true",
                      help="keep items/queries when they already hold the dataset's row counts "
                           "(the data is regenerated or reread, not reloaded)")
    idx = p.add_argument_group("indexes and sweep")
    idx.add_argument("--tsdg-options", default="",
                     help="WITH (...) options of the tsdg index, e.g. 'degree=32, build_k=64'")
    idx.add_argument("--ef", help="comma list of ef_search values (tsdg and hnsw)")
    idx.add_argument("--lambda-search", default="",
                     help="comma list of tsdg.lambda_search values (default: not set)")
    idx.add_argument("--clients", help="comma list of concurrent client counts")
    idx.add_argument("--seconds", type=int, help="pgbench duration of each point")
    idx.add_argument("--exact-queries", type=int,
                     help="queries in the exact scan's recall pass (it is slow)")
    idx.add_argument("--exact-seconds", type=int)
    idx.add_argument("--no-exact", action="store_true", help="skip the exact scan baseline")
    idx.add_argument("--no-batch", dest="batch", action="store_false",
                     help="skip the tsdg_search_batch(index, queries[], k) measurement")
    idx.add_argument("--no-pgvector", action="store_true", help="skip pgvector even if installed")
    idx.add_argument("--maintenance-work-mem")
    idx.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="setting for every session (repeatable), e.g. tsdg.device=gpu")
    idx.add_argument("--time-budget", type=float,
                     help="seconds; sweep points that would start after it are skipped")
    args = p.parse_args(argv)
    for key, value in PRESETS["gpu" if args.gpu else "default"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def machine():
    cpu = "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = ""
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20).stdout.split("\n")
        gpu = ", ".join(n.strip() for n in names if n.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    summary = "%s, %d cores, %.0f GiB" % (cpu, os.cpu_count(), memory_gib)
    if gpu:
        summary += ", GPU " + gpu
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(memory_gib, 1),
            "gpu": gpu, "kernel": platform.release(), "summary": summary}


def make_dataset(args):
    if args.base_file:
        return dataset.from_files(args.base_file, args.query_file, args.rows, args.queries)
    spec = dataset.SyntheticSpec(rows=args.rows, dim=args.dim, clusters=args.clusters,
                                 intrinsic_dim=args.intrinsic_dim, spread=args.spread,
                                 absolute_scale=args.absolute_scale,
                                 noise=args.noise, seed=args.seed)
    base, queries = dataset.synthetic(spec, args.queries)
    return base, queries, spec.describe()


def step(text):
    sys.stderr.write("\n== %s\n" % text)
    sys.stderr.flush()


def prepare_database(server, database, extension, base, queries, args, results):
    """Creates the database and extension when missing, and loads the data unless
    --reuse-tables finds it there."""
    if server.value("postgres", "SELECT 1 FROM pg_database WHERE datname = '%s'" % database) is None:
        server.query("postgres", "CREATE DATABASE %s" % database)
    server.query(database, "CREATE EXTENSION IF NOT EXISTS %s CASCADE" % extension)
    present = workload.table_rows(server, database)
    if args.reuse_tables and present == (base.shape[0], queries.shape[0]):
        step("reusing the tables in %s (%d rows)" % (database, base.shape[0]))
        return
    step("loading %d rows into %s" % (base.shape[0], database))
    seconds = workload.load(server, database, base, queries, args.copy_format)
    results["load"].append({"database": database, "rows": int(base.shape[0]),
                            "format": args.copy_format, "seconds": round(seconds, 2)})


def build(server, method, args, results):
    step("building %s" % method.name)
    seconds, size = workload.build_index(server, method.database, method, args.maintenance_work_mem)
    entry = {"method": method.name, "index": method.index_name, "sql": method.index_sql,
             "options": method.index_options,
             "build_seconds": round(seconds, 2), "size_bytes": size}
    if method.name == "tsdg":
        entry["tsdg_index_info"] = info_row(server, method.database,
                                            "tsdg_index_info('%s')" % method.index_name)
    results["indexes"].append(entry)


def info_row(server, database, call):
    """The row of a function returning a record, as a dict; None if the function is missing."""
    name = call.split("(")[0]
    if server.value(database, "SELECT to_regproc('%s') IS NOT NULL" % name) != "t":
        return None
    return json.loads(server.value(database, "SELECT row_to_json(r)::text FROM %s r" % call))


def wait_for_gpu_worker(server, database, seconds=60):
    """The GPU worker's state once it has finished starting (so that CREATE INDEX is
    not sent to the CPU by a worker still loading CUDA); None without the worker."""
    if server.value(database, "SELECT to_regproc('tsdg_gpu_status') IS NOT NULL") != "t":
        return None
    deadline = time.monotonic() + seconds
    while True:
        state = server.value(database, "SELECT state FROM tsdg_gpu_status()")
        if state not in ("starting", "stopped") or time.monotonic() > deadline:
            sys.stderr.write("  GPU worker: %s\n" % state)
            return state
        time.sleep(0.5)


def sweep(server, method, truth, args, results, deadline, counter):
    recall_queries = args.exact_queries if not method.uses_index else truth.shape[0]
    batch = method.name == "tsdg" and args.batch and server.value(
        method.database, "SELECT to_regproc('tsdg_search_batch') IS NOT NULL") == "t"
    seconds = args.seconds if method.uses_index else args.exact_seconds
    for settings in method.sweep:
        label = methods.setting_label(settings)
        if deadline and time.monotonic() > deadline:
            for c in args.clients:
                counter[0] += 1
                results["skipped"].append({"method": method.name, "settings": settings, "clients": c})
            sys.stderr.write("  %s %s skipped: --time-budget reached\n" % (method.name, label))
            continue
        workload.check_plan(server, method.database, method, settings)
        found, session_qps = workload.recall_pass(server, method.database, method, settings,
                                                  recall_queries, K)
        recall = dataset.recall_at_k(found, truth[:recall_queries], K)
        sys.stderr.write("  %s %s: recall@%d %.4f over %d queries (%.0f q/s in one session)\n"
                         % (method.name, label, K, recall, recall_queries, session_qps))
        if batch:
            found, batch_qps = workload.batch_pass(server, method.database, method, settings,
                                                   truth.shape[0], K)
            batch_recall = dataset.recall_at_k(found, truth, K)
            sys.stderr.write("  tsdg_search_batch %s: recall@%d %.4f, %.0f QPS (%d queries a call)\n"
                             % (label, K, batch_recall, batch_qps, truth.shape[0]))
            results["runs"].append({"method": "tsdg_search_batch", "settings": settings,
                                    "recall": batch_recall, "recall_queries": int(truth.shape[0]),
                                    "clients": 1, "batch": int(truth.shape[0]), "qps": batch_qps,
                                    "latency_ms": None})
        for c in args.clients:
            counter[0] += 1
            if deadline and time.monotonic() + seconds > deadline:
                sys.stderr.write("  [%d/%d] skipped: --time-budget reached\n" % (counter[0], counter[1]))
                results["skipped"].append({"method": method.name, "settings": settings, "clients": c})
                continue
            run = workload.pgbench_run(server, method.database, method, settings, c, seconds,
                                       truth.shape[0], K)
            sys.stderr.write("  [%d/%d] %s %s, %d clients: %.0f QPS, p50 %.2f ms, p99 %.2f ms\n"
                             % (counter[0], counter[1], method.name, label, c, run["qps"],
                                run["latency_ms"]["p50"], run["latency_ms"]["p99"]))
            results["runs"].append(dict({"method": method.name, "settings": settings,
                                         "recall": recall, "recall_queries": recall_queries,
                                         "clients": c, "seconds": seconds}, **run))
            report.write_all(results, args.out)


def main(argv):
    args = parse_args(argv)
    if args.report_only:
        with open(os.path.join(args.out, "results.json")) as f:
            report.write_all(json.load(f), args.out)
        return
    args.clients = sorted(set(int_list(args.clients)))
    ef_values = int_list(args.ef)
    lambda_values = int_list(args.lambda_search)
    session = dict(s.split("=", 1) for s in args.set)
    session.setdefault("jit", "off")
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.time_budget if args.time_budget else None
    server = Server(args.dsn, args.pgbin, session)

    step("dataset")
    base, queries, description = make_dataset(args)
    description.update(rows=int(base.shape[0]), dim=int(base.shape[1]))
    sys.stderr.write("  %d base rows, %d queries, %d dims\n" % (base.shape[0], queries.shape[0], base.shape[1]))
    meter = Progress("exact ground truth (float64 brute force)", queries.shape[0], unit="queries")
    truth = dataset.exact_neighbors(base, queries, K, lambda done, total: meter.update(done))
    meter.finish()

    results = {
        "suite": "pg_tsdg SQL benchmark (bench/sql_bench.py)",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(shlex.quote(a) for a in [sys.argv[0]] + list(argv)),
        "machine": machine(),
        "server": server.value("postgres", "SHOW server_version"),
        "session_settings": session, "dataset": description,
        "queries": int(queries.shape[0]), "k": K, "load": [], "indexes": [], "runs": [],
        "skipped": [], "gpu_status": None,
        # other work on the machine skews QPS: say how busy it was
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }

    # tsdg first: with --time-budget, the baseline is what gets cut
    candidates = [methods.tsdg(args.dbname, args.tsdg_options, ef_values, lambda_values)]
    if not args.no_exact:
        candidates.append(methods.exact(args.dbname))
    # pg_tsdg installs its own extension "vector" where pgvector is not: only
    # pgvector's has the hnsw index
    if not args.no_pgvector and server.value(
            "postgres", "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            " AND default_version NOT LIKE '%+tsdg'"):
        candidates.append(methods.pgvector_hnsw(args.dbname + "_pgvector", ef_values))
    else:
        step("pgvector not installed (or --no-pgvector): comparing tsdg with the exact scan only")
    counter = [0, sum(len(m.sweep) for m in candidates) * len(args.clients)]

    prepared = set()
    for method in candidates:
        if method.database not in prepared:
            prepare_database(server, method.database, method.extension, base, queries, args, results)
            prepared.add(method.database)
        if method.name == "tsdg":
            results["gpu_state_before_build"] = wait_for_gpu_worker(server, method.database)
        if method.uses_index:
            build(server, method, args, results)
        report.write_all(results, args.out)
        step("sweep: %s" % method.name)
        sweep(server, method, truth, args, results, deadline, counter)
        if method.name == "tsdg":
            results["gpu_status"] = info_row(server, method.database, "tsdg_gpu_status()")
    results["total_seconds"] = round(time.monotonic() - started, 1)
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report.write_all(results, args.out)
    step("done in %.0f s: %s" % (results["total_seconds"], os.path.abspath(args.out)))
    sys.stdout.write(report.markdown(results))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (PgError, ValueError, OSError) as e:
        sys.stderr.write("\nsql_bench: %s\n" % e)
        sys.exit(1)
