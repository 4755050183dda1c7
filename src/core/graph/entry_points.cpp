#include "entry_points.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "bruteforce.h"
#include "distance.h"
#include "huge_pages.h"
#include "search.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

constexpr int kLloydIterations = 5;
constexpr int kSamplesPerEntry = 64;
constexpr int64_t kMinSample = 4096;

constexpr int64_t kSamplesPerChunk = 1024;

// For each row of points, the index of the nearest row of rows (L2), by the
// blocked matrix product of the exact scan.
std::vector<uint32_t> nearest_rows(MatrixView rows, MatrixView points, const RunControl& control) {
  std::vector<uint32_t> nearest(points.rows);
  std::vector<float> dists(points.rows);
  exact_knn(rows, points, Metric::L2, 1, nearest.data(), dists.data(), control);
  return nearest;
}

// k-means++ seeding then Lloyd iterations on the sampled rows. The sums go
// by fixed chunks, so the result does not depend on the pool.
Matrix kmeans_centers(MatrixView sampled, int centers, std::mt19937_64& rng, DistanceFn l2,
                      const RunControl& control) {
  const int dim = sampled.dim;
  const auto size = static_cast<size_t>(sampled.rows);
  Matrix result(centers, dim);
  std::vector<float> nearest(size, std::numeric_limits<float>::infinity());
  std::vector<double> chunk_totals((size + kSamplesPerChunk - 1) / kSamplesPerChunk);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  size_t chosen = rng() % size;
  for (int c = 0; c < centers; ++c) {
    std::copy(sampled.row(chosen), sampled.row(chosen) + dim, result.row(c));
    const float* center = result.row(c);
    parallel_for(control, static_cast<int64_t>(size), kSamplesPerChunk, [&](int64_t begin, int64_t end, int) {
      double chunk_total = 0.0;
      for (int64_t s = begin; s < end; ++s) {
        nearest[s] = std::min(nearest[s], l2(center, sampled.row(s), dim));
        chunk_total += nearest[s];
      }
      chunk_totals[begin / kSamplesPerChunk] = chunk_total;
    });
    double total = 0.0;
    for (const double chunk_total : chunk_totals) total += chunk_total;
    if (total <= 0.0) break;  // fewer distinct rows than centers; the rest stay duplicates
    double pick = unit(rng) * total;
    chosen = size - 1;
    for (size_t s = 0; s < size; ++s) {
      pick -= nearest[s];
      if (pick <= 0.0) {
        chosen = s;
        break;
      }
    }
  }
  std::vector<double> sums(static_cast<size_t>(centers) * dim);
  std::vector<int64_t> members(centers);
  for (int iteration = 0; iteration < kLloydIterations; ++iteration) {
    const std::vector<uint32_t> assigned = nearest_rows(result.view(), sampled, control);
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(members.begin(), members.end(), 0);
    for (size_t s = 0; s < size; ++s) {
      const uint32_t best = assigned[s];
      ++members[best];
      for (int j = 0; j < dim; ++j) sums[best * dim + j] += sampled.row(s)[j];
    }
    for (int c = 0; c < centers; ++c) {
      if (members[c] == 0) continue;  // an empty cluster keeps its center
      for (int j = 0; j < dim; ++j) result.row(c)[j] = static_cast<float>(sums[c * dim + j] / members[c]);
    }
  }
  return result;
}

}  // namespace

EntryTargets entry_targets(MatrixView data, int count, uint64_t seed, const RunControl& control) {
  EntryTargets result;
  result.count = count;
  if (count <= 0 || data.rows <= count) return result;
  const DistanceFn l2 = distance_kernels().l2_squared;
  const int dim = data.dim;
  std::mt19937_64 rng(seed);
  const int64_t sample_size =
      std::min<int64_t>(data.rows, std::max<int64_t>(kMinSample, int64_t{kSamplesPerEntry} * count));
  result.sample.resize(sample_size);
  for (auto& row : result.sample) row = static_cast<uint32_t>(rng() % data.rows);

  // through the huge-page allocator, so that a build past its memory budget
  // keeps the sample in a temporary file too (spill_files.h): it holds up to
  // kSamplesPerEntry rows for each entry point, whatever their dimensions
  HugePageArray<float> sampled_values(static_cast<size_t>(sample_size) * dim, HugePageArray<float>::Unfilled{});
  for (int64_t s = 0; s < sample_size; ++s) {
    std::copy(data.row(result.sample[s]), data.row(result.sample[s]) + dim, sampled_values.data() + s * dim);
  }
  const MatrixView sampled{sampled_values.data(), sample_size, dim};

  result.targets = Matrix(count, dim);  // the mean first, then the centers
  {
    std::vector<double> mean(dim, 0.0);
    for (int64_t s = 0; s < sample_size; ++s) {
      for (int j = 0; j < dim; ++j) mean[j] += sampled.row(s)[j];
    }
    for (int j = 0; j < dim; ++j) result.targets.row(0)[j] = static_cast<float>(mean[j] / sample_size);
  }
  if (count > 1) {
    const Matrix centers = kmeans_centers(sampled, count - 1, rng, l2, control);
    std::copy(centers.values.begin(), centers.values.end(), result.targets.row(1));
  }
  result.nearest_sample = nearest_rows(sampled, result.targets.view(), control);
  return result;
}

std::vector<uint32_t> entry_points_toward(MatrixView data, GraphView graph, const EntryTargets& targets,
                                          const RunControl& control) {
  std::vector<uint32_t> entries;
  const int count = targets.count;
  if (count <= 0 || data.rows == 0) return entries;
  if (data.rows <= count) {
    for (int64_t i = 0; i < data.rows; ++i) entries.push_back(static_cast<uint32_t>(i));
    return entries;
  }
  const DistanceFn l2 = distance_kernels().l2_squared;
  const std::vector<uint32_t>& sample = targets.sample;
  std::vector<uint32_t> descended(count);
  parallel_for(control, count, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      descended[t] = sample[targets.nearest_sample[t]];
      if (graph.nodes == data.rows && graph.degree > 0) {
        descended[t] = greedy_descent(data, graph, targets.targets.row(t), descended[t], l2);
      }
    }
  });

  std::vector<uint32_t> chosen_sorted;
  auto add_if_new = [&](uint32_t node) {
    auto at = std::lower_bound(chosen_sorted.begin(), chosen_sorted.end(), node);
    if (at != chosen_sorted.end() && *at == node) return;
    chosen_sorted.insert(at, node);
    entries.push_back(node);
  };
  for (int t = 0; t < count; ++t) add_if_new(descended[t]);
  // Two targets can land on one node; fill up with sampled rows, then (when
  // the sample repeats itself) with the first rows.
  for (size_t s = 0; entries.size() < static_cast<size_t>(count) && s < sample.size(); ++s) {
    add_if_new(sample[s]);
  }
  for (uint32_t node = 0; entries.size() < static_cast<size_t>(count); ++node) add_if_new(node);
  return entries;
}

std::vector<uint32_t> select_entry_points(MatrixView data, GraphView graph, int count,
                                          uint64_t seed, const RunControl& control) {
  return entry_points_toward(data, graph, entry_targets(data, count, seed, control), control);
}

int64_t navigating_stride(int64_t nodes) {
  int64_t spacing = kRowsPerStridedEntry;
  if (nodes > kNodesAtBaseSpacing) {
    const double narrowing = 1.0 + std::log10(static_cast<double>(nodes) / kNodesAtBaseSpacing);
    spacing = std::llround(static_cast<double>(kRowsPerStridedEntry) / narrowing);
  }
  return std::max(spacing, (nodes + kMaxStridedEntries - 1) / kMaxStridedEntries);
}

std::vector<uint32_t> with_strided_entries(std::vector<uint32_t> entries, int64_t nodes, int64_t stride) {
  if (stride <= 0) return entries;
  std::vector<uint32_t> sorted(entries);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t node = 0; node < nodes; node += stride) {
    const auto id = static_cast<uint32_t>(node);
    if (!std::binary_search(sorted.begin(), sorted.end(), id)) entries.push_back(id);
  }
  return entries;
}

std::vector<uint32_t> navigating_set(MatrixView data, GraphView graph, const SearchParams& params,
                                     const RunControl& control) {
  NavigatingSetCache cache;
  cache.refresh(data, graph, params, control);
  return cache.entries();
}

bool NavigatingSetCache::refresh(MatrixView data, GraphView graph, const SearchParams& params,
                                 const RunControl& control) {
  if (current_ && params.entry_samples == targets_.count && params.seed == targets_seed_ &&
      params.entry_stride == stride_) {
    return false;
  }
  // the empty targets a cache starts with are those of no entry samples
  if (targets_.count != params.entry_samples || params.seed != targets_seed_) {
    targets_ = entry_targets(data, params.entry_samples, params.seed, control);
    targets_seed_ = params.seed;
  }
  const int64_t stride = params.entry_stride < 0 ? navigating_stride(data.rows) : params.entry_stride;
  entries_ = with_strided_entries(entry_points_toward(data, graph, targets_, control), data.rows, stride);
  stride_ = params.entry_stride;
  current_ = true;
  return true;
}

}  // namespace tsdg
