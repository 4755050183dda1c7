// The GPU SearchIndex: the rows and the TSDG graph resident on the device;
// each batch of queries goes to the small-batch or the large-batch kernel
// (Wang, Wang, Zhao, 2022, section 4) by the paper's threshold (a * SMs + b) / d, unless
// SearchParams::gpu_kernel forces one.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "backend.h"
#include "device_memory.h"
#include "gpu_algorithms.h"
#include "half_rows.h"
#include "search.h"

namespace tsdg::cuda {

struct SearchLaunch;

class CudaSearchIndex final : public SearchIndex {
 public:
  // data and graph must outlive it: the entry points are picked on the host.
  // The first resident_rows rows are copied from resident (rows of this
  // device) instead of uploaded; rows, where it holds all of data's rows on
  // this device, is taken over instead.
  CudaSearchIndex(int device, MatrixView data, GraphView graph, Metric metric,
                  const float* resident = nullptr, int64_t resident_rows = 0, DeviceBuffer<float> rows = {});

  void search(MatrixView queries, const SearchParams& params, uint32_t* ids, float* dists,
              const RunControl& control) override;
  size_t memory_bytes() const override;
  int64_t node_count() const override { return nodes_; }
  const float* device_rows() const override { return data_.data(); }
  // Copies the nodes' lists of the host graph it was made from up again
  // (the layer's lists stay as they are).
  void lists_changed(const std::vector<uint32_t>& nodes) override;
  // The layer's lists are copied; its rows are gathered from the device's
  // rows, and on the host for its navigating set.
  void set_layer(GraphView layer) override;
  std::shared_ptr<NavigatingLayer> navigating_layer() const override;
  std::vector<uint32_t> entry_points(const SearchParams& params,
                                     const RunControl& control) override;
  std::vector<uint32_t> unreached_rows(int64_t first, int64_t end, const SearchParams& params,
                                       const RunControl& control) override;
  // The payload goes to the device too, where the results are mapped to it.
  void set_payload(const void* values, int value_size, const uint8_t* flags, uint8_t skip_bits,
                   const void* missing) override;
  void search_payload(MatrixView queries, const SearchParams& params, int k_out, void* values,
                      float* dists, const RunControl& control) override;

  // Batches smaller than this go to the small-batch kernel.
  int64_t small_batch_limit() const;
  float nn1_bound() const override { return nn1_bound_; }

 private:
  // What the navigating layer holds, on the device and the host.
  size_t layer_bytes() const;
  // Throws InvalidArgument when an uploaded neighbor id is past the last node.
  void check_neighbor_ids(cudaStream_t stream);
  // entry_width: the layer's entries per query (0 without the layer).
  void reserve_batch(int64_t rows, int k, int walk_k, int entry_width);
  // Searches the queries in launches of at most kMaxRowsPerLaunch rows
  // (fewer through the layer, whose entries they hold);
  // after each, deliver(first, rows, k) takes the launch's results from
  // result_ids_ / result_dists_ (on the stream). False where the call is not
  // for the graph kernels (the exact scan), which it leaves to the caller.
  // own_row_first >= 0: the queries are the rows from it on, read from the
  // device's copy (queries gives their count), and with stops_at_own_row
  // each search ends once it finds its own row (SearchLaunch).
  bool search_launches(MatrixView queries, const SearchParams& params, const RunControl& control,
                       const std::function<void(int64_t, int64_t, int)>& deliver, int64_t own_row_first = -1,
                       bool stops_at_own_row = false);
  // The CPU search's navigating set for params (navigating_set), on the
  // device (computed on control's pool, when it has one).
  void prepare_entries(const SearchParams& params, const RunControl& control);
  // Where the navigating set holds more entries than launch's ef, each
  // query's best entries by an exact search of their rows (only those can be
  // in a search's first ef best), into launch.entry_picks.
  void pick_entries(SearchLaunch& launch);
  // Called on the layer's index: the walks of rows queries (device, on
  // stream, which it waits for; the small-batch kernel for fewer than
  // small_batch_limit(), else the large-batch one) at ef = k = width from its
  // navigating set with the default search parameters, as the CPU's
  // NavigatingLayer walks, into ids / dists (device, rows * width, layer ids
  // and the walks' half-precision distances); done when it returns.
  void walk_for_entries(const float* queries, int64_t rows, int width, cudaStream_t stream, uint32_t* ids,
                        float* dists);

  int device_;
  MatrixView host_data_;
  GraphView host_graph_;
  Metric metric_;
  int64_t nodes_;
  int dim_;
  int degree_;
  int sm_count_ = 0;
  float nn1_bound_ = 0.0f;
  std::unique_ptr<DeviceContext> ctx_;
  DeviceBuffer<float> data_;
  HalfRowsCopy half_rows_;     // what the walks read
  DeviceBuffer<float> norms_;  // squared norms of the rows, for the exact scan
  DeviceBuffer<uint32_t> neighbors_;
  DeviceBuffer<uint8_t> lambdas_;
  DeviceBuffer<uint32_t> entries_;
  // The entries' rows (and squared norms for L2) side by side, so that each
  // batch picks its queries' best entries with one exact search (a matrix
  // product) instead of every query reading every entry's row.
  DeviceBuffer<float> entry_rows_;
  DeviceBuffer<float> entry_norms_;
  ExactKnnScratch entry_scratch_;
  DeviceBuffer<uint32_t> entry_pick_ids_;
  DeviceBuffer<float> entry_pick_dists_;
  int entry_count_ = 0;
  NavigatingSetCache navigating_;
  // Per-batch buffers, grown on demand.
  DeviceBuffer<float> queries_;
  DeviceBuffer<uint32_t> walk_ids_;  // the walks' candidates, before the exact rerank
  DeviceBuffer<float> walk_dists_;
  DeviceBuffer<uint32_t> result_ids_;
  DeviceBuffer<float> result_dists_;
  PinnedBuffer<uint32_t> pinned_ids_;
  PinnedBuffer<float> pinned_dists_;
  DeviceBuffer<unsigned char> payload_;        // nodes * payload_size_
  DeviceBuffer<uint8_t> payload_flags_device_;  // nodes, empty when no node is skipped
  DeviceBuffer<unsigned char> payload_out_;    // rows * k_out * payload_size_ of a launch
  DeviceBuffer<float> payload_dists_;          // rows * k_out of a launch
  // The navigating layer (navigating_layer.h), none where layer_ is null:
  // searchable on the host (for the CPU's walks of the checks), and an index
  // of it on this device, viewing the host copy's rows (its navigating set
  // is picked from them) and lists, that the searches walk first. Declared
  // in this order, the index goes first.
  std::shared_ptr<NavigatingLayer> host_layer_;
  std::unique_ptr<CudaSearchIndex> layer_;
  DeviceBuffer<uint32_t> layer_entry_ids_;  // a launch's entries from the layer, rows * width
  DeviceBuffer<float> layer_entry_dists_;
  mutable std::mutex mutex_;  // one batch at a time on the stream and buffers
};

}  // namespace tsdg::cuda
