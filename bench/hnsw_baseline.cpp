#include "hnsw_baseline.h"

#ifdef TSDG_HAVE_HNSWLIB

#include <hnswlib/hnswlib.h>

#include <algorithm>

#include "distance.h"
#include "thread_pool.h"

namespace tsdg {
namespace bench {

namespace {

// hnswlib calls its distance through a function pointer with a parameter
// pointer; routing it to the core's runtime-dispatched kernels gives both
// sides the same SIMD code (hnswlib's own kernels depend on compile flags).
struct KernelParam {
  DistanceFn fn;
  int dim;
};

float kernel_distance(const void* a, const void* b, const void* param) {
  const auto* p = static_cast<const KernelParam*>(param);
  return p->fn(static_cast<const float*>(a), static_cast<const float*>(b), p->dim);
}

class KernelSpace : public hnswlib::SpaceInterface<float> {
 public:
  KernelSpace(int dim, Metric metric) : param_{metric_distance_fn(metric), dim} {}
  size_t get_data_size() override { return sizeof(float) * static_cast<size_t>(param_.dim); }
  hnswlib::DISTFUNC<float> get_dist_func() override { return kernel_distance; }
  void* get_dist_func_param() override { return &param_; }

 private:
  KernelParam param_;
};

}  // namespace

struct HnswBaseline::Impl {
  Impl(MatrixView data, Metric metric, int m, int ef_construction)
      : space(data.dim, metric),
        index(&space, static_cast<size_t>(data.rows), static_cast<size_t>(m),
              static_cast<size_t>(ef_construction)) {}
  KernelSpace space;
  hnswlib::HierarchicalNSW<float> index;
};

HnswBaseline::HnswBaseline(MatrixView data, Metric metric, int m, int ef_construction,
                           const RunControl& control)
    : impl_(std::make_unique<Impl>(data, metric, m, ef_construction)) {
  if (data.rows == 0) return;
  impl_->index.addPoint(data.row(0), 0);
  parallel_for(control, data.rows - 1, 256, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin + 1; i < end + 1; ++i) {
      impl_->index.addPoint(data.row(i), static_cast<hnswlib::labeltype>(i));
    }
  });
}

HnswBaseline::~HnswBaseline() = default;

int64_t HnswBaseline::search(MatrixView queries, int k, int ef, uint32_t* ids,
                             const RunControl& control) {
  impl_->index.setEf(static_cast<size_t>(ef));
  const int64_t before = impl_->index.metric_distance_computations.load();
  parallel_for(control, queries.rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t q = begin; q < end; ++q) {
      auto result = impl_->index.searchKnn(queries.row(q), static_cast<size_t>(k));
      uint32_t* out = ids + q * k;
      std::fill(out, out + k, kInvalidId);
      // A max-heap: the farthest comes out first.
      for (int j = static_cast<int>(result.size()) - 1; j >= 0; --j) {
        out[j] = static_cast<uint32_t>(result.top().second);
        result.pop();
      }
    }
  });
  return impl_->index.metric_distance_computations.load() - before;
}

}  // namespace bench
}  // namespace tsdg

#endif  // TSDG_HAVE_HNSWLIB
