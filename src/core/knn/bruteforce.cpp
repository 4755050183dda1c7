#include "bruteforce.h"

#include <algorithm>
#include <string>
#include <vector>

#include "distance.h"
#include "dot_tiles.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// Queries handled together against one block of columns: their dot products
// form a tile of kQueryBlock x kColumnBlock floats that stays in L2.
constexpr int64_t kQueryBlock = 8 * kTileRows;
constexpr int64_t kColumnBlock = 32 * kPanelWidth;
// Base rows packed at once: about 2 MiB, so that one chunk of work (a query
// block against a superblock) takes a few milliseconds and cancellation is
// noticed quickly.
constexpr int64_t kSuperblockBytes = int64_t{2} << 20;

static_assert(kQueryBlock % kTileRows == 0, "query blocks are whole tiles");
static_assert(kColumnBlock % kPanelWidth == 0, "column blocks are whole panels");

// A bounded max-heap of (distance, id) keeping the k smallest seen; ties are
// broken by id so that the result does not depend on the order of arrival.
class TopK {
 public:
  TopK(float* dists, uint32_t* ids, int k) : d_(dists), id_(ids), k_(k) {}

  float worst() const { return d_[0]; }

  void push(float d, uint32_t id) {
    if (d > d_[0] || (d == d_[0] && id >= id_[0])) return;
    // Sift the new entry down from the root, replacing the current worst.
    int i = 0;
    for (;;) {
      int child = 2 * i + 1;
      if (child >= k_) break;
      if (child + 1 < k_ && less(child, child + 1)) ++child;
      if (!(d < d_[child] || (d == d_[child] && id < id_[child]))) break;
      d_[i] = d_[child];
      id_[i] = id_[child];
      i = child;
    }
    d_[i] = d;
    id_[i] = id;
  }

  // Sorts the heap's storage ascending in place.
  void sort_ascending() {
    std::vector<std::pair<float, uint32_t>> entries(k_);
    for (int i = 0; i < k_; ++i) entries[i] = {d_[i], id_[i]};
    std::sort(entries.begin(), entries.end());
    for (int i = 0; i < k_; ++i) {
      d_[i] = entries[i].first;
      id_[i] = entries[i].second;
    }
  }

 private:
  bool less(int a, int b) const { return d_[a] < d_[b] || (d_[a] == d_[b] && id_[a] < id_[b]); }

  float* d_;
  uint32_t* id_;
  int k_;
};

void check_arguments(MatrixView base, MatrixView queries, int k) {
  if (k <= 0) throw Error(Status::InvalidArgument, "k must be positive, got " + std::to_string(k));
  if (base.dim <= 0 || base.dim != queries.dim) {
    throw Error(Status::InvalidArgument, "dimension mismatch: base has " +
                                             std::to_string(base.dim) + ", queries have " +
                                             std::to_string(queries.dim));
  }
  if (base.rows >= static_cast<int64_t>(kInvalidId)) {
    throw Error(Status::InvalidArgument, "too many base rows for 32-bit ids");
  }
}

// Turns a row of dot products into the metric's comparison distances, in place:
// ||q||^2 + ||b||^2 - 2 q.b (clamped at 0 against rounding), -ip, or 1 - ip.
void to_distances(Metric metric, float query_norm, const float* base_norms, float* row, int64_t n) {
  if (metric == Metric::L2) {
    for (int64_t j = 0; j < n; ++j) row[j] = std::max(0.0f, query_norm + base_norms[j] - 2.0f * row[j]);
  } else {
    const float offset = metric == Metric::Cosine ? 1.0f : 0.0f;
    for (int64_t j = 0; j < n; ++j) row[j] = offset - row[j];
  }
}

// Scratch of one worker: its tile of dot products of a query block against
// one column block.
struct WorkerScratch {
  std::vector<float> tile;
};

void sort_results(int64_t nq, int k, uint32_t* ids, float* dists, const RunControl& control) {
  parallel_for(control, nq, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t q = begin; q < end; ++q) TopK(dists + q * k, ids + q * k, k).sort_ascending();
  });
}

// A metric with no matrix-product form (L1): each distance by the kernel, a
// query block against a column block at a time, so that the block's rows are
// read from the caches by every query of the block.
void exact_knn_pairwise(MatrixView base, MatrixView queries, Metric metric, int k, uint32_t* ids,
                        float* dists, const RunControl& control) {
  const DistanceFn distance = metric_distance_fn(metric);
  const int64_t nq = queries.rows;
  const int64_t query_blocks = (nq + kQueryBlock - 1) / kQueryBlock;
  control.set_total(query_blocks);
  parallel_for(control, query_blocks, 1, [&](int64_t block, int64_t, int) {
    const int64_t q0 = block * kQueryBlock;
    const int64_t qn = std::min(kQueryBlock, nq - q0);
    for (int64_t c0 = 0; c0 < base.rows; c0 += kColumnBlock) {
      const int64_t cn = std::min(kColumnBlock, base.rows - c0);
      for (int64_t q = q0; q < q0 + qn; ++q) {
        TopK top(dists + q * k, ids + q * k, k);
        for (int64_t j = c0; j < c0 + cn; ++j) {
          const float d = distance(queries.row(q), base.row(j), base.dim);
          if (d <= top.worst()) top.push(d, static_cast<uint32_t>(j));
        }
      }
      control.throw_if_cancelled();
    }
    control.add_done(1);
  });
  sort_results(nq, k, ids, dists, control);
}

}  // namespace

void exact_knn(MatrixView base, MatrixView queries, Metric metric, int k, uint32_t* ids,
               float* dists, const RunControl& control) {
  check_arguments(base, queries, k);
  const int dim = base.dim;
  const int64_t nq = queries.rows;
  std::fill(ids, ids + nq * k, kInvalidId);
  std::fill(dists, dists + nq * k, std::numeric_limits<float>::infinity());
  if (nq == 0 || base.rows == 0) return;
  if (metric == Metric::L1) {
    exact_knn_pairwise(base, queries, metric, k, ids, dists, control);
    return;
  }

  std::vector<float> base_norms, query_norms;
  if (metric == Metric::L2) {
    base_norms.resize(base.rows);
    query_norms.resize(nq);
    row_norms_squared(base, base_norms.data());
    row_norms_squared(queries, query_norms.data());
  }

  const int64_t superblock_rows = std::max(
      kColumnBlock, kSuperblockBytes / (static_cast<int64_t>(dim) * 4) / kColumnBlock * kColumnBlock);
  const int64_t superblocks = (base.rows + superblock_rows - 1) / superblock_rows;
  const int64_t query_blocks = (nq + kQueryBlock - 1) / kQueryBlock;
  control.set_total(superblocks * query_blocks);

  std::vector<float> packed(packed_panels_size(std::min(superblock_rows, base.rows), dim));
  std::vector<WorkerScratch> scratch(worker_count(control));
  for (auto& s : scratch) s.tile.resize(kQueryBlock * kColumnBlock);
  // A query block is padded to whole tiles with this row.
  const std::vector<float> zero_row(dim, 0.0f);

  for (int64_t sb = 0; sb < superblocks; ++sb) {
    const int64_t first_row = sb * superblock_rows;
    const int64_t rows = std::min(superblock_rows, base.rows - first_row);
    const int64_t panels = (rows + kPanelWidth - 1) / kPanelWidth;
    parallel_for(control, panels, 16, [&](int64_t begin, int64_t end, int) {
      const int64_t r0 = begin * kPanelWidth;
      const int64_t r1 = std::min(rows, end * kPanelWidth);
      pack_panels(base.row(first_row + r0), nullptr, r1 - r0, dim,
                  packed.data() + begin * kPanelWidth * dim);
    });

    parallel_for(control, query_blocks, 1, [&](int64_t block, int64_t, int worker) {
      WorkerScratch& s = scratch[worker];
      const int64_t q0 = block * kQueryBlock;
      const int64_t qn = std::min(kQueryBlock, nq - q0);
      const int64_t tile_rows = round_up(qn, kTileRows);
      const float* query_rows[kQueryBlock];
      for (int64_t q = 0; q < tile_rows; ++q) {
        query_rows[q] = q < qn ? queries.row(q0 + q) : zero_row.data();
      }

      for (int64_t c0 = 0; c0 < rows; c0 += kColumnBlock) {
        const int64_t cn = std::min(kColumnBlock, rows - c0);
        const int64_t col_panels = (cn + kPanelWidth - 1) / kPanelWidth;
        dot_tiles(query_rows, tile_rows, packed.data() + c0 * dim, col_panels, dim,
                  s.tile.data(), kColumnBlock);
        for (int64_t q = 0; q < qn; ++q) {
          float* row = s.tile.data() + q * kColumnBlock;
          to_distances(metric, metric == Metric::L2 ? query_norms[q0 + q] : 0.0f,
                       metric == Metric::L2 ? base_norms.data() + first_row + c0 : nullptr, row,
                       cn);
          TopK top(dists + (q0 + q) * k, ids + (q0 + q) * k, k);
          const uint32_t id0 = static_cast<uint32_t>(first_row + c0);
          for (int64_t j = 0; j < cn; ++j) {
            if (row[j] <= top.worst()) top.push(row[j], id0 + static_cast<uint32_t>(j));
          }
        }
      }
      control.add_done(1);
    });
  }

  sort_results(nq, k, ids, dists, control);
}

KnnGraph exact_knn_graph(MatrixView data, Metric metric, int k, const RunControl& control) {
  if (k <= 0) throw Error(Status::InvalidArgument, "k must be positive, got " + std::to_string(k));
  const int64_t n = data.rows;
  const int wide = k + 1;
  std::vector<uint32_t> ids(static_cast<size_t>(n) * wide);
  std::vector<float> dists(static_cast<size_t>(n) * wide);
  exact_knn(data, data, metric, wide, ids.data(), dists.data(), control);

  KnnGraph graph(n, k);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t* src_ids = ids.data() + i * wide;
    const float* src_dists = dists.data() + i * wide;
    // The row itself is normally first, but a duplicate of it may tie; when it
    // is missing altogether (many duplicates) the last entry is dropped.
    int out = 0;
    for (int j = 0; j < wide && out < k; ++j) {
      if (src_ids[j] == static_cast<uint32_t>(i)) continue;
      graph.ids[i * k + out] = src_ids[j];
      graph.dists[i * k + out] = src_dists[j];
      ++out;
    }
  }
  return graph;
}

}  // namespace tsdg
