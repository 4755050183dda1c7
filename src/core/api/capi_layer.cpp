// The C interface of the navigating layer (navigating_layer.h): a resident
// index's layer, and a layer searched on its own by the scans.
#include <memory>

#include "capi_internal.h"
#include "navigating_layer.h"
#include "tsdg_capi.h"

using namespace tsdg::detail;

struct TsdgLayerSearch {
  std::unique_ptr<tsdg::NavigatingLayer> layer;
  int dim = 0;
};

namespace {

tsdg::GraphView layer_view(const uint32_t* ids, const uint8_t* lambdas, int64_t layer_nodes, int degree) {
  require(layer_nodes >= 0, "layer_nodes must not be negative");
  require(layer_nodes == 0 || degree > 0, "degree must be positive");
  require(layer_nodes == 0 || (ids != nullptr && lambdas != nullptr), "ids and lambdas must not be NULL");
  return tsdg::GraphView{ids, lambdas, layer_nodes, degree};
}

}  // namespace

extern "C" {

int64_t tsdg_layer_node_count(int64_t n) { return tsdg::layer_node_count(n); }

int tsdg_layer_entry_count(int ef) { return tsdg::NavigatingLayer::width(ef); }

TsdgStatus tsdg_index_set_layer(TsdgResidentIndex* index, const uint32_t* ids, const uint8_t* lambdas,
                                int64_t layer_nodes, int degree, TsdgError* error) {
  return guarded(error, [&] {
    require(index != nullptr, "index must not be NULL");
    index->index->set_layer(layer_view(ids, lambdas, layer_nodes, degree));
  });
}

TsdgLayerSearch* tsdg_layer_search_create(const float* layer_rows, int64_t layer_nodes, int dim,
                                          TsdgMetric metric, const uint32_t* ids, const uint8_t* lambdas,
                                          int degree, TsdgError* error) {
  try {
    validate_rows(layer_rows, layer_nodes, dim);
    require(layer_nodes > 0, "layer_nodes must be positive");
    auto search = std::make_unique<TsdgLayerSearch>();
    search->dim = dim;
    search->layer = std::make_unique<tsdg::NavigatingLayer>(tsdg::MatrixView{layer_rows, layer_nodes, dim},
                                                            layer_view(ids, lambdas, layer_nodes, degree),
                                                            to_metric(metric));
    set_message(error, "");
    return search.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

TsdgStatus tsdg_layer_search_entries(TsdgLayerSearch* layer, const float* query, int ef, uint32_t* ids,
                                     float* dists, int64_t* distance_count, TsdgError* error) {
  return guarded(error, [&] {
    require(layer != nullptr, "layer must not be NULL");
    require(query != nullptr && ids != nullptr && dists != nullptr && distance_count != nullptr,
            "query, ids, dists and distance_count must not be NULL");
    require(ef > 0, "ef must be positive");
    *distance_count =
        layer->layer->entries(tsdg::MatrixView{query, 1, layer->dim}, ef, ids, dists, tsdg::RunControl{});
  });
}

size_t tsdg_layer_search_memory_bytes(const TsdgLayerSearch* layer) {
  return layer == nullptr ? 0 : sizeof(*layer) + layer->layer->memory_bytes();
}

void tsdg_layer_search_free(TsdgLayerSearch* layer) { delete layer; }

}  // extern "C"
