// Basic value types shared by every layer below the PostgreSQL glue:
// row-major float sets, metrics, graphs. No PostgreSQL, no CUDA.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "huge_pages.h"

namespace tsdg {

// Marks an empty slot in a neighbor list.
constexpr uint32_t kInvalidId = std::numeric_limits<uint32_t>::max();

enum class Metric : int {
  L2 = 0,            // squared Euclidean distance for comparisons
  InnerProduct = 1,  // negative inner product, so smaller is closer
  Cosine = 2,        // 1 - cos; the data and queries are normalized once, then IP
  L1 = 3,            // sum of |a - b|, a metric but no matrix product (taxicab distance)
};

// The metric's name in messages.
inline const char* metric_name(Metric metric) {
  switch (metric) {
    case Metric::L2: return "L2";
    case Metric::InnerProduct: return "inner product";
    case Metric::Cosine: return "cosine";
    case Metric::L1: return "L1";
  }
  return "unknown";
}

// A non-owning view of n rows of dim float32 values, row-major.
struct MatrixView {
  const float* data = nullptr;
  int64_t rows = 0;
  int dim = 0;

  const float* row(int64_t i) const { return data + i * static_cast<int64_t>(dim); }
  MatrixView slice(int64_t first, int64_t count) const {
    return MatrixView{row(first), count, dim};
  }
};

// An owning row-major float set.
struct Matrix {
  std::vector<float> values;
  int64_t rows = 0;
  int dim = 0;

  Matrix() = default;
  Matrix(int64_t r, int d) : values(static_cast<size_t>(r) * d), rows(r), dim(d) {}
  float* row(int64_t i) { return values.data() + i * static_cast<int64_t>(dim); }
  const float* row(int64_t i) const { return values.data() + i * static_cast<int64_t>(dim); }
  MatrixView view() const { return MatrixView{values.data(), rows, dim}; }
};

// A k-NN graph: for every node its k nearest neighbors found so far, sorted by
// ascending distance, padded with kInvalidId / +inf.
struct KnnGraph {
  int64_t nodes = 0;
  int k = 0;
  HugePageVector<uint32_t> ids;  // nodes * k
  HugePageVector<float> dists;   // nodes * k

  KnnGraph() = default;
  KnnGraph(int64_t n, int kk)
      : nodes(n), k(kk), ids(static_cast<size_t>(n) * kk, kInvalidId),
        dists(static_cast<size_t>(n) * kk, std::numeric_limits<float>::infinity()) {}
  // Lists left unwritten, for a caller that writes every entry on its threads.
  struct Unfilled {};
  KnnGraph(int64_t n, int kk, Unfilled) : nodes(n), k(kk), ids(static_cast<size_t>(n) * kk), dists(static_cast<size_t>(n) * kk) {}
  const uint32_t* list(int64_t i) const { return ids.data() + i * k; }
  const float* list_dists(int64_t i) const { return dists.data() + i * k; }
};

// A k-NN graph whose arrays are owned elsewhere (a KnnGraph, or the index's
// stored lists, which may come without distances: dists null).
struct KnnView {
  const uint32_t* ids = nullptr;  // nodes * k
  const float* dists = nullptr;   // nodes * k, or null
  int64_t nodes = 0;
  int k = 0;

  KnnView() = default;
  KnnView(const uint32_t* ids_, const float* dists_, int64_t nodes_, int k_)
      : ids(ids_), dists(dists_), nodes(nodes_), k(k_) {}
  KnnView(const KnnGraph& graph)  // NOLINT(google-explicit-constructor): a view of it, as string_view
      : ids(graph.ids.data()), dists(graph.dists.empty() ? nullptr : graph.dists.data()), nodes(graph.nodes),
        k(graph.k) {}
  const uint32_t* list(int64_t i) const { return ids + i * k; }
  const float* list_dists(int64_t i) const { return dists + i * k; }
};

// The diversified search graph: fixed degree R, each list sorted by
// (occlusion factor, distance), padded with kInvalidId.
struct TsdgGraph {
  int64_t nodes = 0;
  int degree = 0;
  HugePageVector<uint32_t> neighbors;  // nodes * degree
  HugePageVector<uint8_t> lambdas;     // nodes * degree, occlusion factor per edge

  TsdgGraph() = default;
  TsdgGraph(int64_t n, int r)
      : nodes(n), degree(r), neighbors(static_cast<size_t>(n) * r, kInvalidId),
        lambdas(static_cast<size_t>(n) * r, 0) {}
  const uint32_t* list(int64_t i) const { return neighbors.data() + i * degree; }
  const uint8_t* list_lambdas(int64_t i) const { return lambdas.data() + i * degree; }
};

// A TSDG graph's lists in arrays owned elsewhere, written in place: a
// merge's output, which the GPU fills without a copy in between.
struct GraphSpan {
  uint32_t* neighbors = nullptr;  // nodes * degree
  uint8_t* lambdas = nullptr;     // nodes * degree
  int64_t nodes = 0;
  int degree = 0;

  uint32_t* list(int64_t i) const { return neighbors + i * degree; }
  uint8_t* list_lambdas(int64_t i) const { return lambdas + i * degree; }
  static GraphSpan of(TsdgGraph& graph) {
    return GraphSpan{graph.neighbors.data(), graph.lambdas.data(), graph.nodes, graph.degree};
  }
};

// A TSDG graph whose arrays are owned elsewhere (index pages, the caller).
struct GraphView {
  const uint32_t* neighbors = nullptr;  // nodes * degree
  const uint8_t* lambdas = nullptr;     // nodes * degree
  int64_t nodes = 0;
  int degree = 0;

  const uint32_t* list(int64_t i) const { return neighbors + i * degree; }
  const uint8_t* list_lambdas(int64_t i) const { return lambdas + i * degree; }
  static GraphView of(const TsdgGraph& graph) {
    return GraphView{graph.neighbors.data(), graph.lambdas.data(), graph.nodes, graph.degree};
  }
  static GraphView of(GraphSpan graph) {
    return GraphView{graph.neighbors, graph.lambdas, graph.nodes, graph.degree};
  }
};

// Failure reported by core and backends; the C API turns it into a status.
enum class Status : int {
  Ok = 0,
  OutOfMemory = 1,     // host or device memory
  Cancelled = 2,       // the caller's cancel flag was set
  InvalidArgument = 3,
  DeviceError = 4,     // no device, kernel fault, driver error
  Internal = 5,
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

}  // namespace tsdg
