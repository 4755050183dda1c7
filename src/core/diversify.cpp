#include "diversify.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "connectivity.h"
#include "distance.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

constexpr int64_t kChunk = 256;

struct Edge {
  float dist;
  uint32_t id;
};

bool edge_less(const Edge& a, const Edge& b) {
  return a.dist < b.dist || (a.dist == b.dist && a.id < b.id);
}

// alpha * m for a distance m, written so that the relaxation always makes
// occlusion harder, also for inner-product distances, which can be negative.
float relaxed(float m, float alpha) { return m >= 0.0f ? alpha * m : m / alpha; }

void validate(MatrixView data, const KnnGraph& knn, const DiversifyParams& params) {
  if (knn.nodes != data.rows) {
    throw Error(Status::InvalidArgument, "diversify: the k-NN graph has " +
                                             std::to_string(knn.nodes) + " nodes, the data " +
                                             std::to_string(data.rows) + " rows");
  }
  if (data.rows >= static_cast<int64_t>(kInvalidId)) {
    throw Error(Status::InvalidArgument, "diversify: too many rows for 32-bit ids");
  }
  if (params.degree <= 0) throw Error(Status::InvalidArgument, "diversify: degree must be positive");
  if (!(params.alpha >= 1.0f)) throw Error(Status::InvalidArgument, "diversify: alpha must be >= 1");
  if (params.lambda0 < 0 || params.lambda0 > 254) {
    throw Error(Status::InvalidArgument, "diversify: lambda0 must be in [0, 254]");
  }
  if (knn.k < 0) throw Error(Status::InvalidArgument, "diversify: negative k");
}

// The k-NN list of node, valid entries only, ascending by (distance, id).
void sorted_candidates(const KnnGraph& knn, int64_t node, std::vector<Edge>& out) {
  out.clear();
  const uint32_t* ids = knn.list(node);
  const float* dists = knn.list_dists(node);
  for (int j = 0; j < knn.k; ++j) {
    if (ids[j] == kInvalidId || ids[j] == node) continue;
    if (ids[j] >= knn.nodes) {
      throw Error(Status::InvalidArgument, "diversify: neighbor id " + std::to_string(ids[j]) +
                                               " out of range");
    }
    out.push_back(Edge{dists[j], ids[j]});
  }
  std::sort(out.begin(), out.end(), edge_less);
}

// Compressed reverse lists of the pruned graph: for each node, the nodes whose
// pruned list holds it, with the edge's distance.
struct ReverseEdges {
  std::vector<int64_t> offsets;  // nodes + 1
  std::vector<Edge> edges;
};

ReverseEdges reverse_of(int64_t nodes, int width, const std::vector<Edge>& pruned,
                        const std::vector<int>& pruned_count) {
  ReverseEdges reverse;
  reverse.offsets.assign(nodes + 1, 0);
  for (int64_t u = 0; u < nodes; ++u) {
    for (int j = 0; j < pruned_count[u]; ++j) ++reverse.offsets[pruned[u * width + j].id + 1];
  }
  for (int64_t v = 0; v < nodes; ++v) reverse.offsets[v + 1] += reverse.offsets[v];
  reverse.edges.resize(reverse.offsets[nodes]);
  std::vector<int64_t> fill(reverse.offsets.begin(), reverse.offsets.end() - 1);
  for (int64_t u = 0; u < nodes; ++u) {
    for (int j = 0; j < pruned_count[u]; ++j) {
      const Edge& e = pruned[u * width + j];
      reverse.edges[fill[e.id]++] = Edge{e.dist, static_cast<uint32_t>(u)};
    }
  }
  return reverse;
}

}  // namespace

TsdgGraph diversify_tsdg(MatrixView data, Metric metric, const KnnGraph& knn,
                         const DiversifyParams& params, const RunControl& control) {
  validate(data, knn, params);
  const int64_t n = data.rows;
  const int dim = data.dim;
  const int width = std::max(knn.k, 1);
  const int degree = params.degree;
  const float alpha = params.alpha;
  const int lambda0 = params.lambda0;
  const DistanceFn distance = metric_distance_fn(metric);
  control.set_total(2 * n);

  // Stage 1: relaxed pruning of every k-NN list.
  std::vector<Edge> pruned(static_cast<size_t>(n) * width);
  std::vector<int> pruned_count(n, 0);
  const int workers = worker_count(control);
  std::vector<std::vector<Edge>> candidates(workers);
  parallel_for(control, n, kChunk, [&](int64_t begin, int64_t end, int worker) {
    std::vector<Edge>& list = candidates[worker];
    for (int64_t u = begin; u < end; ++u) {
      sorted_candidates(knn, u, list);
      Edge* kept = &pruned[u * width];
      int count = 0;
      for (const Edge& candidate : list) {
        bool occluded = false;
        for (int i = 0; i < count && !occluded; ++i) {
          if (kept[i].id == candidate.id) {
            occluded = true;  // a duplicate entry
          } else if (relaxed(kept[i].dist, alpha) < candidate.dist) {
            const float between = distance(data.row(kept[i].id), data.row(candidate.id), dim);
            occluded = relaxed(between, alpha) < candidate.dist;
          }
        }
        if (!occluded) kept[count++] = candidate;
      }
      pruned_count[u] = count;
    }
    control.add_done(end - begin);
  });
  control.throw_if_cancelled();

  const ReverseEdges reverse = reverse_of(n, width, pruned, pruned_count);
  control.throw_if_cancelled();

  // Stage 2: occlusion factors on the pruned lists with their reverse edges.
  TsdgGraph graph(n, degree);
  const size_t list_limit = static_cast<size_t>(2 * degree);
  std::vector<std::vector<Edge>> reverse_scratch(workers);
  std::vector<std::vector<std::pair<int, Edge>>> ranked_scratch(workers);
  parallel_for(control, n, kChunk, [&](int64_t begin, int64_t end, int worker) {
    std::vector<Edge>& list = candidates[worker];
    std::vector<Edge>& incoming = reverse_scratch[worker];
    std::vector<std::pair<int, Edge>>& ranked = ranked_scratch[worker];
    for (int64_t u = begin; u < end; ++u) {
      const Edge* forward = &pruned[u * width];
      const int forward_count = pruned_count[u];
      list.assign(forward, forward + forward_count);
      incoming.assign(reverse.edges.begin() + reverse.offsets[u],
                      reverse.edges.begin() + reverse.offsets[u + 1]);
      std::sort(incoming.begin(), incoming.end(), edge_less);
      for (const Edge& e : incoming) {
        if (list.size() >= list_limit) break;
        bool present = false;
        for (int j = 0; j < forward_count && !present; ++j) present = forward[j].id == e.id;
        if (!present) list.push_back(e);
      }
      std::sort(list.begin(), list.end(), edge_less);

      // λ of edge j: the edges i closer to u with m(x_i, x_j) < m(u, x_j).
      // Counting stops past lambda0, since such an edge is dropped anyway.
      ranked.clear();
      for (size_t j = 0; j < list.size(); ++j) {
        int lambda = 0;
        for (size_t i = 0; i < j && lambda <= lambda0; ++i) {
          if (!(list[i].dist < list[j].dist)) continue;
          if (distance(data.row(list[i].id), data.row(list[j].id), dim) < list[j].dist) ++lambda;
        }
        if (lambda <= lambda0) ranked.emplace_back(lambda, list[j]);
      }
      std::sort(ranked.begin(), ranked.end(),
                [](const std::pair<int, Edge>& a, const std::pair<int, Edge>& b) {
                  return a.first < b.first || (a.first == b.first && edge_less(a.second, b.second));
                });
      const size_t stored = std::min(ranked.size(), static_cast<size_t>(degree));
      uint32_t* out_ids = graph.neighbors.data() + u * degree;
      uint8_t* out_lambdas = graph.lambdas.data() + u * degree;
      for (size_t j = 0; j < stored; ++j) {
        out_ids[j] = ranked[j].second.id;
        out_lambdas[j] = static_cast<uint8_t>(ranked[j].first);
      }
    }
    control.add_done(end - begin);
  });
  control.throw_if_cancelled();
  connect_components(data, graph, control);
  return graph;
}

}  // namespace tsdg
