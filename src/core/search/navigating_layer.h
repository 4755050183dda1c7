// The navigating layer: a graph over every kLayerStride-th node of an index,
// searched before the index's own graph to give each query its entries, as
// the upper layers of HNSW (Malkov, Yashunin, 2018) give theirs. A k-NN
// graph that has converged links each cluster of the data only to itself;
// a search that starts outside a query's cluster then stays outside. A
// fixed navigating set reaches every cluster only once it holds several
// nodes of each, and scored whole such a set costs most of a search. The
// layer holds that many nodes, and its own graph, linked among the layer's
// nodes alone, crosses between clusters in a few steps, so its walk reaches
// the query's cluster at a fraction of that cost (docs/design.md, the
// navigating set).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend.h"
#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

class CpuSearchIndex;

// Every kLayerStride-th node (node i * kLayerStride is layer node i): dense
// enough to hold several nodes of clusters of a few hundred rows.
inline constexpr int64_t kLayerStride = 16;
// The k of the k-NN lists among the layer's nodes that its graph is
// diversified from.
inline constexpr int kLayerKnn = 32;
// A search of ef takes ef + kLayerExtraWidth entries from the layer's walk,
// which walks at that width: a walk as narrow as a search of ef 10 misses
// clusters that a walk four times wider reaches, while a wide search needs
// little more than its own width to reach them. At most kLayerMaxWidth:
// from that many entries a wide search finds its clusters, and a wider
// walk of the layer would cost more than the navigating set scored whole.
inline constexpr int kLayerExtraWidth = 32;
inline constexpr int kLayerMaxWidth = 256;
// Graphs of fewer nodes have no layer: their navigating set (every 256th
// node and the selected entry points) holds a node of every region already.
inline constexpr int64_t kLayerMinNodes = 16384;
// Layers of more nodes take GNND's k-NN lists instead of the exact ones,
// whose cost grows with the square of the layer.
inline constexpr int64_t kLayerExactNodes = 65536;

// The layer nodes of a graph of nodes nodes: 0 when it has no layer.
int64_t layer_node_count(int64_t nodes);

// The layer's graph for data (the index's rows): the diversified k-NN graph
// of the rows of nodes 0, kLayerStride, 2 * kLayerStride, ..., with ids
// local to the layer, diversified with the index's parameters. Exact k-NN
// lists up to kLayerExactNodes, GNND's past them (lists of kLayerKnn, the
// backend's default samples, seed). Empty when the graph has no layer.
TsdgGraph build_navigating_layer(Backend& backend, MatrixView data, Metric metric,
                                 const DiversifyParams& diversify, uint64_t seed, const RunControl& control);

// The rows of the layer's nodes gathered from data, in layer order.
Matrix gather_layer_rows(MatrixView data);

// A layer made searchable: its rows and lists are copied, so the caller's
// arrays may go. Searched from its own navigating set, on the CPU.
// Thread-safe.
class NavigatingLayer {
 public:
  NavigatingLayer(MatrixView layer_rows, GraphView layer, Metric metric);
  ~NavigatingLayer();
  NavigatingLayer(const NavigatingLayer&) = delete;
  NavigatingLayer& operator=(const NavigatingLayer&) = delete;

  // The entries a search of ef takes from the layer.
  static int width(int ef) { return std::min(ef + kLayerExtraWidth, kLayerMaxWidth); }
  int64_t nodes() const { return graph_.nodes; }
  // Its copies of the layer's rows and lists, as long as it lives.
  MatrixView rows() const { return rows_.view(); }
  GraphView graph() const { return GraphView::of(graph_); }

  // For each query, width(ef) entries into the index's graph: node ids (layer
  // node * kLayerStride) and their distances, ascending, padded with
  // kInvalidId / +inf. Queries of cosine need not be normalized. Returns the
  // distances these walks computed, the layer's navigating set included.
  int64_t entries(MatrixView queries, int ef, uint32_t* ids, float* dists, const RunControl& control);
  // Distance computations of its walks so far.
  int64_t distance_computations() const;
  size_t memory_bytes() const;

 private:
  Matrix rows_;
  TsdgGraph graph_;
  std::unique_ptr<CpuSearchIndex> index_;
};

}  // namespace tsdg
