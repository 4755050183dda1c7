#!/usr/bin/env python3
"""The data of merge_bench.sh, written for COPY without per-number text.

  merge_bench_data.py rows CHUNK DIMS C
      chunk C (1-based) of the rows: CHUNK rows of test/support/clustered_vectors.py
      drawn with seed C, as a binary COPY stream of (id int, chunk int,
      v vector(DIMS)), ids (C - 1) * CHUNK + 1 ... C * CHUNK.
  merge_bench_data.py queries N DIMS CHUNK CHUNKS
      N queries (seed 999) as COPY text of (id int, v vector, truth int[]):
      truth is the exact top 10 among the CHUNKS chunks, in float64 from the
      float32 values the table holds.
  merge_bench_data.py fvecs CHUNK DIMS CHUNKS N ROWS_FILE QUERIES_FILE
      chunks 1 ... CHUNKS in order and the N queries, as .fvecs files: the
      same rows for tsdg-bench --merge-batches --data ROWS_FILE --queries
      QUERIES_FILE, which merges them in the order merge_bench.sh loads them.

With MERGE_BENCH_DATA=overlapping in the environment, every mode draws the
hard data (SHAPE below) instead of the default clusters.

Binary COPY of float32 arrays built by numpy: formatting 2M x 128 numbers as
text takes minutes in Python, this takes seconds.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "support"))
from clustered_vectors import clustered_rows  # noqa: E402

QUERY_SEED = 999
TOP = 10


# MERGE_BENCH_DATA=overlapping: 16 clusters of 64 latent dimensions whose
# centers lie within +-0.5, the hard data of docs/benchmarks.md; else the
# default clusters.
SHAPE = (dict(clusters=16, latent=64, spread=0.5)
         if os.environ.get("MERGE_BENCH_DATA") == "overlapping" else {})


def chunk_rows(chunk, dims, c):
    return clustered_rows(chunk, dims, c, **SHAPE).astype(np.float32)


def write_rows(chunk, dims, c):
    data = chunk_rows(chunk, dims, c)
    tuple_type = np.dtype([
        ("fields", ">i2"),
        ("id_len", ">i4"), ("id", ">i4"),
        ("chunk_len", ">i4"), ("chunk", ">i4"),
        ("v_len", ">i4"), ("dims", ">i2"), ("unused", ">i2"), ("v", ">f4", (dims,)),
    ])
    tuples = np.zeros(chunk, dtype=tuple_type)
    tuples["fields"] = 3
    tuples["id_len"] = 4
    tuples["id"] = np.arange(1, chunk + 1) + (c - 1) * chunk
    tuples["chunk_len"] = 4
    tuples["chunk"] = c
    tuples["v_len"] = 4 + 4 * dims
    tuples["dims"] = dims
    tuples["v"] = data
    out = sys.stdout.buffer
    out.write(b"PGCOPY\n\xff\r\n\x00" + np.array([0, 0], dtype=">i4").tobytes())
    out.write(tuples.tobytes())
    out.write(np.array([-1], dtype=">i2").tobytes())


def write_queries(n, dims, chunk, chunks):
    queries = clustered_rows(n, dims, QUERY_SEED, **SHAPE).astype(np.float32).astype(np.float64)
    query_norms = np.einsum("qd,qd->q", queries, queries)
    top = min(TOP, chunk)
    best_dists = np.full((n, 0), np.inf)
    best_ids = np.zeros((n, 0), dtype=np.int64)
    for c in range(1, chunks + 1):
        rows = chunk_rows(chunk, dims, c).astype(np.float64)
        dists = (np.einsum("nd,nd->n", rows, rows)[None, :] - 2.0 * queries @ rows.T +
                 query_norms[:, None])
        # the chunk's own top, then the top of it and the chunks before
        keep = np.argpartition(dists, top - 1, axis=1)[:, :top]
        best_dists = np.concatenate([best_dists, np.take_along_axis(dists, keep, axis=1)], axis=1)
        best_ids = np.concatenate([best_ids, keep + 1 + (c - 1) * chunk], axis=1)
        order = np.argsort(best_dists, axis=1, kind="stable")[:, :TOP]
        best_dists = np.take_along_axis(best_dists, order, axis=1)
        best_ids = np.take_along_axis(best_ids, order, axis=1)
    out = sys.stdout
    for q in range(n):
        vector = ",".join(repr(float(x)) for x in queries[q].astype(np.float32))
        truth = ",".join(str(i) for i in best_ids[q])
        out.write("%d\t[%s]\t{%s}\n" % (q + 1, vector, truth))


def write_fvecs(path, rows):
    rows = rows.astype(np.float32)
    records = np.empty((rows.shape[0], rows.shape[1] + 1), dtype=np.float32)
    records[:, 0] = np.array([rows.shape[1]], dtype=np.int32).view(np.float32)[0]
    records[:, 1:] = rows
    records.tofile(path)


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "rows":
        write_rows(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif what == "queries":
        write_queries(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif what == "fvecs":
        chunk, dims, chunks, n = (int(a) for a in sys.argv[2:6])
        write_fvecs(sys.argv[6], np.vstack([chunk_rows(chunk, dims, c) for c in range(1, chunks + 1)]))
        write_fvecs(sys.argv[7], clustered_rows(n, dims, QUERY_SEED, **SHAPE))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
