#include "entry_points.h"

#include <algorithm>
#include <limits>
#include <random>

#include "distance.h"

namespace tsdg {

namespace {

constexpr int kLloydIterations = 5;
constexpr int kSamplesPerEntry = 64;
constexpr int64_t kMinSample = 4096;

// Index into sample of the row nearest point.
size_t nearest_sampled(MatrixView data, const std::vector<uint32_t>& sample, const float* point,
                       DistanceFn l2) {
  size_t best = 0;
  float best_dist = std::numeric_limits<float>::infinity();
  for (size_t s = 0; s < sample.size(); ++s) {
    const float d = l2(point, data.row(sample[s]), data.dim);
    if (d < best_dist) {
      best_dist = d;
      best = s;
    }
  }
  return best;
}

// k-means++ seeding then Lloyd iterations on the sampled rows.
std::vector<float> kmeans_centers(MatrixView data, const std::vector<uint32_t>& sample,
                                  int centers, std::mt19937_64& rng, DistanceFn l2) {
  const int dim = data.dim;
  std::vector<float> result(static_cast<size_t>(centers) * dim);
  std::vector<float> nearest(sample.size(), std::numeric_limits<float>::infinity());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  size_t chosen = rng() % sample.size();
  for (int c = 0; c < centers; ++c) {
    std::copy(data.row(sample[chosen]), data.row(sample[chosen]) + dim, &result[c * dim]);
    double total = 0.0;
    for (size_t s = 0; s < sample.size(); ++s) {
      nearest[s] = std::min(nearest[s], l2(&result[c * dim], data.row(sample[s]), dim));
      total += nearest[s];
    }
    if (total <= 0.0) break;  // fewer distinct rows than centers; the rest stay duplicates
    double pick = unit(rng) * total;
    chosen = sample.size() - 1;
    for (size_t s = 0; s < sample.size(); ++s) {
      pick -= nearest[s];
      if (pick <= 0.0) {
        chosen = s;
        break;
      }
    }
  }
  std::vector<double> sums(result.size());
  std::vector<int64_t> members(centers);
  for (int iteration = 0; iteration < kLloydIterations; ++iteration) {
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(members.begin(), members.end(), 0);
    for (uint32_t row : sample) {
      int best = 0;
      float best_dist = std::numeric_limits<float>::infinity();
      for (int c = 0; c < centers; ++c) {
        const float d = l2(&result[c * dim], data.row(row), dim);
        if (d < best_dist) {
          best_dist = d;
          best = c;
        }
      }
      ++members[best];
      for (int j = 0; j < dim; ++j) sums[best * dim + j] += data.row(row)[j];
    }
    for (int c = 0; c < centers; ++c) {
      if (members[c] == 0) continue;  // an empty cluster keeps its center
      for (int j = 0; j < dim; ++j) result[c * dim + j] = static_cast<float>(sums[c * dim + j] / members[c]);
    }
  }
  return result;
}

}  // namespace

std::vector<uint32_t> select_entry_points(MatrixView data, GraphView graph, int count,
                                          uint64_t seed) {
  std::vector<uint32_t> entries;
  if (count <= 0 || data.rows == 0) return entries;
  if (data.rows <= count) {
    for (int64_t i = 0; i < data.rows; ++i) entries.push_back(static_cast<uint32_t>(i));
    return entries;
  }
  const DistanceFn l2 = distance_kernels().l2_squared;
  const int dim = data.dim;
  std::mt19937_64 rng(seed);
  const int64_t sample_size =
      std::min<int64_t>(data.rows, std::max<int64_t>(kMinSample, int64_t{kSamplesPerEntry} * count));
  std::vector<uint32_t> sample(sample_size);
  for (auto& row : sample) row = static_cast<uint32_t>(rng() % data.rows);

  std::vector<float> targets(dim, 0.0f);  // the mean first, then the centers
  {
    std::vector<double> mean(dim, 0.0);
    for (uint32_t row : sample) {
      for (int j = 0; j < dim; ++j) mean[j] += data.row(row)[j];
    }
    for (int j = 0; j < dim; ++j) targets[j] = static_cast<float>(mean[j] / sample_size);
  }
  if (count > 1) {
    const std::vector<float> centers = kmeans_centers(data, sample, count - 1, rng, l2);
    targets.insert(targets.end(), centers.begin(), centers.end());
  }

  std::vector<uint32_t> chosen_sorted;
  auto add_if_new = [&](uint32_t node) {
    auto at = std::lower_bound(chosen_sorted.begin(), chosen_sorted.end(), node);
    if (at != chosen_sorted.end() && *at == node) return;
    chosen_sorted.insert(at, node);
    entries.push_back(node);
  };
  for (int t = 0; t < count; ++t) {
    const float* target = &targets[static_cast<size_t>(t) * dim];
    uint32_t node = sample[nearest_sampled(data, sample, target, l2)];
    if (graph.nodes == data.rows && graph.degree > 0) {
      node = greedy_descent(data, graph, target, node, l2);
    }
    add_if_new(node);
  }
  // Two targets can land on one node; fill up with sampled rows, then (when
  // the sample repeats itself) with the first rows.
  for (size_t s = 0; entries.size() < static_cast<size_t>(count) && s < sample.size(); ++s) {
    add_if_new(sample[s]);
  }
  for (uint32_t node = 0; entries.size() < static_cast<size_t>(count); ++node) add_if_new(node);
  return entries;
}

}  // namespace tsdg
