#include "long_range.h"

#include <algorithm>
#include <limits>
#include <string>

#include "distance.h"
#include "huge_pages.h"
#include "random_candidate.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// The pivots and, for each listed row, its nearest ones (as indexes into
// pivots); the lists through the huge-page allocator, which a build past its
// memory budget keeps in temporary files (spill_files.h).
struct Pivots {
  std::vector<uint32_t> pivots;
  int asked = 0;  // nearest pivots found per row
  HugePageVector<uint32_t> near_ids;
  HugePageVector<float> near_dists;
};

}  // namespace

std::vector<uint32_t> pivot_rows(int64_t rows, int64_t stride) {
  if (stride < 1) throw Error(Status::InvalidArgument, "pivot stride must be positive");
  std::vector<uint32_t> pivots;
  pivots.reserve(static_cast<size_t>(rows / stride + 1));
  for (int64_t id = 0; id < rows; id += stride) pivots.push_back(static_cast<uint32_t>(id));
  return pivots;
}

int64_t long_range_pivot_stride(int64_t rows, const DiversifyParams& params) {
  if (params.pivot_candidates < 0) throw Error(Status::InvalidArgument, "pivot candidates must not be negative");
  if (params.pivot_stride < 2) throw Error(Status::InvalidArgument, "pivot stride must be at least 2");
  if (params.max_pivots < 1) throw Error(Status::InvalidArgument, "max pivots must be positive");
  const int64_t stride = std::max<int64_t>(params.pivot_stride, (rows + params.max_pivots - 1) / params.max_pivots);
  return params.pivot_candidates > 0 && stride < rows ? stride : 0;
}

int pivots_asked(const DiversifyParams& params, int64_t pivot_count) {
  // One more pivot than asked for: a pivot row finds itself first.
  return static_cast<int>(std::min<int64_t>(params.pivot_candidates + 1, pivot_count));
}

int random_candidate_count(const DiversifyParams& params, int64_t rows) {
  if (params.random_candidates < 0) throw Error(Status::InvalidArgument, "random candidates must not be negative");
  return rows > 1 ? params.random_candidates : 0;
}

int long_range_list_width(int knn_k, int long_range, int max_width) {
  if (max_width > 0 && long_range >= max_width) {
    throw Error(Status::InvalidArgument, "pivot candidates: " + std::to_string(long_range) +
                                             " long-range candidates leave no room in lists of " +
                                             std::to_string(max_width));
  }
  return (max_width > 0 ? std::min(knn_k, max_width - long_range) : knn_k) + long_range;
}

KnnGraph with_long_range_candidates(MatrixView data, Metric metric, const KnnGraph& knn,
                                    const DiversifyParams& params, const ExactSearch& search,
                                    const RunControl& control, const std::vector<uint32_t>* rows,
                                    int max_width) {
  if (knn.nodes != data.rows) {
    throw Error(Status::InvalidArgument, "pivot candidates: the k-NN graph has " + std::to_string(knn.nodes) +
                                             " nodes, the data " + std::to_string(data.rows) + " rows");
  }
  const auto listed = static_cast<int64_t>(rows != nullptr ? rows->size() : static_cast<size_t>(data.rows));
  const auto row_of = [&](int64_t i) -> int64_t { return rows != nullptr ? (*rows)[i] : i; };

  HugePageArray<float> query_values(static_cast<size_t>(rows != nullptr ? listed : 0) * data.dim,
                                    HugePageArray<float>::Unfilled{});
  if (rows != nullptr) {
    parallel_for(control, listed, 1024, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        std::copy(data.row(row_of(i)), data.row(row_of(i)) + data.dim, query_values.data() + i * data.dim);
      }
    });
  }
  const MatrixView queries{query_values.data(), rows != nullptr ? listed : 0, data.dim};
  Pivots pivot_set;
  const int64_t stride = long_range_pivot_stride(data.rows, params);
  if (listed > 0 && stride > 0) {
    pivot_set.pivots = pivot_rows(data.rows, stride);
    pivot_set.asked = pivots_asked(params, static_cast<int64_t>(pivot_set.pivots.size()));
    const auto pivot_count = static_cast<int64_t>(pivot_set.pivots.size());
    HugePageArray<float> pivot_values(static_cast<size_t>(pivot_count) * data.dim, HugePageArray<float>::Unfilled{});
    for (int64_t p = 0; p < pivot_count; ++p) {
      std::copy(data.row(pivot_set.pivots[p]), data.row(pivot_set.pivots[p]) + data.dim,
                pivot_values.data() + p * data.dim);
    }
    pivot_set.near_ids.resize(static_cast<size_t>(listed) * pivot_set.asked, 0);
    pivot_set.near_dists.resize(pivot_set.near_ids.size(), 0.0f);
    search(MatrixView{pivot_values.data(), pivot_count, data.dim}, rows != nullptr ? queries : data,
           pivot_set.asked, pivot_set.near_ids.data(), pivot_set.near_dists.data());
    control.throw_if_cancelled();
  }

  const int random = random_candidate_count(params, data.rows);
  const DistanceFn distance = metric_distance_fn(metric);
  const int width = long_range_list_width(knn.k, random + pivot_set.asked, max_width);
  const int knn_kept = width - random - pivot_set.asked;
  KnnGraph out(knn.nodes, width);
  std::vector<int64_t> slot;  // row -> index among the listed rows, -1 for none
  if (rows != nullptr) {
    slot.assign(static_cast<size_t>(data.rows), -1);
    for (int64_t i = 0; i < listed; ++i) slot[row_of(i)] = i;
  }
  std::vector<std::vector<std::pair<float, uint32_t>>> scratch(worker_count(control));
  parallel_for(control, data.rows, 1024, [&](int64_t begin, int64_t end, int worker) {
    std::vector<std::pair<float, uint32_t>>& pairs = scratch[worker];
    for (int64_t u = begin; u < end; ++u) {
      const uint32_t* ids = knn.list(u);
      const float* dists = knn.list_dists(u);
      pairs.clear();
      // GNND and GGM leave the lists sorted: the first knn_kept are the nearest.
      for (int j = 0; j < knn_kept; ++j) {
        if (ids[j] != kInvalidId) pairs.emplace_back(dists[j], ids[j]);
      }
      const int64_t near = rows == nullptr ? u : (slot.empty() ? -1 : slot[u]);
      for (int j = 0; near >= 0 && j < pivot_set.asked; ++j) {
        const uint32_t p = pivot_set.near_ids[near * pivot_set.asked + j];
        if (p == kInvalidId) continue;
        const uint32_t id = pivot_set.pivots[p];
        if (id == u || std::any_of(pairs.begin(), pairs.end(), [id](const auto& e) { return e.second == id; })) {
          continue;
        }
        pairs.emplace_back(pivot_set.near_dists[near * pivot_set.asked + j], id);
      }
      for (int j = 0; j < random && (rows == nullptr || near >= 0); ++j) {
        const uint32_t id = random_candidate(params.random_seed, u, j, data.rows);
        if (id == u || std::any_of(pairs.begin(), pairs.end(), [id](const auto& e) { return e.second == id; })) {
          continue;
        }
        pairs.emplace_back(distance(data.row(u), data.row(id), data.dim), id);
      }
      std::sort(pairs.begin(), pairs.end());
      uint32_t* out_ids = out.ids.data() + u * width;
      float* out_dists = out.dists.data() + u * width;
      for (size_t j = 0; j < pairs.size(); ++j) {
        out_dists[j] = pairs[j].first;
        out_ids[j] = pairs[j].second;
      }
    }
  });
  control.throw_if_cancelled();
  return out;
}

}  // namespace tsdg
