#include "navigating_layer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "search.h"

namespace tsdg {

int64_t layer_node_count(int64_t nodes) {
  if (nodes < kLayerMinNodes) return 0;
  return (nodes + kLayerStride - 1) / kLayerStride;
}

Matrix gather_layer_rows(MatrixView data) {
  const int64_t count = layer_node_count(data.rows);
  Matrix rows(count, data.dim);
  for (int64_t i = 0; i < count; ++i) {
    const float* row = data.row(i * kLayerStride);
    std::copy(row, row + data.dim, rows.row(i));
  }
  return rows;
}

TsdgGraph build_navigating_layer(Backend& backend, MatrixView data, Metric metric,
                                 const DiversifyParams& diversify, uint64_t seed, const RunControl& control) {
  if (layer_node_count(data.rows) == 0) return TsdgGraph{};
  const Matrix rows = gather_layer_rows(data);
  KnnGraph knn;
  if (rows.rows <= kLayerExactNodes) {
    knn = exact_knn_graph_of(backend, rows.view(), metric, kLayerKnn, control);
  } else {
    GnndParams gnnd;
    gnnd.k = kLayerKnn;
    gnnd.samples = default_gnnd_samples(kLayerKnn, std::string(backend.name()) == "cpu", rows.rows);
    gnnd.seed = seed;
    knn = backend.build_knn_graph(rows.view(), metric, gnnd, control);
  }
  return backend.diversify(rows.view(), metric, knn, diversify, control);
}

NavigatingLayer::NavigatingLayer(MatrixView layer_rows, GraphView layer, Metric metric)
    : rows_(layer_rows.rows, layer_rows.dim), graph_(layer.nodes, layer.degree) {
  if (layer_rows.rows != layer.nodes) {
    throw Error(Status::InvalidArgument, "navigating layer: row count and node count differ");
  }
  if (layer.nodes * kLayerStride >= static_cast<int64_t>(kInvalidId)) {
    throw Error(Status::InvalidArgument, "navigating layer: too many nodes for 32-bit ids");
  }
  if (!rows_.values.empty()) std::memcpy(rows_.values.data(), layer_rows.data, rows_.values.size() * sizeof(float));
  const size_t edges = static_cast<size_t>(layer.nodes) * layer.degree;
  for (size_t e = 0; e < edges; ++e) {
    const uint32_t id = layer.neighbors[e];
    if (id != kInvalidId && id >= static_cast<uint64_t>(layer.nodes)) {
      throw Error(Status::InvalidArgument, "navigating layer: a list holds an id past its nodes");
    }
  }
  std::copy(layer.neighbors, layer.neighbors + edges, graph_.neighbors.begin());
  std::copy(layer.lambdas, layer.lambdas + edges, graph_.lambdas.begin());
  index_ = std::make_unique<CpuSearchIndex>(rows_.view(), GraphView::of(graph_), metric);
}

NavigatingLayer::~NavigatingLayer() = default;

int64_t NavigatingLayer::entries(MatrixView queries, int ef, uint32_t* ids, float* dists, const RunControl& control) {
  SearchParams params;
  params.ef = width(ef);
  params.k = params.ef;
  const int64_t computed = index_->search_counted(queries, params, ids, dists, control);
  const size_t count = static_cast<size_t>(queries.rows) * params.k;
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] != kInvalidId) ids[i] = static_cast<uint32_t>(ids[i] * kLayerStride);
  }
  return computed;
}

int64_t NavigatingLayer::distance_computations() const { return index_->distance_computations(); }

size_t NavigatingLayer::memory_bytes() const {
  return sizeof(*this) + rows_.values.size() * sizeof(float) + graph_.neighbors.size() * sizeof(uint32_t) +
         graph_.lambdas.size() + index_->memory_bytes();
}

}  // namespace tsdg
