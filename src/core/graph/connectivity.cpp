#include "connectivity.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>
#include <vector>

#include "distance.h"
#include "search.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// Borůvka halves the component count each round; the cap only guards against
// a round that dropped as many edges as it added.
constexpr int kMaxRounds = 64;
// Components each component links to in the first round.
constexpr int kFirstRoundLinks = 4;
// Components compared pairwise for their nearest neighbor; past this many, a
// component is compared with an evenly spaced subset.
constexpr int64_t kMaxCompared = 2048;
// Component means are computed while they fit in this many doubles.
constexpr int64_t kMaxMeanValues = int64_t{1} << 24;
// Members a component's mean and representative are taken from at most: a
// merge that leaves a few nodes apart from a giant component then reads a
// few thousand rows, not every row.
constexpr int64_t kMaxSampledMembers = 4096;
// The edges of each list united before the roots are written down
// (component_ids).
constexpr int kSpanningEdges = 2;

class DisjointSets {
 public:
  explicit DisjointSets(int64_t count) : parent_(count) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int64_t find(int64_t x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];
      x = parent_[x];
    }
    return x;
  }
  bool unite(int64_t a, int64_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return false;
    parent_[std::max(a, b)] = std::min(a, b);
    return true;
  }

 private:
  std::vector<int64_t> parent_;
};

// Each component's member nearest its mean, both taken over at most
// kMaxSampledMembers of its members (evenly spaced in node order), or its
// first member when the means would not fit in memory. The sums are split
// by dimensions and the search for the nearest member by members among the
// threads, each sum added in node order and ties going to the smaller node,
// as one thread would.
std::vector<uint32_t> representatives(MatrixView data, const std::vector<int64_t>& component,
                                      int64_t count, DistanceFn l2, const RunControl& control) {
  std::vector<uint32_t> chosen(count, kInvalidId);
  for (int64_t u = static_cast<int64_t>(component.size()) - 1; u >= 0; --u) {
    chosen[component[u]] = static_cast<uint32_t>(u);
  }
  if (count * data.dim > kMaxMeanValues) return chosen;
  std::vector<int64_t> sizes(count, 0);
  for (int64_t u = 0; u < data.rows; ++u) ++sizes[component[u]];
  std::vector<uint32_t> sampled;
  std::vector<int64_t> sampled_sizes(count, 0);
  {
    std::vector<int64_t> seen(count, 0);
    for (int64_t u = 0; u < data.rows; ++u) {
      const int64_t c = component[u];
      const int64_t stride = (sizes[c] + kMaxSampledMembers - 1) / kMaxSampledMembers;
      if (seen[c]++ % stride != 0) continue;
      sampled.push_back(static_cast<uint32_t>(u));
      ++sampled_sizes[c];
    }
  }
  const auto members = static_cast<int64_t>(sampled.size());
  std::vector<double> sums(static_cast<size_t>(count) * data.dim, 0.0);
  constexpr int kDimsPerTask = 16;  // a cache line of floats
  parallel_for(control, (data.dim + kDimsPerTask - 1) / kDimsPerTask, 1, [&](int64_t begin, int64_t end, int) {
    const int first = static_cast<int>(begin) * kDimsPerTask;
    const int last = std::min(data.dim, static_cast<int>(end) * kDimsPerTask);
    for (const uint32_t u : sampled) {
      double* sum = &sums[component[u] * data.dim];
      const float* row = data.row(u);
      for (int j = first; j < last; ++j) sum[j] += row[j];
    }
  });
  std::vector<float> mean(static_cast<size_t>(count) * data.dim);
  for (int64_t c = 0; c < count; ++c) {
    for (int j = 0; j < data.dim; ++j) {
      mean[c * data.dim + j] = static_cast<float>(sums[c * data.dim + j] / sampled_sizes[c]);
    }
  }
  const int workers = worker_count(control);
  std::vector<float> best(static_cast<size_t>(workers) * count, std::numeric_limits<float>::infinity());
  std::vector<uint32_t> best_node(static_cast<size_t>(workers) * count, kInvalidId);
  parallel_for(control, members, 1 << 14, [&](int64_t begin, int64_t end, int worker) {
    float* mine = &best[static_cast<size_t>(worker) * count];
    uint32_t* mine_node = &best_node[static_cast<size_t>(worker) * count];
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t u = sampled[i];
      const int64_t c = component[u];
      const float d = l2(&mean[c * data.dim], data.row(u), data.dim);
      if (d < mine[c] || (d == mine[c] && u < mine_node[c])) {
        mine[c] = d;
        mine_node[c] = u;
      }
    }
  });
  for (int64_t c = 0; c < count; ++c) {
    float d = std::numeric_limits<float>::infinity();
    for (int w = 0; w < workers; ++w) {
      const size_t at = static_cast<size_t>(w) * count + c;
      if (best_node[at] != kInvalidId && (best[at] < d || (best[at] == d && best_node[at] < chosen[c]))) {
        d = best[at];
        chosen[c] = best_node[at];
      }
    }
  }
  return chosen;
}

// Inserts from -> to with λ = 0 at the end of the λ = 0 prefix.
void add_bridge(GraphSpan graph, uint32_t from, uint32_t to) {
  const int degree = graph.degree;
  uint32_t* ids = graph.list(from);
  uint8_t* lambdas = graph.list_lambdas(from);
  int count = 0;
  while (count < degree && ids[count] != kInvalidId) ++count;
  const auto present = std::find(ids, ids + count, to) - ids;
  if (present < count) {  // already linked: move it to λ = 0
    std::copy(ids + present + 1, ids + count, ids + present);
    std::copy(lambdas + present + 1, lambdas + count, lambdas + present);
    --count;
  }
  int at = 0;
  while (at < count && lambdas[at] == 0) ++at;
  if (count == degree) --count;  // the last, most occluded edge gives way
  at = std::min(at, degree - 1);
  std::copy_backward(ids + at, ids + count, ids + count + 1);
  std::copy_backward(lambdas + at, lambdas + count, lambdas + count + 1);
  ids[at] = to;
  lambdas[at] = 0;
}

}  // namespace

std::vector<int64_t> component_ids_of_roots(const std::vector<uint32_t>& root_of, int64_t* count) {
  std::vector<int64_t> ids(root_of.size());
  *count = 0;
  for (size_t u = 0; u < root_of.size(); ++u) ids[u] = root_of[u] == u ? (*count)++ : ids[root_of[u]];
  return ids;
}

// The threads unite the lists' edges in one forest in which a root is only ever
// linked, by compare-and-swap, under a smaller root: every set ends rooted at
// its smallest node whatever the threads' order, so the ids do not depend on
// the thread count. The first kSpanningEdges of each list join most nodes;
// then every node's root is written down, and an edge of the rest is united
// only where its ends' roots differ there: on 2M nodes of degree 32, nearly
// every edge is then one load instead of two walks up the forest.
std::vector<int64_t> HostGraphScan::component_ids(GraphSpan graph, int64_t* count, const RunControl& control) {
  const int64_t n = graph.nodes;
  std::vector<std::atomic<uint32_t>> parent(n);
  parallel_for(control, n, 1 << 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t u = begin; u < end; ++u) parent[u].store(static_cast<uint32_t>(u), std::memory_order_relaxed);
  });
  const auto find = [&](uint32_t x) {
    for (;;) {
      uint32_t p = parent[x].load(std::memory_order_acquire);
      if (p == x) return x;
      const uint32_t grandparent = parent[p].load(std::memory_order_acquire);
      if (grandparent != p) parent[x].compare_exchange_weak(p, grandparent, std::memory_order_acq_rel);
      x = grandparent;
    }
  };
  const auto unite = [&](uint32_t a, uint32_t b) {
    for (;;) {
      a = find(a);
      b = find(b);
      if (a == b) return;
      if (a < b) std::swap(a, b);
      uint32_t expected = a;
      if (parent[a].compare_exchange_strong(expected, b, std::memory_order_acq_rel)) return;
    }
  };
  const auto unite_edges = [&](int first, int end_edge, const std::vector<uint32_t>* root_of) {
    parallel_for(control, n, 4096, [&](int64_t begin, int64_t end, int) {
      for (int64_t u = begin; u < end; ++u) {
        const uint32_t* list = graph.list(u);
        const uint32_t own_root = root_of != nullptr ? (*root_of)[u] : kInvalidId;
        for (int j = 0; j < end_edge && list[j] != kInvalidId; ++j) {
          // a list that ends before first has nothing past it
          if (j < first) continue;
          // roots written down before these unions: equal ones are one set still
          if (root_of != nullptr && (*root_of)[list[j]] == own_root) continue;
          unite(static_cast<uint32_t>(u), list[j]);
        }
      }
    });
  };
  std::vector<uint32_t> root_of(n);
  // each node's root into root_of; whether any is not node 0
  const auto write_roots = [&] {
    std::atomic<bool> apart{false};
    parallel_for(control, n, 1 << 14, [&](int64_t begin, int64_t end, int) {
      bool seen_apart = false;
      for (int64_t u = begin; u < end; ++u) {
        root_of[u] = find(static_cast<uint32_t>(u));
        seen_apart = seen_apart || root_of[u] != 0;
      }
      if (seen_apart) apart.store(true, std::memory_order_relaxed);
    });
    return apart.load(std::memory_order_relaxed);
  };
  const int spanning = std::min(graph.degree, kSpanningEdges);
  unite_edges(0, spanning, nullptr);
  // every node under node 0: the rest of the edges cannot join anything
  if (write_roots() && spanning < graph.degree) {
    unite_edges(spanning, graph.degree, &root_of);
    write_roots();
  }
  return component_ids_of_roots(root_of, count);
}

std::vector<uint32_t> HostGraphScan::unpointed_nodes(GraphSpan graph, const RunControl& control) {
  std::vector<std::atomic<uint8_t>> pointed_to(graph.nodes);
  parallel_for(control, graph.nodes, 1 << 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t v = begin; v < end; ++v) pointed_to[v].store(0, std::memory_order_relaxed);
  });
  parallel_for(control, graph.nodes, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t u = begin; u < end; ++u) {
      const uint32_t* list = graph.list(u);
      for (int j = 0; j < graph.degree && list[j] != kInvalidId; ++j) {
        pointed_to[list[j]].store(1, std::memory_order_relaxed);
      }
    }
  });
  std::vector<uint32_t> unpointed;
  for (int64_t v = 0; v < graph.nodes; ++v) {
    if (pointed_to[v].load(std::memory_order_relaxed) == 0) unpointed.push_back(static_cast<uint32_t>(v));
  }
  return unpointed;
}

int64_t connect_components(MatrixView data, GraphSpan graph, const RunControl& control, uint8_t* relinked,
                           GraphScan* scan) {
  if (graph.nodes <= 1 || graph.degree <= 0) return 0;
  HostGraphScan host_scan;
  if (scan == nullptr) scan = &host_scan;
  // Bridges follow the geometry of the rows, so L2 for every metric.
  const DistanceFn l2 = distance_kernels().l2_squared;
  int64_t added = 0;
  std::vector<uint32_t> changed;
  const auto bridge = [&](uint32_t from, uint32_t to) {
    add_bridge(graph, from, to);
    changed.push_back(from);
    if (relinked != nullptr) relinked[from] = 1;
    ++added;
  };
  // A node no list points to cannot be found at all: its nearest neighbor
  // links back to it.
  for (const uint32_t v : scan->unpointed_nodes(graph, control)) {
    const uint32_t nearest = graph.list(v)[0];
    if (nearest != kInvalidId) bridge(nearest, v);
  }
  for (int round = 0; round < kMaxRounds; ++round) {
    control.throw_if_cancelled();
    // a full list gives up an edge for a bridge, which can split a component
    scan->lists_changed(graph, changed);
    changed.clear();
    int64_t count = 0;
    const std::vector<int64_t> component = scan->component_ids(graph, &count, control);
    if (count <= 1) break;
    const std::vector<uint32_t> rep = representatives(data, component, count, l2, control);
    const int64_t stride = std::max<int64_t>(1, count / kMaxCompared);
    const GraphView view = GraphView::of(graph);
    // The first round links each component to several nearest ones, so a
    // search can walk from cluster to cluster towards its query; later rounds
    // only join what is still apart.
    const int links = round == 0 ? kFirstRoundLinks : 1;
    DisjointSets joined(count);
    std::vector<std::pair<float, int64_t>> nearest;
    for (int64_t c = 0; c < count; ++c) {
      nearest.clear();
      for (int64_t d = c % stride; d < count; d += stride) {
        if (d != c) nearest.emplace_back(l2(data.row(rep[c]), data.row(rep[d]), data.dim), d);
      }
      const size_t kept = std::min<size_t>(links, nearest.size());
      std::partial_sort(nearest.begin(), nearest.begin() + kept, nearest.end());
      for (size_t i = 0; i < kept; ++i) {
        const int64_t d = nearest[i].second;
        if (!joined.unite(c, d) && links == 1) continue;
        const uint32_t there = greedy_descent(data, view, data.row(rep[c]), rep[d], l2);
        const uint32_t here = greedy_descent(data, view, data.row(there), rep[c], l2);
        // A bridge added earlier in this round can lead both descents to one node.
        if (here == there) continue;
        bridge(here, there);
        bridge(there, here);
      }
    }
  }
  return added;
}

}  // namespace tsdg
