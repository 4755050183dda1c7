#!/usr/bin/env python3
"""Synthetic clustered vectors for the tsdg script tests and benchmarks.

Writes `rows` lines "id<TAB>[x1,...,xd]" (PostgreSQL COPY text form). Each
row is a point of one of `clusters` clusters, cluster sizes uneven; a cluster
is a Gaussian on its own random low-dimensional subspace (LATENT dimensions)
around a random center, plus a little isotropic noise: clustered and of low
intrinsic dimension, like embedding data, rather than i.i.d. noise in every
dimension (on which no nearest-neighbor index beats a scan). The clusters'
centers and subspaces depend only on DIMS and CLUSTERS, so rows and queries
drawn with different seeds come from the same distribution.

usage: clustered_vectors.py ROWS DIMS SEED [CLUSTERS] > out.tsv
"""
import sys

import numpy as np

LATENT = 12
NOISE = 0.02


def clustered_rows(rows, dims, seed, clusters=64, latent=LATENT, spread=1.0):
    """The rows (float64, rows x dims) that main() prints. latent and spread
    (the centers' range) make harder data: 64 latent dimensions and centers
    within +-0.5 give overlapping clusters of high intrinsic dimension."""
    shape = np.random.default_rng(12345)
    centers = shape.uniform(-spread, spread, size=(clusters, dims))
    bases = shape.normal(0.0, 1.0 / np.sqrt(latent), size=(clusters, latent, dims))

    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(clusters, 2.0))
    labels = rng.choice(clusters, size=rows, p=weights)
    coords = rng.normal(0.0, 1.0, size=(rows, latent))
    # each row's point of its subspace, one latent dimension at a time: the
    # sums of an einsum over (rows, latent, dims), without that array in memory
    offsets = np.zeros((rows, dims))
    for l in range(latent):
        offsets += coords[:, l:l + 1] * bases[labels, l, :]
    data = centers[labels] + offsets
    data += rng.normal(0.0, NOISE, size=(rows, dims))
    return data


def main():
    rows, dims, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    clusters = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    data = clustered_rows(rows, dims, seed, clusters)

    out = sys.stdout
    for i in range(rows):
        out.write("%d\t[%s]\n" % (i + 1, ",".join("%.5g" % x for x in data[i])))


if __name__ == "__main__":
    main()
