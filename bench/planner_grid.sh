#!/usr/bin/env bash
# The planner's choice against the measured time of both plans over a grid
# of shapes, bench/planner_bench.sh for each: hard synthetic rows
# (test/support/subspace_clusters.py, ROWS/500 clusters and at least one,
# each on its own random 16-dim subspace, overlapping), 100 queries drawn
# with another seed; the tables of 10,000 rows also under filters that one
# row in a hundred, in ten and in two passes. Each shape's tables go to
# OUT_DIR/ROWSxDIMS.txt; last comes the count of wrong picks, the plans
# chosen where the other plan was measured faster.
#
# usage: bench/planner_grid.sh OUT_DIR [ROWSxDIMS...]
#   default: 100 to 60,000 rows at 64, 128, 384, 784 and 1,536 dimensions
#   (784 and 1,536 dimensions are stored out of line)
# The data of each shape is kept in OUT_DIR/data, so a second run (another
# build of the planner's estimate) measures the same rows.
source "$(dirname "$0")/../scripts/common.sh"
out=${1:?usage: bench/planner_grid.sh OUT_DIR [ROWSxDIMS...]}
shift
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(100x64 200x64 300x64 500x64 1000x64 2000x64 3000x64 5000x64
  10000x64 20000x64 100x128 300x128 1000x128 2000x128 5000x128 10000x128 60000x128 300x384
  1000x384 3000x384 5000x384 10000x384 2000x784 10000x784 60000x784 2000x1536 5000x1536
  10000x1536)
mkdir -p "$out/data"
python=$(numpy_python)

for shape in "${shapes[@]}"; do
  rows=${shape%x*} dims=${shape#*x}
  clusters=$(( rows / 500 > 0 ? rows / 500 : 1 ))
  data=$out/data/$shape.tsv queries=$out/data/$shape-queries.tsv
  [ -s "$data" ] || "$python" "$TSDG_ROOT/test/support/subspace_clusters.py" "$rows" "$dims" "$clusters" 1 1 >"$data"
  [ -s "$queries" ] || "$python" "$TSDG_ROOT/test/support/subspace_clusters.py" 100 "$dims" "$clusters" 1 2 >"$queries"
  filters=
  [ "$rows" != 10000 ] || filters="cat = 3;cat < 10;cat < 50"
  echo "== $shape"
  PLANNER_FILTERS=$filters bash "$TSDG_ROOT/bench/planner_bench.sh" "$data" "$queries" | tee "$out/$shape.txt"
done

# a row of a table: | ef | plan chosen | index ms | seq scan ms | faster |
# a pick is wrong where the other plan took less time (equal times: neither);
# those slower by more than 15% are counted apart, as two runs of the same
# case differ by about 10%
for shape in "${shapes[@]}"; do cat "$out/$shape.txt"; done |
  awk -F' *\\| *' '$2 ~ /^[0-9]+$/ {
      n++
      chosen = $3 == "index" ? $4 : $5; other = $3 == "index" ? $5 : $4
      if (chosen > other) { wrong++; if (chosen > 1.15 * other) far++ }
    }
    END { printf "wrong picks: %d of %d, %d of them more than 15%% slower\n", wrong, n, far }'
