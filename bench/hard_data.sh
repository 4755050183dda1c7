#!/usr/bin/env bash
# tsdg-bench on the hard data classes, each in one run beside hnswlib (M 16,
# ef_construction 200) on the same threads: N/500 clusters, each on its own
# random 16-dim subspace (--absolute-scale), overlapping (spread 1) or well
# separated (spread 4).
#   bench/hard_data.sh BUILD_DIR OUT_DIR BACKEND CLASS...
# CLASS is ROWSxDIM:SPREAD[:QUERIES[:extra tsdg-bench options, comma separated]],
# e.g. 1000000x128:1:10000 or 1000000x128:1:1000:--no-hnsw,--iterations,30.
# Each class's log goes to OUT_DIR (made if missing) as ROWSxDIM-sSPREAD-n.log,
# n the first number that no log there has yet, so that runs into one
# OUT_DIR keep each other's logs; its recall/QPS points are printed.
set -euo pipefail
build=$1 out=$2 backend=$3
shift 3
efs=10,16,24,32,48,64,96,128,192,256
mkdir -p "$out"
n=0
for class in "$@"; do
  IFS=: read -r shape spread queries extra <<<"$class"
  rows=${shape%x*} dim=${shape#*x}
  n=$((n + 1))
  while [ -e "$out/${shape}-s${spread}-${n}.log" ]; do n=$((n + 1)); done
  log="$out/${shape}-s${spread}-${n}.log"
  # shellcheck disable=SC2086
  "$build/tsdg-bench" --backend "$backend" --rows "$rows" --dim "$dim" --clusters $((rows / 500)) \
    --intrinsic-dim 16 --spread "$spread" --noise 0.05 --absolute-scale --query-count "${queries:-1000}" \
    --ef "$efs" --hnsw-ef "$efs,384,512" --min-seconds 0.3 ${extra//,/ } >"$log" 2>&1 || echo "FAILED: $class"
  echo "== $class"
  grep -E '^(gnnd|build_check|diversify|tsdg_search|cpu_search|layer|hnsw_build|hnsw_search|summary) ' "$log" |
    sed -E 's/ lambda_limit=255 slack=0 gpu_kernel=0//; s/ (avg_degree_lambda_le_[14]|samples|pivot_stride)=[^ ]*//g'
done
