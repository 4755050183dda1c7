#!/usr/bin/env python3
"""Hard clustered vectors: many clusters, each on its own random 16-dim subspace.

Writes `rows` lines "id<TAB>[x1,...,xd]" (PostgreSQL COPY text form). A row is
center + z.B + noise: the cluster drawn uniformly, centers N(0, spread^2) per
coordinate, B a 16 x dims matrix of N(0, 1/16) entries (so each coordinate of
z.B has std about 1), z ~ N(0, I_16), noise N(0, 0.05^2) per coordinate.
spread 1 gives overlapping clusters, spread 4 well separated ones. The
centers and subspaces depend only on DIMS, CLUSTERS and SPREAD, so rows and
queries drawn with different seeds come from the same mixture.

usage: subspace_clusters.py ROWS DIMS CLUSTERS SPREAD SEED > out.tsv
"""
import sys

import numpy as np

LATENT = 16
NOISE = 0.05


def main():
    rows, dims, clusters = (int(a) for a in sys.argv[1:4])
    spread = float(sys.argv[4])
    seed = int(sys.argv[5])
    shape = np.random.default_rng(4242)
    centers = shape.normal(0.0, spread, size=(clusters, dims))
    bases = shape.normal(0.0, 1.0 / np.sqrt(LATENT), size=(clusters, LATENT, dims))
    draw = np.random.default_rng(seed)
    which = draw.integers(0, clusters, size=rows)
    z = draw.normal(size=(rows, LATENT))
    points = centers[which]
    for c in range(clusters):
        members = which == c
        points[members] += z[members] @ bases[c]
    points += draw.normal(0.0, NOISE, size=(rows, dims))
    out = sys.stdout
    for i, p in enumerate(points, start=1):
        out.write(f"{i}\t[{','.join(f'{x:.5g}' for x in p)}]\n")


if __name__ == "__main__":
    main()
