#!/usr/bin/env bash
# The SQL benchmark suite (bench/run.sh) at a tiny size against the test
# cluster (PGHOST/PGPORT from scripts/test.sh): the exact scan must find exactly
# the numpy ground truth (so COPY, ids and the brute force agree), the tsdg index
# must reach recall@10 0.9 at ef 64, and the JSON, table and plots must be
# written. Usage: sql_bench_smoke.sh WORKDIR
source "$(dirname "$0")/../../scripts/common.sh"
out=$1/sql_bench_smoke
db=tsdg_bench_smoke
trap 'psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1' EXIT

bash "$TSDG_ROOT/bench/run.sh" --dbname "$db" --out "$out" --rows 4000 --dim 32 \
  --intrinsic-dim 8 --queries 100 --exact-queries 30 --clients 1,2 --ef 10,64 \
  --seconds 1 --exact-seconds 1 >"$out.log" 2>&1 || { tail -30 "$out.log"; echo "FAIL: the suite failed"; exit 1; }

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
results = json.load(open(os.path.join(out, "results.json")))
runs = results["runs"]
def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)
exact = [r for r in runs if r["method"] == "exact scan"]
tsdg = [r for r in runs if r["method"] == "tsdg"]
if len(exact) != 2 or len(tsdg) != 4:
    fail("expected 2 exact and 4 tsdg points, got %d and %d" % (len(exact), len(tsdg)))
if any(r["recall"] != 1.0 for r in exact):
    fail("the exact scan disagrees with the ground truth: %s" % [r["recall"] for r in exact])
best = max(r["recall"] for r in tsdg)
if best < 0.9:
    fail("tsdg recall@10 at ef 64 is %.3f" % best)
if any(r["qps"] <= 0 or r["transactions"] <= 0 for r in exact + tsdg):
    fail("a pgbench point ran no query")
for name in ("results.md", "recall_qps.png", "build.png"):
    if os.path.getsize(os.path.join(out, name)) < 100:
        fail("%s is empty" % name)
print("sql benchmark smoke: exact recall 1.000, tsdg best recall %.3f, %d points" % (best, len(runs)))
PY
