// The GPU Backend: picks the device, owns its stream and cuBLAS handle, and
// forwards each step to its algorithm file. Exceptions stay C++ here; the
// extern "C" factory reports failure through its message buffer.
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "backend.h"
#include "device_memory.h"
#include "exact_set.h"
#include "gpu_algorithms.h"
#include "long_range.h"
#include "phase_trace.h"
#include "search_index.h"

namespace tsdg::cuda {
namespace {

// A build's rows on the device, and which host rows they copy.
struct BuildRows final : DeviceRows {
  DeviceBuffer<float> values;
  int device = 0;
  MatrixView of;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    TSDG_CUDA_CHECK(cudaSetDevice(device));
    ctx_ = std::make_unique<DeviceContext>(device);
    cudaDeviceProp props{};
    TSDG_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
    name_ = std::string("cuda:") + props.name;
  }

  const char* name() const override { return name_.c_str(); }

  void exact_knn(MatrixView base, MatrixView queries, Metric metric, int k, uint32_t* ids,
                 float* dists, const RunControl& control) override {
    std::lock_guard<std::mutex> guard(mutex_);
    activate();
    cuda::exact_knn(*ctx_, base, queries, metric, k, ids, dists, control);
  }

  KnnGraph build_knn_graph(MatrixView data, Metric metric, const GnndParams& params,
                           const RunControl& control) override {
    std::lock_guard<std::mutex> guard(mutex_);
    activate();
    return cuda::gnnd_build(*ctx_, data, metric, params, control);
  }

  KnnGraph merge_knn_graphs(MatrixView data, int64_t split, const KnnGraph& first,
                            const KnnGraph& second, Metric metric, const GnndParams& params,
                            const RunControl& control) override {
    std::lock_guard<std::mutex> guard(mutex_);
    activate();
    return cuda::ggm_merge(*ctx_, data, split, first, second, metric, params, control);
  }

  // The device's merge runs both TSDG stages over the whole graph, and its
  // lists come out unlike the stored ones for most rows even where a
  // handful of rows is merged, so that the index writes those lists again
  // and checks their rows' routes again. A batch up to this fraction of the
  // indexed rows takes the CPU's incremental merge instead, which leaves
  // the lists the batch does not reach as they were.
  static constexpr int64_t kIncrementalMergeFraction = 100;

  void merge_graph(const MergeInput& in, const MergeOutput& out, Metric metric, const GnndParams& params,
                   const DiversifyParams& diversify, const RunControl& control) override {
    activate();  // the memory the fit is judged by is the current device's
    const int64_t batch = in.data.rows - in.split;
    if (in.split == 0 || batch == 0 || batch * kIncrementalMergeFraction <= in.split ||
        !cuda::merge_fits_on_device(in.data, params)) {
      Backend::merge_graph(in, out, metric, params, diversify, control);
      return;
    }
    std::lock_guard<std::mutex> guard(mutex_);
    cuda::merge_graph(*ctx_, in, out, metric, params, diversify, control);
  }

  void list_distances(MatrixView data, Metric metric, const uint32_t* ids, int k, float* dists,
                      const RunControl& control) override {
    std::lock_guard<std::mutex> guard(mutex_);
    activate();
    cuda::list_distances(*ctx_, data, metric, ids, k, dists, control);
  }

  TsdgGraph diversify(MatrixView data, Metric metric, const KnnGraph& knn,
                      const DiversifyParams& params, const RunControl& control) override {
    std::lock_guard<std::mutex> guard(mutex_);
    activate();
    if (!has_long_range_candidates(params)) {
      return cuda::diversify(*ctx_, data, metric, knn, params, control);
    }
    // The same candidates as the CPU's diversify_tsdg, found on the device.
    return cuda::diversify_with_long_range(*ctx_, data, metric, knn, params, control);
  }

  TsdgGraph build_tsdg_graph(MatrixView data, Metric metric, const GnndParams& gnnd,
                             const DiversifyParams& diversify_params, uint32_t* knn_ids, float* knn_dists,
                             const RunControl& control, std::unique_ptr<DeviceRows>* rows_left = nullptr) override {
    PhaseTrace trace("build");
    activate();  // the memory the fit is judged by is the current device's
    if (!cuda::build_fits_on_device(data, gnnd, diversify_params)) {
      return Backend::build_tsdg_graph(data, metric, gnnd, diversify_params, knn_ids, knn_dists, control);
    }
    std::lock_guard<std::mutex> guard(mutex_);
    trace.mark("device memory and lock");
    if (rows_left == nullptr) {
      return cuda::build_tsdg_graph(*ctx_, data, metric, gnnd, diversify_params, knn_ids, knn_dists, control, nullptr);
    }
    auto left = std::make_unique<BuildRows>();
    TsdgGraph graph =
        cuda::build_tsdg_graph(*ctx_, data, metric, gnnd, diversify_params, knn_ids, knn_dists, control, &left->values);
    left->device = device_;
    left->of = data;
    *rows_left = std::move(left);
    return graph;
  }

  size_t build_device_shortfall(MatrixView data, const GnndParams& gnnd,
                                const DiversifyParams& diversify_params) override {
    activate();
    return cuda::build_device_shortfall(data, gnnd, diversify_params);
  }

  void pin_host_memory(void* address, size_t bytes) override {
    activate();
    TSDG_CUDA_CHECK(cudaHostRegister(address, bytes, cudaHostRegisterPortable));
  }

  void unpin_host_memory(void* address) override {
    activate();
    TSDG_CUDA_CHECK(cudaHostUnregister(address));
  }

  std::unique_ptr<SearchIndex> make_search_index_over(MatrixView data, GraphView graph, Metric metric,
                                                      std::unique_ptr<DeviceRows> rows) override {
    auto* left = dynamic_cast<BuildRows*>(rows.get());
    if (left == nullptr || left->device != device_ || left->of.data != data.data || left->of.rows != data.rows ||
        left->of.dim != data.dim) {
      rows.reset();
      return make_search_index(data, graph, metric, nullptr);
    }
    activate();
    return std::make_unique<CudaSearchIndex>(device_, data, graph, metric, nullptr, 0, std::move(left->values));
  }

  using Backend::make_search_index;
  std::unique_ptr<SearchIndex> make_search_index(MatrixView data, GraphView graph, Metric metric,
                                                 const SearchIndex* same_rows) override {
    activate();
    const bool reusable = same_rows != nullptr && same_rows->device_rows() != nullptr &&
                          same_rows->node_count() <= data.rows;
    return std::make_unique<CudaSearchIndex>(device_, data, graph, metric,
                                             reusable ? same_rows->device_rows() : nullptr,
                                             reusable ? same_rows->node_count() : 0);
  }

  std::unique_ptr<ExactSet> make_exact_set(int dim, Metric metric) override {
    activate();
    return std::make_unique<CudaExactSet>(device_, dim, metric);
  }

 private:
  // The calling thread may have another device current.
  void activate() const { TSDG_CUDA_CHECK(cudaSetDevice(device_)); }

  int device_;
  std::unique_ptr<DeviceContext> ctx_;
  std::string name_;
  std::mutex mutex_;  // one algorithm at a time on the shared stream
};

void write_message(char* message, int message_len, const std::string& text) {
  if (message == nullptr || message_len <= 0) return;
  std::snprintf(message, static_cast<size_t>(message_len), "%s", text.c_str());
}

}  // namespace
}  // namespace tsdg::cuda

extern "C" tsdg::Backend* tsdg_cuda_create_backend(int device, char* message, int message_len) {
  try {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
      tsdg::cuda::write_message(message, message_len,
                                std::string("no usable CUDA device: ") +
                                    (status != cudaSuccess ? cudaGetErrorString(status) : "none found"));
      cudaGetLastError();
      return nullptr;
    }
    if (device < 0 || device >= count) {
      tsdg::cuda::write_message(message, message_len,
                                "CUDA device " + std::to_string(device) + " does not exist (" +
                                    std::to_string(count) + " found)");
      return nullptr;
    }
    tsdg::Backend* backend = new tsdg::cuda::CudaBackend(device);
    tsdg::cuda::write_message(message, message_len, backend->name());
    return backend;
  } catch (const std::exception& error) {
    tsdg::cuda::write_message(message, message_len, error.what());
    return nullptr;
  }
}
