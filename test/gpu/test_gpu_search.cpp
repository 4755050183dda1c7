// GPU searches on a TSDG graph: both kernels reach the CPU search's recall at
// the same settings, return ascending exact distances, honor the λ filter
// and pick the kernel by batch size.
#include <algorithm>
#include <cmath>
#include <set>

#include "bruteforce.h"
#include "distance.h"
#include "diversify.h"
#include "entry_points.h"
#include "gpu_test_support.h"
#include "navigating_layer.h"
#include "search.h"

namespace tsdg {
namespace {

using gpu_testing::clustered_spec;
using gpu_testing::cpu_control;

struct SearchFixture {
  Matrix data;
  Matrix queries;
  TsdgGraph graph;
  std::vector<uint32_t> truth;
};

const SearchFixture& fixture() {
  static const SearchFixture f = [] {
    SearchFixture s;
    const SyntheticSpec spec = clustered_spec(30000, 48, 40, 11);
    s.data = make_clustered(spec);
    s.queries = make_clustered_queries(spec, 1000, 12);
    const KnnGraph knn = exact_knn_graph(s.data.view(), Metric::L2, 32, cpu_control());
    s.graph = diversify_tsdg(s.data.view(), Metric::L2, knn, DiversifyParams{}, cpu_control());
    s.truth.resize(s.queries.rows * 10);
    std::vector<float> dists(s.truth.size());
    exact_knn(s.data.view(), s.queries.view(), Metric::L2, 10, s.truth.data(), dists.data(), cpu_control());
    return s;
  }();
  return f;
}

double search_recall(SearchIndex& index, const SearchParams& params, std::vector<float>* dists_out = nullptr,
                     std::vector<uint32_t>* ids_out = nullptr) {
  const SearchFixture& f = fixture();
  std::vector<uint32_t> ids(f.queries.rows * params.k, 777u);
  std::vector<float> dists(ids.size(), -5.0f);
  index.search(f.queries.view(), params, ids.data(), dists.data(), cpu_control());
  if (dists_out) *dists_out = dists;
  if (ids_out) *ids_out = ids;
  return recall_at(ids.data(), params.k, f.truth.data(), 10, f.queries.rows, 10);
}

void expect_exact_ascending(const std::vector<uint32_t>& ids, const std::vector<float>& dists, int k) {
  const SearchFixture& f = fixture();
  for (int64_t q = 0; q < f.queries.rows; ++q) {
    for (int j = 0; j < k; ++j) {
      const size_t at = q * k + j;
      ASSERT_LT(ids[at], f.data.rows);
      if (j > 0) {
        ASSERT_NE(ids[at - 1], ids[at]) << "repeated result";
        ASSERT_LE(dists[at - 1], dists[at]);
      }
      const float exact = metric_distance(Metric::L2, f.queries.row(q), f.data.row(ids[at]), f.data.dim);
      ASSERT_NEAR(dists[at], exact, 1e-4f * std::max(1.0f, exact));
    }
  }
}

TEST(GpuSearch, BothKernelsReachCpuRecall) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  auto cpu_index = make_cpu_backend()->make_search_index(f.data.view(), f.graph, Metric::L2);
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  // 1000: past the visited set's first sizes and the expansion queue's length
  for (int ef : {32, 64, 1000}) {
    SearchParams params;
    params.k = 10;
    params.ef = ef;
    const double cpu = search_recall(*cpu_index, params);
    std::vector<float> dists;
    std::vector<uint32_t> ids;
    params.gpu_kernel = 2;
    const double large = search_recall(*gpu_index, params, &dists, &ids);
    expect_exact_ascending(ids, dists, params.k);
    params.gpu_kernel = 1;
    const double small = search_recall(*gpu_index, params, &dists, &ids);
    expect_exact_ascending(ids, dists, params.k);
    std::printf("ef %d recall@10: cpu %.4f gpu large-batch %.4f gpu small-batch %.4f\n", ef, cpu, large, small);
    EXPECT_GE(large, cpu - 0.01) << "ef " << ef;
    EXPECT_GE(small, cpu - 0.01) << "ef " << ef;
  }
}

TEST(GpuSearch, SmallBatchWidthAndEfLimit) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  SearchParams params;
  params.k = 10;
  params.ef = 48;
  params.gpu_kernel = 1;
  std::vector<float> dists;
  std::vector<uint32_t> ids;
  // Every width is the same beam search, expanding more nodes a step.
  for (int width : {1, 2, 8}) {
    params.gpu_search_width = width;
    const double recall = search_recall(*gpu_index, params, &dists, &ids);
    expect_exact_ascending(ids, dists, params.k);
    std::printf("small-batch width %d, ef 48: recall@10 %.4f\n", width, recall);
    EXPECT_GT(recall, 0.95) << "width " << width;
  }
  params.gpu_search_width = 0;
  params.ef = kGpuSmallBatchMaxEf + 1;
  std::vector<uint32_t> out_ids(f.queries.rows * params.k);
  std::vector<float> out_dists(out_ids.size());
  EXPECT_THROW(gpu_index->search(f.queries.view(), params, out_ids.data(), out_dists.data(), RunControl{}),
               Error);
  params.gpu_kernel = 0;  // by batch size: past the limit the search answers at the largest ef
  EXPECT_GE(search_recall(*gpu_index, params, &dists, &ids), 0.99);
}

TEST(GpuSearch, ExactScanOfTheResidentRows) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  SearchParams params;
  params.k = 10;
  params.gpu_kernel = 3;
  std::vector<float> dists;
  std::vector<uint32_t> ids;
  EXPECT_GE(search_recall(*gpu_index, params, &dists, &ids), 0.999);
  expect_exact_ascending(ids, dists, params.k);
}

TEST(GpuSearch, SlackRuleAndLambdaFilter) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  SearchParams params;
  params.k = 10;
  params.ef = 64;
  params.gpu_kernel = 2;
  const double full = search_recall(*gpu_index, params);
  params.lambda_limit = 0;
  const double filtered = search_recall(*gpu_index, params);
  params.lambda_limit = 255;
  params.slack = 0.5f;
  params.ef = 16;
  const double slack = search_recall(*gpu_index, params);
  std::printf("recall@10: full %.4f lambda<=0 %.4f ef16+slack %.4f\n", full, filtered, slack);
  EXPECT_GT(full, filtered);  // fewer edges, lower recall at the same ef
  EXPECT_GT(filtered, 0.5);
  EXPECT_GT(slack, 0.5);
}

TEST(GpuSearch, MoreResultsThanSearchedAndOtherMetrics) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  SearchParams params;
  params.k = 50;
  params.ef = 32;  // raised to k
  for (int kernel : {1, 2}) {
    params.gpu_kernel = kernel;
    std::vector<float> dists;
    std::vector<uint32_t> ids;
    search_recall(*gpu_index, params, &dists, &ids);
    expect_exact_ascending(ids, dists, params.k);
  }
  params.gpu_kernel = 7;
  std::vector<uint32_t> ids(f.queries.rows * params.k);
  std::vector<float> dists(ids.size());
  EXPECT_THROW(gpu_index->search(f.queries.view(), params, ids.data(), dists.data(), RunControl{}), Error);
}

Matrix scaled(const Matrix& m, float scale) {
  Matrix out = m;
  for (float& v : out.values) v *= scale;
  return out;
}

// The walks read half-precision rows scaled by a power of two, and the best
// candidates are scored again on the float rows: rows far past half
// precision's range or below its normal numbers, and a dimension that is no
// multiple of 8, are searched as well as rows near 1, and the results carry
// the float rows' exact distances.
TEST(GpuSearch, HalfPrecisionWalkAtAnyScaleAndDimension) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  SearchParams params;
  params.k = 10;
  params.ef = 64;
  auto base = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  const double reference = search_recall(*base, params);
  for (float scale : {1e-6f, 1e6f}) {
    const Matrix data = scaled(f.data, scale);
    const Matrix queries = scaled(f.queries, scale);
    auto index = gpu_backend.make_search_index(data.view(), f.graph, Metric::L2);
    for (int kernel : {1, 2}) {
      params.gpu_kernel = kernel;
      std::vector<uint32_t> ids(queries.rows * params.k);
      std::vector<float> dists(ids.size());
      index->search(queries.view(), params, ids.data(), dists.data(), cpu_control());
      const double recall = recall_at(ids.data(), params.k, f.truth.data(), 10, queries.rows, 10);
      EXPECT_GE(recall, reference - 0.005) << "scale " << scale << " kernel " << kernel;
      for (size_t at = 0; at < ids.size(); ++at) {
        ASSERT_LT(ids[at], data.rows);
        const float exact = metric_distance(Metric::L2, queries.row(at / params.k), data.row(ids[at]), data.dim);
        ASSERT_NEAR(dists[at], exact, 1e-4f * exact) << "scale " << scale;
      }
    }
  }

  const SyntheticSpec spec = clustered_spec(5000, 45, 20, 3);
  const Matrix odd = make_clustered(spec);
  const Matrix odd_queries = make_clustered_queries(spec, 300, 4);
  const KnnGraph knn = exact_knn_graph(odd.view(), Metric::L2, 32, cpu_control());
  const TsdgGraph graph = diversify_tsdg(odd.view(), Metric::L2, knn, DiversifyParams{}, cpu_control());
  std::vector<uint32_t> truth(odd_queries.rows * 10);
  std::vector<float> truth_dists(truth.size());
  exact_knn(odd.view(), odd_queries.view(), Metric::L2, 10, truth.data(), truth_dists.data(), cpu_control());
  auto cpu_index = make_cpu_backend()->make_search_index(odd.view(), graph, Metric::L2);
  auto gpu_index = gpu_backend.make_search_index(odd.view(), graph, Metric::L2);
  params.gpu_kernel = 0;
  std::vector<uint32_t> ids(truth.size());
  std::vector<float> dists(truth.size());
  cpu_index->search(odd_queries.view(), params, ids.data(), dists.data(), cpu_control());
  const double cpu = recall_at(ids.data(), 10, truth.data(), 10, odd_queries.rows, 10);
  gpu_index->search(odd_queries.view(), params, ids.data(), dists.data(), cpu_control());
  const double gpu = recall_at(ids.data(), 10, truth.data(), 10, odd_queries.rows, 10);
  EXPECT_GE(gpu, cpu - 0.01);
  for (size_t at = 0; at < ids.size(); ++at) {
    const float exact = metric_distance(Metric::L2, odd_queries.row(at / 10), odd.row(ids[at]), odd.dim);
    ASSERT_NEAR(dists[at], exact, 1e-4f * std::max(1.0f, exact));
  }
}

// The device's mapping of results to payload values gives what the host's
// does (SearchIndex::search_payload) for the same search, for both kernels.
TEST(GpuSearch, PayloadMappedOnTheDeviceAsOnTheHost) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  constexpr int kSize = 6;
  const int64_t n = f.data.rows;
  std::vector<unsigned char> values(n * kSize);
  std::vector<uint8_t> flags(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int b = 0; b < kSize; ++b) values[i * kSize + b] = static_cast<unsigned char>((i * 7 + b) >> (b % 3));
    if (i % 4 == 0) flags[i] = 4;
  }
  const unsigned char missing[kSize] = {1, 2, 3, 4, 5, 6};
  gpu_index->set_payload(values.data(), kSize, flags.data(), 4, missing);
  SearchParams params;
  params.k = 24;
  params.ef = 64;
  const int k_out = 10;
  const size_t results = f.queries.rows * k_out;
  for (int kernel : {1, 2}) {
    params.gpu_kernel = kernel;
    std::vector<unsigned char> device_values(results * kSize), host_values(results * kSize);
    std::vector<float> device_dists(results), host_dists(results);
    gpu_index->search_payload(f.queries.view(), params, k_out, device_values.data(), device_dists.data(),
                              RunControl{});
    gpu_index->SearchIndex::search_payload(f.queries.view(), params, k_out, host_values.data(),
                                           host_dists.data(), RunControl{});
    EXPECT_EQ(device_values, host_values) << "kernel " << kernel;
    EXPECT_EQ(device_dists, host_dists) << "kernel " << kernel;
  }
}

// The GPU index's unreached rows are those missing from either kernel's
// answer to their own vector. The large-batch kernel walks as the CPU does,
// and misses nearly the same rows as the CPU's walk (the index pages' scans).
TEST(GpuSearch, UnreachedRowsOfBothKernels) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  SearchParams params;
  params.ef = 4;
  const int64_t first = 20000;
  const int64_t n = f.data.rows;
  const std::vector<uint32_t> unreached = gpu_index->unreached_rows(first, n, params, cpu_control());
  ASSERT_TRUE(std::is_sorted(unreached.begin(), unreached.end()));

  std::set<uint32_t> expected;
  std::set<uint32_t> large_missed;
  const MatrixView own{f.data.row(first), n - first, f.data.dim};
  params.k = params.ef;
  for (int kernel : {1, 2}) {
    params.gpu_kernel = kernel;
    std::vector<uint32_t> ids(own.rows * params.k);
    std::vector<float> dists(ids.size());
    gpu_index->search(own, params, ids.data(), dists.data(), RunControl{});
    for (int64_t q = 0; q < own.rows; ++q) {
      const uint32_t row = static_cast<uint32_t>(first + q);
      const uint32_t* found = &ids[q * params.k];
      if (std::find(found, found + params.k, row) == found + params.k) {
        expected.insert(row);
        if (kernel == 2) large_missed.insert(row);
      }
    }
  }
  EXPECT_EQ(unreached, std::vector<uint32_t>(expected.begin(), expected.end()));
  EXPECT_GT(unreached.size(), 0u);
  EXPECT_LT(unreached.size(), static_cast<size_t>(n - first) / 4);

  const std::vector<uint32_t> entries = navigating_set(f.data.view(), GraphView::of(f.graph), params);
  const std::vector<uint32_t> walk = unreached_rows(f.data.view(), GraphView::of(f.graph), Metric::L2,
                                                    entries.data(), static_cast<int>(entries.size()),
                                                    first, n, params.ef, params.lambda_limit, cpu_control());
  size_t differ = 0;
  for (uint32_t row : walk) differ += large_missed.count(row) == 0;
  for (uint32_t row : large_missed) differ += !std::binary_search(walk.begin(), walk.end(), row);
  std::printf("ef %d: %zu rows unreached by a kernel, %zu by the large-batch one, %zu by the CPU's walk; "
              "%zu in one of the last two only\n",
              params.ef, unreached.size(), large_missed.size(), walk.size(), differ);
  EXPECT_LE(differ, std::max<size_t>(2, walk.size() / 50));
}

// A GPU index's repair of its unreached rows (those the large-batch kernel
// misses) puts the changed lists on the device: it leaves the rows an index
// uploaded from the repaired host graph misses, far fewer than before. It
// names each list it changes before it writes it.
TEST(GpuSearch, RepairedListsReachTheRows) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  TsdgGraph graph = f.graph;
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), graph, Metric::L2);
  SearchParams params;
  params.ef = 4;
  const int64_t first = 20000;
  const int64_t n = f.data.rows;
  const std::vector<uint32_t> before = gpu_index->unreached_rows(first, n, params, cpu_control());
  std::vector<uint32_t> changed;
  std::vector<uint32_t> named;  // each list as the repair names it, before it writes it
  const int degree = graph.degree;
  const auto list_as_built = [&](uint32_t u) {
    return std::equal(&f.graph.neighbors[u * degree], &f.graph.neighbors[(u + 1) * degree],
                      &graph.neighbors[u * degree]);
  };
  int64_t found = -1;
  const std::vector<uint32_t> after = unreached_rows_repaired(
      *gpu_index, f.data.view(), GraphSpan::of(graph), Metric::L2, params, first, n, found, changed, cpu_control(),
      [&](uint32_t node) {
        if (std::find(named.begin(), named.end(), node) != named.end()) return;
        EXPECT_TRUE(list_as_built(node)) << "node " << node << " written before it was named";
        named.push_back(node);
      });
  std::sort(named.begin(), named.end());
  EXPECT_EQ(named, changed);
  EXPECT_LE(found, static_cast<int64_t>(before.size()));
  auto uploaded = gpu_backend.make_search_index(f.data.view(), graph, Metric::L2);
  EXPECT_EQ(after, uploaded->unreached_rows(first, n, params, cpu_control()));
  std::printf("ef %d: %zu rows unreached, %zu after the repair of %zu lists\n", params.ef, before.size(), after.size(),
              changed.size());
  EXPECT_FALSE(changed.empty());
  EXPECT_LT(after.size() * 4, before.size());
}

// An index whose first rows are copied from another index on the device
// answers as one uploaded whole.
TEST(GpuSearch, FirstRowsCopiedFromAnotherIndex) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  const int64_t base_rows = 20000;
  TsdgGraph ring(base_rows, 1);
  for (int64_t i = 0; i < base_rows; ++i) ring.neighbors[i] = static_cast<uint32_t>((i + 1) % base_rows);
  auto base = gpu_backend.make_search_index(MatrixView{f.data.row(0), base_rows, f.data.dim},
                                            GraphView::of(ring), Metric::L2, nullptr);
  auto extended = gpu_backend.make_search_index(f.data.view(), GraphView::of(f.graph), Metric::L2,
                                                base.get());
  auto whole = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  SearchParams params;
  params.k = 10;
  params.ef = 64;
  std::vector<uint32_t> ids(f.queries.rows * params.k), whole_ids(ids.size());
  std::vector<float> dists(ids.size()), whole_dists(ids.size());
  extended->search(f.queries.view(), params, ids.data(), dists.data(), RunControl{});
  whole->search(f.queries.view(), params, whole_ids.data(), whole_dists.data(), RunControl{});
  EXPECT_EQ(ids, whole_ids);
  EXPECT_EQ(dists, whole_dists);
}

// The GPU index's d_nn1+ (which a merged graph's summary takes) is the CPU's,
// absolute for inner products too.
TEST(GpuSearch, Nn1BoundAsTheCpuComputesIt) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  for (Metric metric : {Metric::L2, Metric::InnerProduct}) {
    auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, metric);
    const float cpu = graph_nn1_bound(f.data.view(), GraphView::of(f.graph), metric, cpu_control());
    EXPECT_NEAR(gpu_index->nn1_bound(), cpu, 1e-4f * std::max(1.0f, std::fabs(cpu)))
        << "metric " << static_cast<int>(metric);
  }
}

// Lists with a neighbor id past the last node (corrupt pages) are refused at
// upload, before a kernel reads them.
TEST(GpuSearch, NeighborIdsOutOfRangeRefused) {
  TSDG_REQUIRE_GPU();
  const SearchFixture& f = fixture();
  TsdgGraph corrupt = f.graph;
  corrupt.neighbors[corrupt.neighbors.size() / 2] = static_cast<uint32_t>(corrupt.nodes);
  corrupt.neighbors[1] = static_cast<uint32_t>(corrupt.nodes) + 7;
  try {
    gpu_backend.make_search_index(f.data.view(), corrupt, Metric::L2);
    FAIL() << "uploaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("2 neighbor ids out of range"), std::string::npos) << e.what();
  }
  // the backend still works after the refusal
  auto index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  EXPECT_EQ(index->node_count(), f.graph.nodes);
}

// Four hundred clusters of a hundred rows, more than the navigating set
// holds nodes: an exact k-NN graph links each cluster only to itself, and a
// search reaches the query's cluster from the navigating layer's walk
// (navigating_layer.h).
struct LayerFixture {
  Matrix data;
  Matrix queries;
  TsdgGraph graph;
  TsdgGraph layer;
  std::vector<uint32_t> truth;
};

const LayerFixture& layer_fixture() {
  static const LayerFixture f = [] {
    LayerFixture s;
    SyntheticSpec spec;
    spec.rows = 40000;
    spec.dim = 64;
    spec.clusters = 400;
    spec.intrinsic_dim = 16;
    spec.absolute_scale = true;
    spec.seed = 5;
    s.data = make_clustered(spec);
    s.queries = make_clustered_queries(spec, 1000, 6);
    const KnnGraph knn = exact_knn_graph(s.data.view(), Metric::L2, 32, cpu_control());
    s.graph = diversify_tsdg(s.data.view(), Metric::L2, knn, DiversifyParams{}, cpu_control());
    s.layer = build_navigating_layer(*make_cpu_backend(), s.data.view(), Metric::L2, DiversifyParams{}, 1,
                                     cpu_control());
    s.truth.resize(s.queries.rows * 10);
    std::vector<float> dists(s.truth.size());
    exact_knn(s.data.view(), s.queries.view(), Metric::L2, 10, s.truth.data(), dists.data(), cpu_control());
    return s;
  }();
  return f;
}

double layer_fixture_recall(SearchIndex& index, const SearchParams& params) {
  const LayerFixture& f = layer_fixture();
  std::vector<uint32_t> ids(f.queries.rows * params.k);
  std::vector<float> dists(ids.size());
  index.search(f.queries.view(), params, ids.data(), dists.data(), cpu_control());
  return recall_at(ids.data(), params.k, f.truth.data(), 10, f.queries.rows, 10);
}

// Through the same layer, both GPU kernels reach the CPU's recall, and the
// layer costs neither any recall; an empty layer goes back to the
// navigating set.
TEST(GpuSearch, ThroughTheNavigatingLayerAsTheCpu) {
  TSDG_REQUIRE_GPU();
  const LayerFixture& f = layer_fixture();
  ASSERT_EQ(f.layer.nodes, layer_node_count(f.data.rows));
  auto cpu_index = make_cpu_backend()->make_search_index(f.data.view(), f.graph, Metric::L2);
  auto gpu_index = gpu_backend.make_search_index(f.data.view(), f.graph, Metric::L2);
  const GraphView wrong_count{f.layer.neighbors.data(), f.layer.lambdas.data(), f.layer.nodes - 1, f.layer.degree};
  EXPECT_THROW(gpu_index->set_layer(wrong_count), Error);
  const std::vector<int> efs = {10, 16, 32};
  constexpr int kKernels[] = {1, 2};
  std::vector<double> cpu_set, cpu_layer;
  std::vector<std::vector<double>> gpu_set(2), gpu_layer(2);
  SearchParams params;
  params.k = 10;
  const auto search_all = [&](std::vector<double>& cpu, std::vector<std::vector<double>>& gpu) {
    for (int ef : efs) {
      params.ef = ef;
      params.gpu_kernel = 0;
      cpu.push_back(layer_fixture_recall(*cpu_index, params));
      for (int i = 0; i < 2; ++i) {
        params.gpu_kernel = kKernels[i];
        gpu[i].push_back(layer_fixture_recall(*gpu_index, params));
      }
    }
  };
  search_all(cpu_set, gpu_set);
  const size_t bytes_without_layer = gpu_index->memory_bytes();
  cpu_index->set_layer(GraphView::of(f.layer));
  gpu_index->set_layer(GraphView::of(f.layer));
  EXPECT_GT(gpu_index->memory_bytes(), bytes_without_layer);
  search_all(cpu_layer, gpu_layer);
  for (size_t e = 0; e < efs.size(); ++e) {
    std::printf("ef %d recall@10 from the set / the layer: cpu %.4f / %.4f, gpu small-batch %.4f / %.4f, "
                "gpu large-batch %.4f / %.4f\n",
                efs[e], cpu_set[e], cpu_layer[e], gpu_set[0][e], gpu_layer[0][e], gpu_set[1][e], gpu_layer[1][e]);
    EXPECT_GE(cpu_layer[e], cpu_set[e] - 0.002) << "ef " << efs[e];
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(gpu_layer[i][e], cpu_layer[e], 0.005) << "ef " << efs[e] << " kernel " << kKernels[i];
      EXPECT_GE(gpu_layer[i][e], gpu_set[i][e] - 0.002) << "ef " << efs[e] << " kernel " << kKernels[i];
    }
  }
  // the widest layer walks, four times the widest of the index's own
  params.ef = 1000;
  params.gpu_kernel = 2;
  EXPECT_GE(layer_fixture_recall(*gpu_index, params), 0.99);

  gpu_index->set_layer(GraphView{});
  params.ef = efs.front();
  params.gpu_kernel = 2;
  EXPECT_EQ(layer_fixture_recall(*gpu_index, params), gpu_set[1].front());
}

}  // namespace
}  // namespace tsdg
