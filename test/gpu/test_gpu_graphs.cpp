// GPU GNND, GGM and merges: recall of the graph within 0.01 of the CPU core's on the
// same data, with the same parameters.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <future>
#include <vector>

#include "bruteforce.h"
#include "diversify.h"
#include "ggm.h"
#include "gnnd.h"
#include "merge.h"
#include "recall.h"
#include "gpu_test_support.h"

namespace tsdg {
namespace {

using gpu_testing::clustered_spec;
using gpu_testing::cpu_control;
using gpu_testing::graph_recall;

void expect_valid_lists(const KnnGraph& graph) {
  for (int64_t u = 0; u < graph.nodes; ++u) {
    for (int j = 0; j < graph.k; ++j) {
      const uint32_t id = graph.list(u)[j];
      ASSERT_NE(id, static_cast<uint32_t>(u)) << "self in list " << u;
      if (id == kInvalidId) continue;
      ASSERT_LT(id, graph.nodes);
      if (j > 0) {
        ASSERT_LE(graph.list_dists(u)[j - 1], graph.list_dists(u)[j]);
      }
      for (int i = 0; i < j; ++i) ASSERT_NE(graph.list(u)[i], id) << "duplicate in list " << u;
    }
  }
}

TEST(GpuGnnd, RecallWithinOnePercentOfCpu) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(30000, 48, 40, 3));
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 10, cpu_control());
  GnndParams params;
  params.k = 32;
  params.samples = 16;
  const KnnGraph on_gpu = gpu_backend.build_knn_graph(data.view(), Metric::L2, params, RunControl{});
  const KnnGraph on_cpu = gnnd_build(data.view(), Metric::L2, params, cpu_control());
  expect_valid_lists(on_gpu);
  const double gpu_recall = graph_recall(on_gpu, exact, 10);
  const double cpu_recall = graph_recall(on_cpu, exact, 10);
  std::printf("GNND recall@10: gpu %.4f cpu %.4f\n", gpu_recall, cpu_recall);
  EXPECT_GE(gpu_recall, cpu_recall - 0.01);
  EXPECT_GE(gpu_recall, 0.9);
}

TEST(GpuGnnd, InnerProductAndK64) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(20000, 32, 20, 4));
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::InnerProduct, 10, cpu_control());
  GnndParams params;
  params.k = 64;
  const KnnGraph on_gpu = gpu_backend.build_knn_graph(data.view(), Metric::InnerProduct, params, RunControl{});
  const KnnGraph on_cpu = gnnd_build(data.view(), Metric::InnerProduct, params, cpu_control());
  expect_valid_lists(on_gpu);
  const double gpu_recall = graph_recall(on_gpu, exact, 10);
  const double cpu_recall = graph_recall(on_cpu, exact, 10);
  std::printf("GNND (ip, k=64) recall@10: gpu %.4f cpu %.4f\n", gpu_recall, cpu_recall);
  EXPECT_GE(gpu_recall, cpu_recall - 0.01);
}

TEST(GpuGnnd, TinySetsAreExact) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(40, 8, 2, 5));
  GnndParams params;
  params.k = 16;
  const KnnGraph on_gpu = gpu_backend.build_knn_graph(data.view(), Metric::L2, params, RunControl{});
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 16, cpu_control());
  expect_valid_lists(on_gpu);
  EXPECT_GE(graph_recall(on_gpu, exact, 16), 0.99);
}

TEST(GpuGgm, MergeRecallWithinOnePercentOfCpu) {
  TSDG_REQUIRE_GPU();
  const SyntheticSpec spec = clustered_spec(30000, 48, 40, 6);
  const Matrix data = make_clustered(spec);
  const int64_t split = 14000;  // unequal halves
  const MatrixView first = data.view().slice(0, split);
  const MatrixView second = data.view().slice(split, data.rows - split);
  GnndParams params;
  params.k = 32;
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 10, cpu_control());

  const KnnGraph gpu_first = gpu_backend.build_knn_graph(first, Metric::L2, params, RunControl{});
  const KnnGraph gpu_second = gpu_backend.build_knn_graph(second, Metric::L2, params, RunControl{});
  const KnnGraph gpu_merged = gpu_backend.merge_knn_graphs(data.view(), split, gpu_first, gpu_second,
                                                           Metric::L2, params, RunControl{});
  const KnnGraph cpu_first = gnnd_build(first, Metric::L2, params, cpu_control());
  const KnnGraph cpu_second = gnnd_build(second, Metric::L2, params, cpu_control());
  const KnnGraph cpu_merged = ggm_merge(data.view(), split, cpu_first, cpu_second, Metric::L2, params,
                                        cpu_control());
  expect_valid_lists(gpu_merged);
  const double gpu_recall = graph_recall(gpu_merged, exact, 10);
  const double cpu_recall = graph_recall(cpu_merged, exact, 10);
  const KnnGraph direct = gpu_backend.build_knn_graph(data.view(), Metric::L2, params, RunControl{});
  const double direct_recall = graph_recall(direct, exact, 10);
  std::printf("GGM recall@10: gpu %.4f cpu %.4f (direct gpu GNND %.4f)\n", gpu_recall, cpu_recall,
              direct_recall);
  EXPECT_GE(gpu_recall, cpu_recall - 0.01);
  EXPECT_GE(gpu_recall, direct_recall - 0.01);
}

// A merge of data's rows past split into the graphs of those before it, as
// the CPU builds them (k 32, degree 16), the old k-NN lists without their
// distances, as an index keeps them.
struct MergeCase {
  GnndParams params;
  DiversifyParams diversify;
  KnnGraph old_knn;
  TsdgGraph old_search;
  KnnGraph batch_knn;
  MergeInput in;

  MergeCase(MatrixView data, int64_t split) {
    params.k = 32;
    params.min_update_rate = kMergeMinUpdateRate;
    diversify.degree = 16;
    old_knn = gnnd_build(data.slice(0, split), Metric::L2, params, cpu_control());
    old_search = diversify_tsdg(data.slice(0, split), Metric::L2, old_knn, diversify, cpu_control());
    batch_knn = gnnd_build(data.slice(split, data.rows - split), Metric::L2, params, cpu_control());
    in.data = data;
    in.split = split;
    in.k = params.k;
    in.degree = diversify.degree;
    in.old_knn_ids = old_knn.ids.data();
    in.old_neighbors = old_search.neighbors.data();
    in.old_lambdas = old_search.lambdas.data();
    in.batch_knn = &batch_knn;
  }
  MergeCase(const MergeCase&) = delete;
  MergeCase& operator=(const MergeCase&) = delete;
};

// A merge's graphs, in arrays as a caller hands them over.
struct Merged {
  KnnGraph knn;
  TsdgGraph search;
  std::vector<uint8_t> knn_change, search_changed;
  MergeOutput out;
  Merged(int64_t n, int k, int degree) : knn(n, k), search(n, degree), knn_change(n, 255), search_changed(n, 255) {
    out.knn_ids = knn.ids.data();
    out.knn_dists = knn.dists.data();
    out.neighbors = search.neighbors.data();
    out.lambdas = search.lambdas.data();
    out.knn_change = knn_change.data();
    out.search_changed = search_changed.data();
  }
  Merged(const Merged&) = delete;
  Merged& operator=(const Merged&) = delete;
};

// A merge of a batch (5%) into an indexed set on the device (merge.h,
// index_merge.cu), against the CPU's merge of the same graphs: k-NN lists as
// good, the old lists that took no batch row exactly as they were, the
// search graph as good for searches, and the changed flags true to the lists.
// The same merge with the indexed rows taken from a resident GPU index of
// them (copied on the device, the batch uploaded) while they are copied into
// the merge's rows on the host is as good.
TEST(GpuMerge, MatchesTheCpuMerge) {
  TSDG_REQUIRE_GPU();
  const int64_t split = 40000;
  const int64_t rows = 42000;
  const int64_t queries = 500;
  const Matrix all = make_clustered(clustered_spec(rows + queries, 48, 40, 9));
  const MatrixView data = all.view().slice(0, rows);
  const MatrixView query_rows = all.view().slice(rows, queries);
  const MergeCase merge_case(data, split);
  const GnndParams& params = merge_case.params;
  const DiversifyParams& diversify = merge_case.diversify;
  const KnnGraph& old_knn = merge_case.old_knn;
  const TsdgGraph& old_search = merge_case.old_search;
  const MergeInput& in = merge_case.in;
  Merged on_gpu(rows, params.k, diversify.degree);
  Merged on_cpu(rows, params.k, diversify.degree);
  Merged from_resident(rows, params.k, diversify.degree);
  gpu_backend.merge_graph(in, on_gpu.out, Metric::L2, params, diversify, RunControl{});
  merge_graph_incremental(in, on_cpu.out, Metric::L2, params, diversify, cpu_control());
  const auto resident = gpu_backend.make_search_index(data.slice(0, split), old_search, Metric::L2);
  ASSERT_NE(resident->device_rows(), nullptr);
  // and its indexed rows still being copied into the merge's rows (as the
  // worker hands them, tsdg_capi.h's old_rows_source)
  std::vector<float> copied_rows(data.data, data.data + rows * data.dim);
  std::fill(copied_rows.begin(), copied_rows.begin() + split * data.dim, 0.0f);
  MergeInput in_resident = in;
  in_resident.data = MatrixView{copied_rows.data(), rows, data.dim};
  in_resident.old_rows_index = resident.get();
  in_resident.old_rows_source = data.data;
  in_resident.old_rows_copied = std::async(std::launch::async, [&] {
                                  std::copy(data.data, data.data + split * data.dim, copied_rows.begin());
                                }).share();
  gpu_backend.merge_graph(in_resident, from_resident.out, Metric::L2, params, diversify, RunControl{});
  in_resident.old_rows_copied.wait();
  ASSERT_TRUE(std::equal(copied_rows.begin(), copied_rows.end(), data.data));
  expect_valid_lists(from_resident.knn);

  expect_valid_lists(on_gpu.knn);
  int64_t changed = 0;
  for (int64_t u = 0; u < split; ++u) {
    const uint32_t* merged = on_gpu.knn.list(u);
    const bool holds_batch_row = std::any_of(merged, merged + params.k, [&](uint32_t v) {
      return v != kInvalidId && v >= static_cast<uint32_t>(split);
    });
    ASSERT_EQ(on_gpu.knn_change[u], holds_batch_row ? kKnnListGainedNewRows : kKnnListSame) << "old list " << u;
    if (holds_batch_row) {
      ++changed;
    } else {
      // the same rows; near-ties may be ordered apart by the device's distances
      ASSERT_TRUE(std::is_permutation(merged, merged + params.k, old_knn.list(u))) << "old list " << u;
    }
    const bool search_differs = !std::equal(old_search.list(u), old_search.list(u) + diversify.degree,
                                            on_gpu.search.list(u)) ||
                                !std::equal(old_search.list_lambdas(u), old_search.list_lambdas(u) + diversify.degree,
                                            on_gpu.search.list_lambdas(u));
    ASSERT_EQ(on_gpu.search_changed[u], search_differs ? 1 : 0) << "search list " << u;
  }
  for (int64_t u = split; u < rows; ++u) {
    ASSERT_EQ(on_gpu.knn_change[u], kKnnListRebuilt);
    ASSERT_EQ(on_gpu.search_changed[u], 1);
  }
  const KnnGraph exact = exact_knn_graph(data, Metric::L2, 10, cpu_control());
  const double gpu_knn = graph_recall(on_gpu.knn, exact, 10);
  const double cpu_knn = graph_recall(on_cpu.knn, exact, 10);

  std::vector<uint32_t> truth(queries * 10);
  std::vector<float> truth_dists(truth.size());
  exact_knn(data, query_rows, Metric::L2, 10, truth.data(), truth_dists.data(), cpu_control());
  SearchParams search;
  search.ef = 32;
  const auto search_recall = [&](const TsdgGraph& graph) {
    auto index = make_cpu_backend()->make_search_index(data, graph, Metric::L2);
    std::vector<uint32_t> ids(truth.size());
    std::vector<float> dists(truth.size());
    index->search(query_rows, search, ids.data(), dists.data(), cpu_control());
    return recall_at(ids.data(), 10, truth.data(), 10, queries, 10);
  };
  const double gpu_search = search_recall(on_gpu.search);
  const double cpu_search = search_recall(on_cpu.search);
  const double resident_knn = graph_recall(from_resident.knn, exact, 10);
  const double resident_search = search_recall(from_resident.search);
  std::printf("merge on the GPU: k-NN recall@10 %.4f (cpu %.4f, rows from a resident index %.4f), "
              "search recall@10 at ef 32 %.4f (cpu %.4f, resident %.4f); %lld of %lld old k-NN lists changed\n",
              gpu_knn, cpu_knn, resident_knn, gpu_search, cpu_search, resident_search,
              static_cast<long long>(changed), static_cast<long long>(split));
  EXPECT_GE(gpu_knn, cpu_knn - 0.01);
  EXPECT_GE(gpu_search, cpu_search - 0.01);
  EXPECT_GE(resident_knn, cpu_knn - 0.01);
  EXPECT_GE(resident_search, cpu_search - 0.01);
  EXPECT_LT(changed, split);
}

// A batch of at most a hundredth of the indexed rows takes the CPU's
// incremental merge on the GPU backend too (the same lists as
// merge_graph_incremental's), which leaves the search lists the batch does
// not reach as they were: the device's merge of the whole graph would
// change most of them, and the index would write and check them all again.
TEST(GpuMerge, SmallBatchesLeaveTheListsTheyDoNotReach) {
  TSDG_REQUIRE_GPU();
  const int64_t split = 40000;
  const int64_t rows = 40200;
  const Matrix all = make_clustered(clustered_spec(rows, 48, 40, 9));
  const MergeCase merge_case(all.view(), split);
  const GnndParams& params = merge_case.params;
  const DiversifyParams& diversify = merge_case.diversify;
  Merged on_gpu(rows, params.k, diversify.degree);
  Merged on_cpu(rows, params.k, diversify.degree);
  gpu_backend.merge_graph(merge_case.in, on_gpu.out, Metric::L2, params, diversify, cpu_control());
  merge_graph_incremental(merge_case.in, on_cpu.out, Metric::L2, params, diversify, cpu_control());
  EXPECT_TRUE(std::equal(on_gpu.knn.ids.begin(), on_gpu.knn.ids.end(), on_cpu.knn.ids.begin()));
  EXPECT_TRUE(std::equal(on_gpu.search.neighbors.begin(), on_gpu.search.neighbors.end(),
                         on_cpu.search.neighbors.begin()));
  EXPECT_TRUE(std::equal(on_gpu.search.lambdas.begin(), on_gpu.search.lambdas.end(), on_cpu.search.lambdas.begin()));
  EXPECT_EQ(on_gpu.search_changed, on_cpu.search_changed);
  int64_t changed = 0;
  for (int64_t u = 0; u < split; ++u) changed += on_gpu.search_changed[u];
  std::printf("merge of %lld rows into %lld on the GPU backend: %lld old search lists changed\n",
              static_cast<long long>(rows - split), static_cast<long long>(split), static_cast<long long>(changed));
  EXPECT_LT(changed, split / 10);
}

// A merge on the device writes its search lists out in Phase::Link, its
// progress counting the rows whose lists are in its output (in row order),
// then links the graph's components and marks in relinked each list that
// changes after that (tsdg_capi.h: the session writes the list pages as they
// come and those again afterwards). On well separated clusters, which the
// linking must bridge, every list as it was when counted is the final one
// but for those marked. The k-NN lists and their change flags are final once
// the merge enters Phase::Diversify (the session writes the k-NN pages from
// then on).
TEST(GpuMerge, PublishesItsListsOnlyWhenFinal) {
  TSDG_REQUIRE_GPU();
  const int64_t split = 20000;
  const int64_t rows = 21000;
  SyntheticSpec spec = clustered_spec(rows, 32, 24, 13);
  spec.spread = 0.05f;
  spec.noise = 0.01f;
  const Matrix all = make_clustered(spec);
  const MatrixView data = all.view();
  const MergeCase merge_case(data, split);
  const GnndParams& params = merge_case.params;
  const DiversifyParams& diversify = merge_case.diversify;
  const MergeInput& in = merge_case.in;
  KnnGraph knn(rows, params.k);
  TsdgGraph search(rows, diversify.degree);
  std::vector<uint8_t> knn_change(rows), search_changed(rows), relinked(rows, 0);
  MergeOutput out;
  out.knn_ids = knn.ids.data();
  out.neighbors = search.neighbors.data();
  out.lambdas = search.lambdas.data();
  out.knn_change = knn_change.data();
  out.search_changed = search_changed.data();
  out.relinked = relinked.data();
  struct Published {
    const TsdgGraph* search;
    const MergeOutput* out;
    int64_t knn_entries = 0;
    std::vector<uint32_t> knn_ids;  // as they were when Phase::Diversify was first seen
    std::vector<uint8_t> knn_change;
    std::atomic<int> phase{0};
    std::atomic<int64_t> done{0};
    std::atomic<int64_t> total{0};
    TsdgGraph lists;    // each list as it was when counted
    int64_t rows = 0;  // the lists counted so far
  } published;
  published.search = &search;
  published.out = &out;
  published.knn_entries = rows * params.k;
  published.lists = TsdgGraph(rows, diversify.degree);
  RunControl control;
  control.phase = &published.phase;
  control.progress_done = &published.done;
  control.progress_total = &published.total;
  control.poll_now_arg = &published;
  control.poll_now = [](void* arg) {
    auto* p = static_cast<Published*>(arg);
    const int phase = p->phase.load();
    if (p->knn_ids.empty() && (phase == static_cast<int>(Phase::Diversify) || phase == static_cast<int>(Phase::Link))) {
      p->knn_ids.assign(p->out->knn_ids, p->out->knn_ids + p->knn_entries);
      p->knn_change.assign(p->out->knn_change, p->out->knn_change + p->search->nodes);
    }
    if (phase != static_cast<int>(Phase::Link)) return;
    const int64_t done = p->done.load();
    const int degree = p->search->degree;
    for (int64_t u = p->rows; u < done; ++u) {
      std::copy(p->search->list(u), p->search->list(u) + degree, p->lists.neighbors.begin() + u * degree);
      std::copy(p->search->list_lambdas(u), p->search->list_lambdas(u) + degree, p->lists.lambdas.begin() + u * degree);
    }
    p->rows = std::max(p->rows, done);
  };
  gpu_backend.merge_graph(in, out, Metric::L2, params, diversify, control);
  ASSERT_EQ(published.rows, rows) << "not every list was counted before the merge returned";
  EXPECT_TRUE(std::equal(knn.ids.begin(), knn.ids.end(), published.knn_ids.begin(), published.knn_ids.end()))
      << "the k-NN lists changed after Phase::Diversify";
  EXPECT_EQ(published.knn_change, knn_change) << "the k-NN change flags changed after Phase::Diversify";
  int64_t marked = 0;
  for (int64_t u = 0; u < rows; ++u) {
    marked += relinked[u];
    if (relinked[u] != 0) continue;
    ASSERT_TRUE(std::equal(search.list(u), search.list(u) + diversify.degree, published.lists.list(u)))
        << "list " << u << " changed after it was counted, without its mark";
    ASSERT_TRUE(std::equal(search.list_lambdas(u), search.list_lambdas(u) + diversify.degree,
                           published.lists.list_lambdas(u)))
        << "lambdas of " << u << " changed after they were counted, without their mark";
  }
  std::printf("merge on the GPU: %lld of %lld lists changed by the component linking\n",
              static_cast<long long>(marked), static_cast<long long>(rows));
  EXPECT_GT(marked, 0);
  EXPECT_LT(marked, rows / 10);
}

// With a GPU memory budget below what one pass needs, GNND builds shards and
// merges every pair by GGM (Wang et al., 2021, section 5); the whole-set GGM, which
// has no such path, reports OutOfMemory under the same budget.
TEST(GpuGnnd, BuildsByShardsWhenTheSetDoesNotFit) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(30000, 48, 40, 8));
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 10, cpu_control());
  GnndParams params;
  params.k = 32;
  const KnnGraph direct = gpu_backend.build_knn_graph(data.view(), Metric::L2, params, RunControl{});
  ::setenv("TSDG_GPU_MEMORY_LIMIT_MB", "12", 1);  // the set needs about 22 MiB
  KnnGraph sharded;
  bool merge_out_of_memory = false;
  try {
    sharded = gpu_backend.build_knn_graph(data.view(), Metric::L2, params, RunControl{});
    gpu_backend.merge_knn_graphs(data.view(), 15000, KnnGraph(15000, 32), KnnGraph(15000, 32),
                                 Metric::L2, params, RunControl{});
  } catch (const Error& e) {
    merge_out_of_memory = e.status() == Status::OutOfMemory;
  }
  ::unsetenv("TSDG_GPU_MEMORY_LIMIT_MB");
  EXPECT_TRUE(merge_out_of_memory);
  ASSERT_EQ(sharded.nodes, data.rows);
  expect_valid_lists(sharded);
  const double sharded_recall = graph_recall(sharded, exact, 10);
  const double direct_recall = graph_recall(direct, exact, 10);
  std::printf("GNND by shards recall@10: %.4f (one pass %.4f)\n", sharded_recall, direct_recall);
  EXPECT_GE(sharded_recall, direct_recall - 0.01);
}

TEST(GpuGgm, RejectsMismatchedGraphs) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(1000, 8, 4, 7));
  GnndParams params;
  params.k = 8;
  const KnnGraph half(500, 8);
  try {
    gpu_backend.merge_knn_graphs(data.view(), 400, half, half, Metric::L2, params, RunControl{});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
  }
}

// The distances of lists given as ids (a merge's old k-NN lists), on the
// device as on the CPU, for each metric; +inf for a missing neighbor.
TEST(GpuGgm, ListDistancesAsOnTheCpu) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(5000, 40, 10, 9));
  const KnnGraph lists = exact_knn_graph(data.view(), Metric::L2, 16, cpu_control());
  std::vector<uint32_t> ids(lists.ids.begin(), lists.ids.end());
  ids[7] = kInvalidId;
  const auto cpu_backend = make_cpu_backend();
  for (Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine}) {
    std::vector<float> on_gpu(ids.size()), on_cpu(ids.size());
    gpu_backend.list_distances(data.view(), metric, ids.data(), lists.k, on_gpu.data(), RunControl{});
    cpu_backend->list_distances(data.view(), metric, ids.data(), lists.k, on_cpu.data(), cpu_control());
    EXPECT_TRUE(std::isinf(on_gpu[7]));
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i == 7) continue;
      ASSERT_NEAR(on_gpu[i], on_cpu[i], 1e-4f * std::max(1.0f, std::fabs(on_cpu[i]))) << "entry " << i;
    }
  }
}

}  // namespace
}  // namespace tsdg
