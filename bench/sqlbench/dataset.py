"""Base and query vectors for the benchmark, and their exact nearest neighbours.

The synthetic data follows the model of src/core/synthetic.h: a mixture of Gaussian
clusters, each on its own random `intrinsic_dim`-dimensional subspace, plus isotropic
noise. With spread >= 1 the clusters overlap and have a high intrinsic dimension, which is
the hard case for graph indexes (and the one that tells them apart).

With absolute_scale the sizes are absolute instead, as tsdg-bench --absolute-scale makes
them: a row is center + z·B + noise with centers N(0, spread²) per coordinate, B an
intrinsic_dim × dim matrix of N(0, 1/intrinsic_dim) entries, z ~ N(0, I) and noise
N(0, noise²) per coordinate (spread 1: overlapping clusters, 4: well separated).
"""
from dataclasses import dataclass, asdict
import os

import numpy as np


@dataclass
class SyntheticSpec:
    rows: int
    dim: int
    clusters: int
    intrinsic_dim: int
    spread: float
    noise: float
    seed: int
    absolute_scale: bool = False

    def describe(self):
        return dict(asdict(self), kind="synthetic clustered")


class _Mixture:
    """The cluster centers and bases fixed by a seed; draws points from them."""

    def __init__(self, spec):
        if spec.intrinsic_dim > spec.dim:
            raise ValueError("intrinsic dimension %d exceeds dimension %d"
                             % (spec.intrinsic_dim, spec.dim))
        rng = np.random.default_rng(spec.seed)
        self.spec = spec
        self.centers = rng.standard_normal((spec.clusters, spec.dim))
        if spec.absolute_scale:
            self.centers *= spec.spread
            self.axis_std = 1.0
            self.noise_std = spec.noise
            self.bases = [rng.standard_normal((spec.dim, spec.intrinsic_dim)) / np.sqrt(spec.intrinsic_dim)
                          for _ in range(spec.clusters)]
            return
        # Two unit-Gaussian centers lie sqrt(2 dim) apart on average; `spread` is the
        # RMS radius of a cluster in that unit.
        spacing = np.sqrt(2.0 * spec.dim)
        self.axis_std = spec.spread * spacing / np.sqrt(spec.intrinsic_dim)
        self.noise_std = spec.noise * spacing / np.sqrt(spec.dim)
        self.bases = [np.linalg.qr(rng.standard_normal((spec.dim, spec.intrinsic_dim)))[0]
                      for _ in range(spec.clusters)]

    def draw(self, count, seed):
        rng = np.random.default_rng(seed)
        spec = self.spec
        labels = rng.integers(0, spec.clusters, size=count)
        out = np.empty((count, spec.dim), dtype=np.float32)
        # Each cluster's rows in ascending order, found by one sort rather than
        # a pass over all labels per cluster (at 10M rows and 20,000 clusters
        # the passes took minutes); the draws are the same.
        by_cluster = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[by_cluster], np.arange(spec.clusters + 1))
        for c in range(spec.clusters):
            rows = by_cluster[bounds[c]:bounds[c + 1]]
            if rows.size == 0:
                continue
            coords = rng.standard_normal((rows.size, spec.intrinsic_dim)) * self.axis_std
            noise = rng.standard_normal((rows.size, spec.dim)) * self.noise_std
            out[rows] = self.centers[c] + coords @ self.bases[c].T + noise
        return out


def synthetic(spec, query_count):
    """(base, queries): spec.rows base rows and query_count fresh rows of the same mixture."""
    mixture = _Mixture(spec)
    base = mixture.draw(spec.rows, spec.seed + 1)
    queries = mixture.draw(query_count, spec.seed + 2)
    return base, queries


def read_vectors(path, limit=None):
    """float32 rows of an .fvecs (per row: int32 dim, dim floats) or .fbin (int32 rows,
    int32 dim, then rows*dim floats) file; the first `limit` rows when given."""
    if path.endswith(".fvecs"):
        with open(path, "rb") as f:
            dim = int(np.frombuffer(f.read(4), dtype="<i4")[0])
        row_words = dim + 1
        total = os.path.getsize(path) // (4 * row_words)
        count = total if limit is None else min(limit, total)
        raw = np.fromfile(path, dtype="<f4", count=count * row_words).reshape(count, row_words)
        if not np.all(raw[:, 0].view("<i4") == dim):
            raise ValueError("%s: rows of different dimensions" % path)
        return np.ascontiguousarray(raw[:, 1:])
    if path.endswith(".fbin"):
        header = np.fromfile(path, dtype="<i4", count=2)
        total, dim = int(header[0]), int(header[1])
        count = total if limit is None else min(limit, total)
        return np.fromfile(path, dtype="<f4", count=count * dim, offset=8).reshape(count, dim)
    raise ValueError("unknown vector file type (want .fvecs or .fbin): %s" % path)


def from_files(base_path, query_path, rows, query_count):
    """(base, queries, description). Without a query file the last query_count rows of
    the base are held out as queries."""
    if query_path:
        base = read_vectors(base_path, rows)
        queries = read_vectors(query_path, query_count)
    else:
        everything = read_vectors(base_path, None if rows is None else rows + query_count)
        if everything.shape[0] <= query_count:
            raise ValueError("%s has %d rows: too few to hold out %d queries"
                             % (base_path, everything.shape[0], query_count))
        base, queries = everything[:-query_count], everything[-query_count:]
    if base.shape[1] != queries.shape[1]:
        raise ValueError("base has %d dimensions, queries %d" % (base.shape[1], queries.shape[1]))
    description = {"kind": "file", "base": os.path.abspath(base_path),
                   "queries": os.path.abspath(query_path) if query_path else "held out from base",
                   "rows": int(base.shape[0]), "dim": int(base.shape[1])}
    return base, queries, description


def exact_neighbors(base, queries, k, progress=None):
    """Ids (row numbers) of the k nearest base rows (L2) of every query, computed in
    float64 so that the answer does not depend on float32 rounding: on a CUDA GPU
    through PyTorch when it is there (the GPU machine), else with numpy."""
    try:
        import torch
        if torch.cuda.is_available():
            return _exact_neighbors_torch(torch, base, queries, k, progress)
    except ImportError:
        pass
    return _exact_neighbors_numpy(base, queries, k, progress)


def _exact_neighbors_torch(torch, base, queries, k, progress):
    device = torch.device("cuda")
    b = torch.from_numpy(base).to(device, dtype=torch.float64)
    base_sq = (b * b).sum(dim=1)
    result = np.empty((queries.shape[0], k), dtype=np.int64)
    # A block's distances and the product's temporaries are block x rows
    # float64 arrays each: about 2 GiB apiece, so that 10M rows fit on the
    # device beside their own float64 copy.
    block = max(1, min(1024, (2 << 30) // (8 * base.shape[0])))
    for q0 in range(0, queries.shape[0], block):
        q = torch.from_numpy(queries[q0:q0 + block]).to(device, dtype=torch.float64)
        dist = base_sq[None, :] - 2.0 * (q @ b.T)
        result[q0:q0 + q.shape[0]] = torch.topk(dist, k, dim=1, largest=False).indices.cpu().numpy()
        if progress:
            progress(min(q0 + block, queries.shape[0]), queries.shape[0])
    # The caching allocator would keep the device memory for the rest of the
    # run, out of reach of the GPU worker that the benchmark then measures.
    del b, base_sq, q, dist
    torch.cuda.empty_cache()
    return result


def _exact_neighbors_numpy(base, queries, k, progress):
    base_sq = np.einsum("ij,ij->i", base, base, dtype=np.float64)
    result = np.empty((queries.shape[0], k), dtype=np.int64)
    query_block = 128
    base_block = 1 << 18
    for q0 in range(0, queries.shape[0], query_block):
        q = queries[q0:q0 + query_block].astype(np.float64)
        best_dist = np.full((q.shape[0], 0), np.inf)
        best_ids = np.empty((q.shape[0], 0), dtype=np.int64)
        for b0 in range(0, base.shape[0], base_block):
            b = base[b0:b0 + base_block].astype(np.float64)
            # |q|^2 is the same for every row of a query and does not change the order.
            dist = base_sq[b0:b0 + b.shape[0]][None, :] - 2.0 * (q @ b.T)
            take = min(k, dist.shape[1])
            part = np.argpartition(dist, take - 1, axis=1)[:, :take]
            best_dist = np.hstack([best_dist, np.take_along_axis(dist, part, axis=1)])
            best_ids = np.hstack([best_ids, part + b0])
            keep = np.argsort(best_dist, axis=1, kind="stable")[:, :k]
            best_dist = np.take_along_axis(best_dist, keep, axis=1)
            best_ids = np.take_along_axis(best_ids, keep, axis=1)
        result[q0:q0 + q.shape[0]] = best_ids
        if progress:
            progress(min(q0 + query_block, queries.shape[0]), queries.shape[0])
    return result


def recall_at_k(found, truth, k):
    """Mean over queries of |found ∩ truth[:k]| / k; `found` maps query row -> ids."""
    hits = 0
    for q in range(truth.shape[0]):
        hits += len(set(found.get(q, ())) & set(truth[q, :k].tolist()))
    return hits / (k * truth.shape[0])
