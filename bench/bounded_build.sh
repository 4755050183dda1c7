#!/usr/bin/env bash
# CREATE INDEX within and past maintenance_work_mem: for each setting, the
# build's wall time, the backend's peak private memory (RssAnon) and peak
# shared memory and file pages (RssShmem, RssFile: the worker's segment, the
# temporary files of a build past the setting) sampled from /proc while it
# runs, and recall@10 at tsdg.ef_search 64 and 128 against the exact answer.
# Data: hard rows (test/support/subspace_clusters.py: 100 clusters, each on
# its own random 16-dim subspace, overlapping).
#
# usage: bench/bounded_build.sh [ROWS] [DIMS] [SETTING...]
#   defaults 200000 128, settings 8GB 64MB; e.g. bench/bounded_build.sh 1000000 128 64MB
# Starts its own cluster (port 54353 + TSDG_PORT_OFFSET, pg_tsdg preloaded: on a
# machine with a GPU the worker builds; BOUNDED_DEVICE=cpu builds in the
# session there too; BOUNDED_WORKER_BACKEND=cpu runs the worker on the
# core's CPU backend, the worker's path on a machine without a GPU) in a
# temp dir; prints a Markdown table. Where /dev/shm
# is under 8 GB (containers), dynamic shared memory lives in files.
# On the GPU machine, with PostgreSQL packed by scripts/gpu/pack-postgres.sh:
#   bash scripts/gpu/on-device.sh bash bench/bounded_build.sh 1000000 128 16GB 64MB
source "$(dirname "$0")/../scripts/common.sh"
rows=${1:-200000}
dims=${2:-128}
shift 2 || true
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(8GB 64MB)
queries=100
py=$(numpy_python)
work=$(mktemp -d /tmp/tsdg_bounded_build.XXXXXX)
chmod 755 "$work"
trap 'stop_cluster "$work"; rm -rf "$work"' EXIT
dsm_type=$(shared_memory_type)
start_cluster "$work" 54353 "shared_buffers = '1GB'" "max_parallel_workers_per_gather = 0" \
  "dynamic_shared_memory_type = $dsm_type" "tsdg.device = ${BOUNDED_DEVICE:-auto}" \
  "tsdg.worker_backend = ${BOUNDED_WORKER_BACKEND:-cuda}"

"$py" "$TSDG_ROOT/test/support/subspace_clusters.py" "$rows" "$dims" 100 1 1 > "$work/items.tsv"
"$py" "$TSDG_ROOT/test/support/subspace_clusters.py" "$queries" "$dims" 100 1 2 > "$work/queries.tsv"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_tsdg CASCADE"
load_vector_tables "$work" "$work/items.tsv" "$work/queries.tsv" truth
# a build starts on the worker only once it is ready
worker=$(settled_worker_state)
export BOUNDED_WORKER=${worker:-none} BOUNDED_DSM=$dsm_type

"$py" - "$rows" "$dims" "${settings[@]}" <<'PY'
import os, subprocess, sys, time
rows, dims, settings = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]

def psql(sql):
    return subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1"], input=sql,
                          capture_output=True, text=True, check=True).stdout.strip()

def status_kb(pid):
    values = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("RssAnon", "RssFile", "RssShmem"):
                    values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values

def build(setting):
    psql("DROP INDEX IF EXISTS items_v;")
    sql = ("SET maintenance_work_mem = '%s';\n"
           "CREATE INDEX items_v ON items USING tsdg (v vector_l2_ops);\n" % setting)
    start = time.perf_counter()
    proc = subprocess.Popen(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(sql)
    proc.stdin.close()
    pid, peak = None, {}
    while proc.poll() is None:
        if pid is None:
            found = psql("SELECT pid FROM pg_stat_progress_create_index LIMIT 1;")
            pid = int(found) if found else None
        if pid is not None:
            for key, kb in status_kb(pid).items():
                peak[key] = max(peak.get(key, 0), kb)
        time.sleep(0.05)
    seconds = time.perf_counter() - start
    err = proc.stderr.read()
    if proc.returncode != 0:
        sys.exit("CREATE INDEX at %s failed: %s" % (setting, err))
    if "no longer fits" not in err:
        place = "memory"
    elif "GPU worker in parts" in err:
        place = "temporary files, to the worker in parts"
    else:
        place = "temporary files"
    return seconds, peak, place

def recall(ef):
    return float(psql(
        "SET enable_seqscan = off; SET tsdg.ef_search = %d;\n"
        "SELECT avg((SELECT count(*) FROM unnest(r.ids) x WHERE x = ANY(t.ids)) / 10.0)"
        " FROM truth t JOIN queries q ON q.id = t.qid,"
        " LATERAL (SELECT ARRAY(SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) AS ids) r;" % ef
    ).splitlines()[-1])

print("rows %d, %d dims, hard data (100 subspace clusters, spread 1), L2, default index options;"
      " GPU worker: %s (tsdg.worker_backend %s), tsdg.device %s, dynamic_shared_memory_type %s"
      % (rows, dims, os.environ["BOUNDED_WORKER"], os.environ.get("BOUNDED_WORKER_BACKEND", "cuda"),
         os.environ.get("BOUNDED_DEVICE", "auto"), os.environ["BOUNDED_DSM"]))
print()
print("| maintenance_work_mem | arrays past it in | CREATE INDEX s | peak RssAnon MB | peak RssFile MB | peak RssShmem MB | recall@10 ef 64 | ef 128 |")
print("|---|---|---|---|---|---|---|---|")
for setting in settings:
    seconds, peak, place = build(setting)
    print("| %s | %s | %.1f | %.0f | %.0f | %.0f | %.3f | %.3f |" % (
        setting, place, seconds, peak.get("RssAnon", 0) / 1024.0,
        peak.get("RssFile", 0) / 1024.0, peak.get("RssShmem", 0) / 1024.0, recall(64), recall(128)), flush=True)
PY
