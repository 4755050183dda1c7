#include "diversify.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bruteforce.h"
#include "connectivity.h"
#include "descent.h"
#include "distance.h"
#include "huge_pages.h"
#include "long_range.h"
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
  // GNND and GGM leave their lists sorted.
  if (!std::is_sorted(out.begin(), out.end(), edge_less)) std::sort(out.begin(), out.end(), edge_less);
}

// Stage 1 over candidates sorted by (distance, id): the relaxed occlusion
// rule, checked from the closest candidate against the edges already kept.
// A candidate for which given(candidate) holds is kept unchecked. Writes the
// kept edges to kept (room for every candidate) and returns their count.
template <class Given>
int prune_sorted(MatrixView data, DistanceFn distance, const std::vector<Edge>& candidates, float alpha,
                 Given given, Edge* kept) {
  int count = 0;
  for (const Edge& candidate : candidates) {
    bool occluded = false;
    for (int i = 0; i < count && !occluded && !given(candidate); ++i) {
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

// Stage 1 on the k-NN list of u. kept needs room for knn.k edges.
int prune_list(MatrixView data, DistanceFn distance, const KnnGraph& knn, int64_t u, float alpha,
               std::vector<Edge>& scratch, Edge* kept) {
  sorted_candidates(knn, u, scratch);
  return prune_sorted(data, distance, scratch, alpha, [](const Edge&) { return false; }, kept);
}

// Stage 1 on the k-NN list of an old node u that only gained new rows (ids
// >= old.nodes): each new row is checked against the closer entries that u's
// stored search list holds, taken as kept, and the closer new rows kept;
// the other old entries are left out. kept needs room for knn.k edges; the
// new rows in it are the ones kept.
int prune_gained_list(MatrixView data, DistanceFn distance, const KnnGraph& knn, GraphView old,
                      int64_t u, float alpha, std::vector<Edge>& scratch, Edge* kept) {
  sorted_candidates(knn, u, scratch);
  const uint32_t* stored = old.list(u);
  const auto n_old = static_cast<uint32_t>(old.nodes);
  const auto is_stored = [&](const Edge& e) {
    return e.id < n_old && std::find(stored, stored + old.degree, e.id) != stored + old.degree;
  };
  // Only closer entries occlude: the entries past the last new row play no part.
  const auto last_new = std::find_if(scratch.rbegin(), scratch.rend(), [n_old](const Edge& e) { return e.id >= n_old; });
  scratch.erase(last_new.base(), scratch.end());
  scratch.erase(std::remove_if(scratch.begin(), scratch.end(),
                               [&](const Edge& e) { return e.id < n_old && !is_stored(e); }),
                scratch.end());
  return prune_sorted(data, distance, scratch, alpha, [n_old](const Edge& e) { return e.id < n_old; }, kept);
}

// Starts loading the rows of a list's valid ids into the caches.
void prefetch_list_rows(MatrixView data, const uint32_t* ids, int count) {
  const size_t row_bytes = static_cast<size_t>(data.dim) * sizeof(float);
  for (int j = 0; j < count; ++j) {
    if (ids[j] >= data.rows) continue;
    const char* row = reinterpret_cast<const char*>(data.row(ids[j]));
    for (size_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(row + line, 0, 1);
  }
}

struct Stage2Scratch {
  std::vector<Edge> incoming;  // the reverse edges of the node, filled by the caller
  std::vector<Edge> list;
  std::vector<std::pair<int, Edge>> ranked;
  std::vector<Edge> added;              // rerank_list's added edges, filled by the caller
  std::vector<uint8_t> stored_lambdas;  // and the stored edges' λ
};

// The edges of u with their occlusion factors, sorted by (λ, distance); the
// first degree of them stored in graph's list of u, the rest padded.
void store_ranked(int degree, std::vector<std::pair<int, Edge>>& ranked, TsdgGraph& graph, int64_t u) {
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
  store_ranked(degree, ranked, graph, u);
}

// Stage 2 for a node u whose stored list (ids, their distances in stored,
// their occlusion factors in stored_lambdas) gains the edges added: each
// stored edge's λ grows by the added edges closer to u that occlude it
// (Inequation 1); an added edge's λ counts the occluding edges closer to u
// among all of them. Then, as in rank_list: sorted by (λ, distance), edges
// with λ > lambda0 dropped, the first R stored in graph's list of u. The
// stored λ counted the edges of the list it was ranked in, dropped ones too;
// they are not all at hand, so an added edge's λ can be lower than a full
// stage 2 would find.
void rerank_list(MatrixView data, DistanceFn distance, const DiversifyParams& params,
                 const std::vector<Edge>& stored, const uint8_t* stored_lambdas, const std::vector<Edge>& added,
                 Stage2Scratch& scratch, TsdgGraph& graph, int64_t u) {
  const int lambda0 = params.lambda0;
  // Adds to lambda the edges closer to u that occlude e, stopping past lambda0.
  const auto count_occluders = [&](const std::vector<Edge>& edges, const Edge& e, int& lambda) {
    for (size_t i = 0; i < edges.size() && lambda <= lambda0; ++i) {
      if (!(edges[i].dist < e.dist)) continue;
      if (distance(data.row(edges[i].id), data.row(e.id), data.dim) < e.dist) ++lambda;
    }
  };
  std::vector<std::pair<int, Edge>>& ranked = scratch.ranked;
  ranked.clear();
  for (size_t j = 0; j < stored.size(); ++j) {
    int lambda = stored_lambdas[j];
    count_occluders(added, stored[j], lambda);
    if (lambda <= lambda0) ranked.emplace_back(lambda, stored[j]);
  }
  for (const Edge& e : added) {
    int lambda = 0;
    count_occluders(stored, e, lambda);
    count_occluders(added, e, lambda);
    if (lambda <= lambda0) ranked.emplace_back(lambda, e);
  }
  store_ranked(params.degree, ranked, graph, u);
}

// Compressed reverse lists of the pruned graph: for each node, the nodes whose
// pruned list holds it, with the edge's distance.
struct ReverseEdges {
  std::vector<int64_t> offsets;  // nodes + 1
  HugePageVector<Edge> edges;
};

ReverseEdges reverse_of(int64_t nodes, int width, const HugePageVector<Edge>& pruned,
                        const std::vector<int>& pruned_count) {
  ReverseEdges reverse;
  reverse.offsets.assign(nodes + 1, 0);
  for (int64_t u = 0; u < nodes; ++u) {
    for (int j = 0; j < pruned_count[u]; ++j) ++reverse.offsets[pruned[u * width + j].id + 1];
  }
  for (int64_t v = 0; v < nodes; ++v) reverse.offsets[v + 1] += reverse.offsets[v];
  reverse.edges.resize(reverse.offsets[nodes], Edge{});
  std::vector<int64_t> fill(reverse.offsets.begin(), reverse.offsets.end() - 1);
  for (int64_t u = 0; u < nodes; ++u) {
    for (int j = 0; j < pruned_count[u]; ++j) {
      const Edge& e = pruned[u * width + j];
      reverse.edges[fill[e.id]++] = Edge{e.dist, static_cast<uint32_t>(u)};
    }
  }
  return reverse;
}

ExactSearch cpu_exact_search(Metric metric, const RunControl& control) {
  return [metric, &control](MatrixView base, MatrixView queries, int k, uint32_t* ids, float* dists) {
    exact_knn(base, queries, metric, k, ids, dists, control);
  };
}

}  // namespace

TsdgGraph diversify_tsdg(MatrixView data, Metric metric, const KnnGraph& knn,
                         const DiversifyParams& params, const RunControl& control) {
  validate(data, knn, params);
  if (has_long_range_candidates(params)) {
    DiversifyParams widened = params;
    widened.pivot_candidates = 0;
    widened.random_candidates = 0;
    return diversify_tsdg(data, metric, with_long_range_candidates(data, metric, knn, params, cpu_exact_search(metric, control), control),
                          widened, control);
  }
  const int64_t n = data.rows;
  const int width = std::max(knn.k, 1);
  const int degree = params.degree;
  const DistanceFn distance = metric_distance_fn(metric);
  control.set_total(2 * n);

  // Both stages visit the nodes region by region: a node's candidates are
  // mostly its region's rows, which the nodes before it have just read, so
  // they come from the caches rather than from memory. Each node's lists
  // are its own, so the order does not change the graph.
  const std::vector<uint32_t> order = region_order(data, params.random_seed, control);

  // Stage 1: relaxed pruning of every k-NN list.
  HugePageVector<Edge> pruned(static_cast<size_t>(n) * width, Edge{});
  std::vector<int> pruned_count(n, 0);
  const int workers = worker_count(control);
  std::vector<std::vector<Edge>> candidates(workers);
  parallel_for(control, n, kChunk, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t u = order[i];
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
    for (int64_t i = begin; i < end; ++i) {
      const int64_t u = order[i];
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
                                     const std::vector<uint8_t>& knn_changed, GraphView old,
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
  if (has_long_range_candidates(params)) {
    // Only the rebuilt lists take pivots: the other rows keep the long edges
    // their stored lists hold.
    std::vector<uint32_t> rebuilt;
    for (int64_t u = 0; u < n; ++u) {
      if (u >= n_old || knn_changed[u] == kKnnListRebuilt) rebuilt.push_back(static_cast<uint32_t>(u));
    }
    DiversifyParams widened = params;
    widened.pivot_candidates = 0;
    widened.random_candidates = 0;
    return diversify_tsdg_incremental(
        data, metric, with_long_range_candidates(data, metric, knn, params, cpu_exact_search(metric, control), control, &rebuilt),
        knn_changed, old, widened, control, list_changed);
  }
  const int width = std::max(knn.k, 1);
  const int degree = params.degree;
  const DistanceFn distance = metric_distance_fn(metric);
  const int workers = worker_count(control);
  control.set_total(2 * n);
  const auto change_of = [&](int64_t u) -> uint8_t {
    if (u >= n_old) return kKnnListRebuilt;
    if (knn_changed[u] > kKnnListGainedNewRows) {
      throw Error(Status::InvalidArgument, "diversify: unknown k-NN list change " +
                                               std::to_string(knn_changed[u]));
    }
    return knn_changed[u];
  };
  const auto is_new = [n_old](uint32_t v) { return static_cast<int64_t>(v) >= n_old; };

  // Stage 1 on the changed lists.
  std::vector<uint32_t> changed;
  std::vector<int64_t> slot(n, -1);  // row -> index in changed
  std::vector<uint8_t> change(n);
  for (int64_t u = 0; u < n; ++u) {
    change[u] = change_of(u);
    if (change[u] == kKnnListSame) continue;
    slot[u] = static_cast<int64_t>(changed.size());
    changed.push_back(static_cast<uint32_t>(u));
  }
  const auto changed_count = static_cast<int64_t>(changed.size());
  HugePageVector<Edge> pruned(static_cast<size_t>(changed_count) * width, Edge{});
  std::vector<int> pruned_count(changed_count, 0);
  std::vector<std::vector<Edge>> candidates(workers);
  parallel_for(control, changed_count, kChunk, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t u = changed[i];
      pruned_count[i] = change[u] == kKnnListRebuilt
                            ? prune_list(data, distance, knn, u, params.alpha, candidates[worker], &pruned[i * width])
                            : prune_gained_list(data, distance, knn, old, u, params.alpha, candidates[worker],
                                                &pruned[i * width]);
    }
    control.add_done(end - begin);
  });
  control.throw_if_cancelled();

  // The new reverse edges, by target: every edge of a rebuilt list, the
  // edges to new rows of a gained one.
  const auto new_edge = [&](int64_t i, const Edge& e) { return change[changed[i]] == kKnnListRebuilt || is_new(e.id); };
  std::vector<int64_t> offsets(n + 1, 0);
  for (int64_t i = 0; i < changed_count; ++i) {
    for (int j = 0; j < pruned_count[i]; ++j) {
      const Edge& e = pruned[i * width + j];
      if (new_edge(i, e)) ++offsets[e.id + 1];
    }
  }
  for (int64_t v = 0; v < n; ++v) offsets[v + 1] += offsets[v];
  HugePageVector<Edge> incoming(offsets[n], Edge{});
  {
    std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
    for (int64_t i = 0; i < changed_count; ++i) {
      for (int j = 0; j < pruned_count[i]; ++j) {
        const Edge& e = pruned[i * width + j];
        if (new_edge(i, e)) incoming[fill[e.id]++] = Edge{e.dist, changed[i]};
      }
    }
  }

  // The nodes whose stage 2 input changed.
  std::vector<uint8_t> touched(n, 0);
  parallel_for(control, n, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t w = begin; w < end; ++w) {
      touched[w] = change[w] == kKnnListRebuilt || offsets[w + 1] > offsets[w];
      if (change[w] == kKnnListGainedNewRows) {
        const Edge* forward = &pruned[slot[w] * width];
        touched[w] |= std::any_of(forward, forward + pruned_count[slot[w]], [&](const Edge& e) { return is_new(e.id); });
      }
    }
  });

  // Stage 2 on the touched nodes.
  TsdgGraph graph(n, degree);
  std::vector<Stage2Scratch> stage2_scratch(workers);
  std::vector<std::vector<Edge>> forward_scratch(workers);
  parallel_for(control, n, kChunk, [&](int64_t begin, int64_t end, int worker) {
    Stage2Scratch& scratch = stage2_scratch[worker];
    std::vector<Edge>& forward = forward_scratch[worker];
    for (int64_t w = begin; w < end; ++w) {
      // The rows of the next stored list are read at random: their memory
      // latency overlaps this node's work.
      if (w + 1 < std::min(end, n_old) && touched[w + 1]) prefetch_list_rows(data, old.list(w + 1), degree);
      if (!touched[w]) {
        std::copy(old.list(w), old.list(w) + degree, graph.neighbors.data() + w * degree);
        std::copy(old.list_lambdas(w), old.list_lambdas(w) + degree, graph.lambdas.data() + w * degree);
        continue;
      }
      scratch.incoming.assign(incoming.begin() + offsets[w], incoming.begin() + offsets[w + 1]);
      if (change[w] == kKnnListRebuilt) {
        forward.assign(&pruned[slot[w] * width], &pruned[slot[w] * width] + pruned_count[slot[w]]);
        // The old list's edges from lists not rebuilt that were reverse
        // edges: for a node whose own list changed, an old edge to v is a
        // reverse edge only if v's k-NN list holds it.
        const uint32_t* list = w < n_old ? old.list(w) : nullptr;
        for (int j = 0; list != nullptr && j < degree; ++j) {
          const uint32_t v = list[j];
          if (v == kInvalidId || v >= n || change[v] == kKnnListRebuilt) continue;
          if (std::any_of(forward.begin(), forward.end(), [v](const Edge& e) { return e.id == v; })) {
            continue;  // a forward edge still
          }
          const uint32_t* back = knn.list(v);
          if (std::find(back, back + knn.k, static_cast<uint32_t>(w)) == back + knn.k) continue;
          scratch.incoming.push_back(Edge{distance(data.row(w), data.row(v), data.dim), v});
        }
      } else {
        // The stored list ranked again with the new rows that survived its
        // pruning and the new reverse edges.
        forward.clear();
        std::vector<Edge>& added = scratch.added;
        std::vector<uint8_t>& stored_lambdas = scratch.stored_lambdas;
        added.clear();
        stored_lambdas.clear();
        const uint32_t* list = old.list(w);
        for (int j = 0; j < degree; ++j) {
          if (list[j] == kInvalidId || list[j] >= n) continue;
          forward.push_back(Edge{distance(data.row(w), data.row(list[j]), data.dim), list[j]});
          stored_lambdas.push_back(old.list_lambdas(w)[j]);
        }
        const auto add = [&](const Edge& e) {
          const auto same = [&e](const Edge& f) { return f.id == e.id; };
          if (std::none_of(forward.begin(), forward.end(), same) && std::none_of(added.begin(), added.end(), same)) {
            added.push_back(e);
          }
        };
        if (change[w] == kKnnListGainedNewRows) {
          const Edge* kept = &pruned[slot[w] * width];
          for (int j = 0; j < pruned_count[slot[w]]; ++j) {
            if (is_new(kept[j].id)) add(kept[j]);
          }
        }
        for (const Edge& e : scratch.incoming) add(e);
        rerank_list(data, distance, params, forward, stored_lambdas.data(), added, scratch, graph, w);
        continue;
      }
      rank_list(data, distance, params, forward.data(), static_cast<int>(forward.size()), scratch, graph, w);
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
