// The Backend interface: every heavy step of the index, implemented by the CPU
// (cpu_backend.cpp) and by the GPU (cuda/). Backends throw tsdg::Error.
#pragma once

#include <memory>
#include <vector>

#include "merge.h"
#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

class NavigatingLayer;

// A graph made searchable by a backend: the CPU keeps pointers to the caller's
// arrays, the GPU keeps device copies. Owned by the caller.
class SearchIndex {
 public:
  virtual ~SearchIndex() = default;
  // For each query row: k results (ids into the indexed set, distances),
  // ascending, padded with kInvalidId / +inf. ids and dists hold rows * k.
  virtual void search(MatrixView queries, const SearchParams& params, uint32_t* ids,
                      float* dists, const RunControl& control) = 0;
  virtual size_t memory_bytes() const = 0;
  // The nodes of the graph searched.
  virtual int64_t node_count() const = 0;
  // d_nn1+ of its graph (graph_nn1_bound), for the slack stop rule.
  virtual float nn1_bound() const = 0;
  // The navigating set its searches start from for params' entry_samples and
  // seed (select_entry_points), computed on control's pool at the first call.
  virtual std::vector<uint32_t> entry_points(const SearchParams& params,
                                             const RunControl& control) = 0;
  // The rows [first, end) of the indexed set that a search of this index for
  // their own vectors at params (ef, lambda_limit, entry_samples, seed) does
  // not reach, ascending: on the CPU its walk (tsdg::unreached_rows), which
  // the index pages' scans take too; on the GPU the rows either kernel
  // misses (with params.gpu_kernel 1 or 2, that kernel).
  virtual std::vector<uint32_t> unreached_rows(int64_t first, int64_t end,
                                               const SearchParams& params,
                                               const RunControl& control) = 0;
  // The indexed rows (node_count() * dim) where they are on a GPU, else null.
  virtual const float* device_rows() const { return nullptr; }
  // The lists of nodes changed in the host graph the index was made from:
  // a GPU index copies them to the device; the CPU index reads the host
  // arrays, which it only views. Either picks its navigating set again at
  // its next search, on the changed lists, as an index made from them would.
  virtual void lists_changed(const std::vector<uint32_t>& nodes) { (void)nodes; }
  // The index's navigating layer (navigating_layer.h): the lists of its
  // nodes, ids local to the layer, layer.nodes == layer_node_count of the
  // index's nodes; copied. Its searches then start from the layer's walk
  // instead of the navigating set scored whole; an empty layer (0 nodes)
  // goes back to that. Its checks of unreached rows walk from the layer
  // too; entry_points stays the navigating set.
  virtual void set_layer(GraphView layer) = 0;
  // The layer its searches start from, searchable on the host, for the
  // checks that walk as its searches do; null when it has none.
  virtual std::shared_ptr<NavigatingLayer> navigating_layer() const = 0;

  // Per-node values that searches can answer with instead of node ids (for
  // PostgreSQL each row's heap TID): value_size bytes per node (at most
  // kMaxPayloadSize). A node whose flags share a bit with skip_bits is left
  // out of answers (flags may be null: none is). missing is written where a
  // query has fewer results than asked for. All three are copied.
  virtual void set_payload(const void* values, int value_size, const uint8_t* flags,
                           uint8_t skip_bits, const void* missing);
  // search() for params.k candidates per query, answered with the values of
  // the first k_out that are not skipped (values: rows * k_out * value_size
  // bytes) and their distances (rows * k_out, +inf where missing). By
  // default the ids are mapped on the host; the GPU maps them on the device.
  virtual void search_payload(MatrixView queries, const SearchParams& params, int k_out,
                              void* values, float* dists, const RunControl& control);

  static constexpr int kMaxPayloadSize = 16;

 protected:
  // the host copy set_payload keeps
  std::vector<unsigned char> payload_values_;
  std::vector<uint8_t> payload_flags_;
  unsigned char payload_missing_[kMaxPayloadSize] = {};
  int payload_size_ = 0;
  uint8_t payload_skip_bits_ = 0;
};

// Rows a backend keeps and searches exactly (brute force), appendable: the
// pending rows of an index between merges, searched for whole batches of
// queries. The CPU keeps a host copy; the GPU keeps the rows and their
// squared norms in device memory. Owned by the caller; the backend must
// outlive it.
class ExactSet {
 public:
  virtual ~ExactSet() = default;
  // Copies rows (of the set's dimension) after those held; a row's id is its
  // position in append order.
  virtual void append(MatrixView rows, const RunControl& control) = 0;
  // Drops every row and keeps the memory for the next appends.
  virtual void clear() = 0;
  virtual int64_t size() const = 0;
  virtual size_t memory_bytes() const = 0;
  // For each query row the k nearest rows held, as Backend::exact_knn
  // answers (ascending, padded with kInvalidId / +inf).
  virtual void search(MatrixView queries, int k, uint32_t* ids, float* dists,
                      const RunControl& control) = 0;

 protected:
  // Throws Error(InvalidArgument) unless rows have dim values each and the
  // set's size after them leaves its ids below kInvalidId.
  static void check_append(MatrixView rows, int dim, int64_t size);
};

// Rows a backend keeps where its searches read them (the device's memory),
// handed from a build to the search index of its check so that they are not
// copied there a second time.
class DeviceRows {
 public:
  virtual ~DeviceRows() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Whether every step of this backend computes metric's distances. By
  // default the metrics a matrix product gives (L2, inner product, cosine),
  // which is how a GPU computes distances in bulk; L1 has no such form, so a
  // backend takes it only where it says so. The C API refuses a call for a
  // metric its backend does not compute, and the caller goes to the CPU.
  virtual bool computes(Metric metric) const { return metric != Metric::L1; }

  // Exact k nearest rows of base for each query row.
  virtual void exact_knn(MatrixView base, MatrixView queries, Metric metric, int k,
                         uint32_t* ids, float* dists, const RunControl& control) = 0;

  // k-NN graph of data by GNND (self excluded).
  virtual KnnGraph build_knn_graph(MatrixView data, Metric metric, const GnndParams& params,
                                   const RunControl& control) = 0;

  // GGM: rows [0, split) have graph first, rows [split, rows) have graph second
  // (its ids local to that side). Returns the k-NN graph of all rows.
  virtual KnnGraph merge_knn_graphs(MatrixView data, int64_t split, const KnnGraph& first,
                                    const KnnGraph& second, Metric metric,
                                    const GnndParams& params, const RunControl& control) = 0;

  // A merge's computation (merge.h): by default merge_graph_incremental on
  // the CPU threads; the GPU keeps the rows and lists on the device through
  // GGM and diversification.
  virtual void merge_graph(const MergeInput& in, const MergeOutput& out, Metric metric,
                           const GnndParams& params, const DiversifyParams& diversify,
                           const RunControl& control);

  // The distance from each row of data to each id of its list (ids: rows * k,
  // each < rows or kInvalidId, which gets +inf), into dists: a merge's old
  // k-NN lists come from an index that keeps only their ids.
  virtual void list_distances(MatrixView data, Metric metric, const uint32_t* ids, int k,
                              float* dists, const RunControl& control);

  // Both TSDG stages on a k-NN graph.
  virtual TsdgGraph diversify(MatrixView data, Metric metric, const KnnGraph& knn,
                              const DiversifyParams& params, const RunControl& control) = 0;

  // An index's build: GNND, then both TSDG stages (control.set_phase says
  // which runs). The k-NN lists go to knn_ids / knn_dists (rows * gnnd.k,
  // each nullable). By default the two calls above; the GPU keeps the rows
  // and the lists on the device between them.
  // rows_left, where not null, receives the rows as the backend's
  // searches read them, for the search index of the build's check
  // (make_search_index_over); the CPU leaves it empty.
  virtual TsdgGraph build_tsdg_graph(MatrixView data, Metric metric, const GnndParams& gnnd,
                                     const DiversifyParams& diversify, uint32_t* knn_ids,
                                     float* knn_dists, const RunControl& control,
                                     std::unique_ptr<DeviceRows>* rows_left = nullptr);
  // The device memory that build_tsdg_graph of data's shape lacks, now, to
  // keep the rows and the lists on the device from GNND to the search graph;
  // without it the build takes the slower steps apart. 0 where it has enough
  // or the backend has no device memory of its own (the CPU).
  virtual size_t build_device_shortfall(MatrixView data, const GnndParams& gnnd,
                                        const DiversifyParams& diversify) {
    (void)data;
    (void)gnnd;
    (void)diversify;
    return 0;
  }

  // Page-locks host memory that batches of queries are read from again and
  // again (the worker's batch area), so that copies out of it run at DMA
  // speed instead of through a staging buffer. The CPU has nothing to lock.
  virtual void pin_host_memory(void* address, size_t bytes) {
    (void)address;
    (void)bytes;
  }
  // Undoes pin_host_memory(address, ...) before the memory is released.
  virtual void unpin_host_memory(void* address) { (void)address; }

  // The data and graph must outlive the returned index (the GPU keeps device
  // copies, and reads the host arrays for its entry points). same_rows: null,
  // or an index of this backend whose rows are data's first
  // same_rows->node_count() rows (the graph a merge extended), which the GPU
  // copies on the device instead of uploading them again.
  virtual std::unique_ptr<SearchIndex> make_search_index(MatrixView data, GraphView graph,
                                                         Metric metric,
                                                         const SearchIndex* same_rows) = 0;
  // The same, over rows a build left (rows_left above), which the index
  // takes over where they are data's rows; otherwise they are dropped.
  virtual std::unique_ptr<SearchIndex> make_search_index_over(MatrixView data, GraphView graph, Metric metric,
                                                              std::unique_ptr<DeviceRows> rows) {
    rows.reset();
    return make_search_index(data, graph, metric, nullptr);
  }
  std::unique_ptr<SearchIndex> make_search_index(MatrixView data, const TsdgGraph& graph,
                                                 Metric metric) {
    return make_search_index(data, GraphView::of(graph), metric, nullptr);
  }

  // An empty exact set of rows of dim values. By default a host copy
  // searched by exact_knn; the GPU keeps the rows on the device.
  virtual std::unique_ptr<ExactSet> make_exact_set(int dim, Metric metric);
};

std::unique_ptr<Backend> make_cpu_backend();

// The exact k-NN graph of data through backend's brute force (self
// excluded, padded when there are fewer than k other rows).
KnnGraph exact_knn_graph_of(Backend& backend, MatrixView data, Metric metric, int k,
                            const RunControl& control);

}  // namespace tsdg

// The GPU backend's shared object exports this symbol (C linkage so that dlsym
// finds it); it returns nullptr and fills message when no usable GPU is found.
extern "C" {
typedef tsdg::Backend* (*TsdgCreateBackendFn)(int device, char* message, int message_len);
tsdg::Backend* tsdg_cuda_create_backend(int device, char* message, int message_len);
}
