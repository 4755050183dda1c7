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

// Stage 1 on the k-NN list of u: the relaxed occlusion rule, checked from
// the closest neighbor against the edges already kept. Writes the kept edges
// to kept (room for knn.k) and returns their count.
int prune_list(MatrixView data, DistanceFn distance, const KnnGraph& knn, int64_t u, float alpha,
               std::vector<Edge>& scratch, Edge* kept) {
  sorted_candidates(knn, u, scratch);
  int count = 0;
  for (const Edge& candidate : scratch) {
    bool occluded = false;
    for (int i = 0; i < count && !occluded; ++i) {
      if (kept[i].id == candidate.id) {
        occluded = true;  // a duplicate entry
      } else if (relaxed(kept[i].dist, alpha) < candidate.dist) {
        const float between = distance(data.row(kept[i].id), data.row(candidate.id), data.dim);
        occluded = relaxed(between, alpha) < candidate.dist;
      }
    }
    if (!occluded) kept[count++] = candidate;
  }
  return count;
}

struct Stage2Scratch {
  std::vector<Edge> incoming;  // the reverse edges of the node, filled by the caller
  std::vector<Edge> list;
  std::vector<std::pair<int, Edge>> ranked;
};

// Stage 2 for node u: its pruned list plus its reverse edges (scratch.incoming,
// closest first, the list bounded by 2R, no duplicates), each edge with its
// occlusion factor λ, sorted by (λ, distance), edges with λ > lambda0
// dropped, the first R stored in graph's list of u.
void rank_list(MatrixView data, DistanceFn distance, const DiversifyParams& params,
               const Edge* forward, int forward_count, Stage2Scratch& scratch, TsdgGraph& graph,
               int64_t u) {
  const int degree = params.degree;
  const int lambda0 = params.lambda0;
  const size_t list_limit = static_cast<size_t>(2 * degree);
  std::vector<Edge>& list = scratch.list;
  std::vector<Edge>& incoming = scratch.incoming;
  std::vector<std::pair<int, Edge>>& ranked = scratch.ranked;
  list.assign(forward, forward + forward_count);
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
      if (distance(data.row(list[i].id), data.row(list[j].id), data.dim) < list[j].dist) ++lambda;
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
  std::fill(out_ids, out_ids + degree, kInvalidId);
  std::fill(out_lambdas, out_lambdas + degree, uint8_t{0});
  for (size_t j = 0; j < stored; ++j) {
    out_ids[j] = ranked[j].second.id;
    out_lambdas[j] = static_cast<uint8_t>(ranked[j].first);
  }
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
  const int width = std::max(knn.k, 1);
  const int degree = params.degree;
  const DistanceFn distance = metric_distance_fn(metric);
  control.set_total(2 * n);

  // Stage 1: relaxed pruning of every k-NN list.
  std::vector<Edge> pruned(static_cast<size_t>(n) * width);
  std::vector<int> pruned_count(n, 0);
  const int workers = worker_count(control);
  std::vector<std::vector<Edge>> candidates(workers);
  parallel_for(control, n, kChunk, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t u = begin; u < end; ++u) {
      pruned_count[u] = prune_list(data, distance, knn, u, params.alpha, candidates[worker], &pruned[u * width]);
    }
    control.add_done(end - begin);
  });
  control.throw_if_cancelled();

  const ReverseEdges reverse = reverse_of(n, width, pruned, pruned_count);
  control.throw_if_cancelled();

  // Stage 2: occlusion factors on the pruned lists with their reverse edges.
  TsdgGraph graph(n, degree);
  std::vector<Stage2Scratch> stage2_scratch(workers);
  parallel_for(control, n, kChunk, [&](int64_t begin, int64_t end, int worker) {
    Stage2Scratch& scratch = stage2_scratch[worker];
    for (int64_t u = begin; u < end; ++u) {
      scratch.incoming.assign(reverse.edges.begin() + reverse.offsets[u],
                              reverse.edges.begin() + reverse.offsets[u + 1]);
      rank_list(data, distance, params, &pruned[u * width], pruned_count[u], scratch, graph, u);
    }
    control.add_done(end - begin);
  });
  control.throw_if_cancelled();
  connect_components(data, graph, control);
  return graph;
}

TsdgGraph diversify_tsdg_incremental(MatrixView data, Metric metric, const KnnGraph& knn,
                                     const std::vector<uint8_t>& knn_changed, const TsdgGraph& old,
                                     const DiversifyParams& params, const RunControl& control,
                                     std::vector<uint8_t>& list_changed) {
  validate(data, knn, params);
  const int64_t n = data.rows;
  const int64_t n_old = old.nodes;
  if (static_cast<int64_t>(knn_changed.size()) != n || n_old > n ||
      (n_old > 0 && old.degree != params.degree)) {
    throw Error(Status::InvalidArgument,
                "diversify: the old graph or the changed flags do not match the rows");
  }
  const int width = std::max(knn.k, 1);
  const int degree = params.degree;
  const DistanceFn distance = metric_distance_fn(metric);
  const int workers = worker_count(control);
  control.set_total(2 * n);

  // Stage 1 on the changed lists.
  std::vector<uint32_t> changed;
  std::vector<int64_t> slot(n, -1);  // row -> index in changed
  for (int64_t u = 0; u < n; ++u) {
    if (!knn_changed[u] && u < n_old) continue;
    slot[u] = static_cast<int64_t>(changed.size());
    changed.push_back(static_cast<uint32_t>(u));
  }
  const auto changed_count = static_cast<int64_t>(changed.size());
  std::vector<Edge> pruned(static_cast<size_t>(changed_count) * width);
  std::vector<int> pruned_count(changed_count, 0);
  std::vector<std::vector<Edge>> candidates(workers);
  parallel_for(control, changed_count, kChunk, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t i = begin; i < end; ++i) {
      pruned_count[i] = prune_list(data, distance, knn, changed[i], params.alpha, candidates[worker],
                                   &pruned[i * width]);
    }
    control.add_done(end - begin);
  });
  control.throw_if_cancelled();

  // The reverse edges out of the changed lists, by target.
  std::vector<int64_t> offsets(n + 1, 0);
  for (int64_t i = 0; i < changed_count; ++i) {
    for (int j = 0; j < pruned_count[i]; ++j) ++offsets[pruned[i * width + j].id + 1];
  }
  for (int64_t v = 0; v < n; ++v) offsets[v + 1] += offsets[v];
  std::vector<Edge> incoming(offsets[n]);
  {
    std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
    for (int64_t i = 0; i < changed_count; ++i) {
      for (int j = 0; j < pruned_count[i]; ++j) {
        const Edge& e = pruned[i * width + j];
        incoming[fill[e.id]++] = Edge{e.dist, changed[i]};
      }
    }
  }

  // The nodes whose stage 2 input can differ.
  std::vector<uint8_t> touched(n, 0);
  for (int64_t v = 0; v < n; ++v) touched[v] = slot[v] >= 0 || offsets[v + 1] > offsets[v];
  parallel_for(control, n_old, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t w = begin; w < end; ++w) {
      const uint32_t* list = old.list(w);
      for (int j = 0; j < degree && !touched[w]; ++j) {
        touched[w] = list[j] != kInvalidId && list[j] < n && slot[list[j]] >= 0;
      }
    }
  });

  // Stage 2 on the touched nodes.
  TsdgGraph graph(n, degree);
  std::vector<Stage2Scratch> stage2_scratch(workers);
  std::vector<std::vector<Edge>> forward_scratch(workers, std::vector<Edge>(width));
  parallel_for(control, n, kChunk, [&](int64_t begin, int64_t end, int worker) {
    Stage2Scratch& scratch = stage2_scratch[worker];
    for (int64_t w = begin; w < end; ++w) {
      if (!touched[w]) {
        std::copy(old.list(w), old.list(w) + degree, graph.neighbors.data() + w * degree);
        std::copy(old.list_lambdas(w), old.list_lambdas(w) + degree, graph.lambdas.data() + w * degree);
        continue;
      }
      const Edge* forward;
      int forward_count;
      if (slot[w] >= 0) {
        forward = &pruned[slot[w] * width];
        forward_count = pruned_count[slot[w]];
      } else {
        // An unchanged k-NN list prunes as it did before.
        forward = forward_scratch[worker].data();
        forward_count = prune_list(data, distance, knn, w, params.alpha, candidates[worker],
                                   forward_scratch[worker].data());
      }
      scratch.incoming.assign(incoming.begin() + offsets[w], incoming.begin() + offsets[w + 1]);
      if (w < n_old) {
        // The old list's edges from unchanged lists that were reverse edges:
        // for a node whose own list changed, an old edge to v is a reverse
        // edge only if v's list holds it.
        const uint32_t* list = old.list(w);
        for (int j = 0; j < degree && list[j] != kInvalidId; ++j) {
          const uint32_t v = list[j];
          if (v >= n || slot[v] >= 0) continue;
          if (std::any_of(forward, forward + forward_count, [v](const Edge& e) { return e.id == v; })) {
            continue;  // a forward edge still
          }
          if (slot[w] >= 0) {
            const uint32_t* back = knn.list(v);
            if (std::find(back, back + knn.k, static_cast<uint32_t>(w)) == back + knn.k) continue;
          }
          scratch.incoming.push_back(Edge{distance(data.row(w), data.row(v), data.dim), v});
        }
      }
      rank_list(data, distance, params, forward, forward_count, scratch, graph, w);
    }
    control.add_done(end - begin);
  });
  control.throw_if_cancelled();
  connect_components(data, graph, control);

  list_changed.assign(n, 1);
  parallel_for(control, n_old, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t w = begin; w < end; ++w) {
      list_changed[w] = !std::equal(old.list(w), old.list(w) + degree, graph.list(w)) ||
                        !std::equal(old.list_lambdas(w), old.list_lambdas(w) + degree, graph.list_lambdas(w));
    }
  });
  return graph;
}

}  // namespace tsdg
