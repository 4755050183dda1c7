#include "backend.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "descent.h"
#include "distance.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// Backend::make_exact_set's set: a host copy of the rows, searched by the
// backend's exact_knn.
class HostExactSet final : public ExactSet {
 public:
  HostExactSet(Backend& backend, int dim, Metric metric) : backend_(backend), dim_(dim), metric_(metric) {}

  void append(MatrixView rows, const RunControl& /*control*/) override {
    check_append(rows, dim_, size());
    rows_.insert(rows_.end(), rows.data, rows.data + rows.rows * dim_);
  }
  void clear() override { rows_.clear(); }
  int64_t size() const override { return static_cast<int64_t>(rows_.size()) / dim_; }
  size_t memory_bytes() const override { return rows_.capacity() * sizeof(float); }
  void search(MatrixView queries, int k, uint32_t* ids, float* dists,
              const RunControl& control) override {
    backend_.exact_knn(MatrixView{rows_.data(), size(), dim_}, queries, metric_, k, ids, dists, control);
  }

 private:
  Backend& backend_;
  int dim_;
  Metric metric_;
  std::vector<float> rows_;
};

}  // namespace

KnnGraph exact_knn_graph_of(Backend& backend, MatrixView data, Metric metric, int k,
                            const RunControl& control) {
  KnnGraph graph(data.rows, k);
  if (data.rows == 0) return graph;
  const int width = static_cast<int>(std::min<int64_t>(k + 1, data.rows));
  std::vector<uint32_t> ids(static_cast<size_t>(data.rows) * width);
  std::vector<float> dists(ids.size());
  backend.exact_knn(data, data, metric, width, ids.data(), dists.data(), control);
  for (int64_t row = 0; row < data.rows; ++row) {
    int out = 0;
    for (int j = 0; j < width && out < k; ++j) {
      const uint32_t id = ids[row * width + j];
      if (id == row || id == kInvalidId) continue;
      graph.ids[row * k + out] = id;
      graph.dists[row * k + out] = dists[row * width + j];
      ++out;
    }
  }
  return graph;
}

void ExactSet::check_append(MatrixView rows, int dim, int64_t size) {
  if (rows.dim != dim) {
    throw Error(Status::InvalidArgument, "rows of dimension " + std::to_string(rows.dim) +
                                             " appended to an exact set of dimension " +
                                             std::to_string(dim));
  }
  if (rows.rows < 0) throw Error(Status::InvalidArgument, "row count must not be negative");
  if (rows.rows > 0 && rows.data == nullptr) throw Error(Status::InvalidArgument, "rows must not be null");
  if (rows.rows >= static_cast<int64_t>(kInvalidId) - size) {
    throw Error(Status::InvalidArgument, "too many rows in the exact set for 32-bit ids");
  }
}

std::unique_ptr<ExactSet> Backend::make_exact_set(int dim, Metric metric) {
  if (dim < 1) throw Error(Status::InvalidArgument, "dimension must be positive");
  return std::make_unique<HostExactSet>(*this, dim, metric);
}

TsdgGraph Backend::build_tsdg_graph(MatrixView data, Metric metric, const GnndParams& gnnd,
                                    const DiversifyParams& diversify_params, uint32_t* knn_ids,
                                    float* knn_dists, const RunControl& control,
                                    std::unique_ptr<DeviceRows>* /* rows_left */) {
  control.set_phase(Phase::KnnGraph);
  const KnnGraph knn = build_knn_graph(data, metric, gnnd, control);
  if (knn_ids != nullptr) std::copy(knn.ids.begin(), knn.ids.end(), knn_ids);
  if (knn_dists != nullptr) std::copy(knn.dists.begin(), knn.dists.end(), knn_dists);
  control.set_phase(Phase::Diversify);
  return diversify(data, metric, knn, diversify_params, control);
}

void Backend::merge_graph(const MergeInput& in, const MergeOutput& out, Metric metric,
                          const GnndParams& params, const DiversifyParams& diversify,
                          const RunControl& control) {
  wait_for_old_rows(in);
  merge_graph_incremental(in, out, metric, params, diversify, control);
}

void Backend::list_distances(MatrixView data, Metric metric, const uint32_t* ids, int k, float* dists,
                             const RunControl& control) {
  const DistanceFn distance = metric_distance_fn(metric);
  parallel_for(control, data.rows, 1024, [&](int64_t begin, int64_t end, int) {
    // The neighbors' rows are scattered over the whole set: fetching the next
    // list's rows while this one's distances run hides most of the latency.
    if (begin < end) prefetch_rows(data, ids + begin * k, k);
    for (int64_t u = begin; u < end; ++u) {
      if (u + 1 < end) prefetch_rows(data, ids + (u + 1) * k, k);
      for (int j = 0; j < k; ++j) {
        const uint32_t v = ids[u * k + j];
        dists[u * k + j] = v == kInvalidId ? std::numeric_limits<float>::infinity()
                                           : distance(data.row(u), data.row(v), data.dim);
      }
    }
  });
}

void SearchIndex::set_payload(const void* values, int value_size, const uint8_t* flags,
                              uint8_t skip_bits, const void* missing) {
  if (value_size < 1 || value_size > kMaxPayloadSize || values == nullptr || missing == nullptr) {
    throw Error(Status::InvalidArgument, "payload values must be 1 to 16 bytes each");
  }
  const auto* bytes = static_cast<const unsigned char*>(values);
  const size_t nodes = static_cast<size_t>(node_count());
  payload_values_.assign(bytes, bytes + nodes * value_size);
  if (flags != nullptr) {
    payload_flags_.assign(flags, flags + nodes);
  } else {
    payload_flags_.clear();
  }
  std::memcpy(payload_missing_, missing, value_size);
  payload_size_ = value_size;
  payload_skip_bits_ = skip_bits;
}

void SearchIndex::search_payload(MatrixView queries, const SearchParams& params, int k_out,
                                 void* values, float* dists, const RunControl& control) {
  if (payload_size_ == 0) throw Error(Status::InvalidArgument, "the index has no payload");
  if (k_out < 1 || k_out > params.k) throw Error(Status::InvalidArgument, "k_out must be 1 to k");
  const size_t wide = static_cast<size_t>(queries.rows) * params.k;
  std::vector<uint32_t> ids(wide);
  std::vector<float> wide_dists(wide);
  search(queries, params, ids.data(), wide_dists.data(), control);
  const size_t nodes = static_cast<size_t>(node_count());
  auto* out = static_cast<unsigned char*>(values);
  for (int64_t q = 0; q < queries.rows; ++q) {
    int written = 0;
    for (int j = 0; j < params.k && written < k_out; ++j) {
      const uint32_t id = ids[q * params.k + j];
      if (id == kInvalidId || id >= nodes) break;
      if (!payload_flags_.empty() && (payload_flags_[id] & payload_skip_bits_) != 0) continue;
      std::memcpy(out + (q * k_out + written) * payload_size_, &payload_values_[id * payload_size_],
                  payload_size_);
      dists[q * k_out + written] = wide_dists[q * params.k + j];
      ++written;
    }
    for (; written < k_out; ++written) {
      std::memcpy(out + (q * k_out + written) * payload_size_, payload_missing_, payload_size_);
      dists[q * k_out + written] = std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace tsdg
