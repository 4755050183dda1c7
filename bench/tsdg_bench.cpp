// tsdg-bench: times and checks every step of the index on one data set
// against exact answers, next to brute force and hnswlib on the same data and
// threads. See --help for the options; docs/benchmarks.md for results.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "bench_options.h"
#include "bench_report.h"
#include "bruteforce.h"
#include "dataset_io.h"
#include "distance.h"
#include "diversify.h"
#include "hnsw_baseline.h"
#include "merge_mode.h"
#include "recall.h"
#include "search.h"
#include "synthetic.h"
#include "thread_pool.h"

namespace tsdg {
namespace bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr int kGraphRecallAt = 10;
constexpr double kTargetRecall = 0.95;

struct Workload {
  Matrix data;
  Matrix queries;
  std::string source;
};

Workload load_workload(const BenchOptions& o) {
  Workload w;
  if (o.data_path.empty()) {
    w.data = make_clustered(o.synthetic);
    w.queries = make_clustered_queries(o.synthetic, o.query_count, o.query_seed);
    w.source = "synthetic";
  } else {
    w.data = read_vectors(o.data_path, o.max_rows);
    w.source = o.data_path;
    if (!o.query_path.empty()) {
      w.queries = read_vectors(o.query_path, o.query_count);
    } else {
      // Hold the last rows out as queries.
      const int64_t count = std::min(o.query_count, w.data.rows / 10);
      w.queries = Matrix(count, w.data.dim);
      const int64_t first = w.data.rows - count;
      std::copy(w.data.row(first), w.data.row(first) + count * w.data.dim, w.queries.values.begin());
      w.data.values.resize(static_cast<size_t>(first) * w.data.dim);
      w.data.rows = first;
    }
    if (w.queries.dim != w.data.dim) {
      throw Error(Status::InvalidArgument, "queries and data differ in dimension");
    }
  }
  if (o.metric == Metric::Cosine) {
    normalize_rows(w.data.values.data(), w.data.rows, w.data.dim);
    normalize_rows(w.queries.values.data(), w.queries.rows, w.queries.dim);
  }
  return w;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
#ifdef TSDG_HAVE_CUDA
  char message[256] = {0};
  Backend* backend = tsdg_cuda_create_backend(0, message, sizeof(message));
  if (backend == nullptr) throw Error(Status::DeviceError, std::string("cuda: ") + message);
  return std::unique_ptr<Backend>(backend);
#else
  throw Error(Status::InvalidArgument, "this tsdg-bench was built without CUDA");
#endif
}

// The metric as --metric spells it.
const char* metric_flag(Metric metric) {
  switch (metric) {
    case Metric::L2: return "l2";
    case Metric::InnerProduct: return "ip";
    case Metric::Cosine: return "cosine";
    case Metric::L1: return "l1";
  }
  return "?";
}

// Exact neighbors (self excluded) of a random sample of rows, to score k-NN
// graphs without the exact graph of every row.
struct GraphTruth {
  std::vector<uint32_t> rows;
  std::vector<uint32_t> ids;  // rows.size() * kGraphRecallAt
};

GraphTruth graph_truth(MatrixView data, Metric metric, int64_t sample, const RunControl& control) {
  GraphTruth truth;
  std::mt19937_64 rng(12345);
  std::vector<uint32_t> all(data.rows);
  for (int64_t i = 0; i < data.rows; ++i) all[i] = static_cast<uint32_t>(i);
  std::shuffle(all.begin(), all.end(), rng);
  truth.rows.assign(all.begin(), all.begin() + std::min<int64_t>(sample, data.rows));
  std::sort(truth.rows.begin(), truth.rows.end());
  const int64_t count = static_cast<int64_t>(truth.rows.size());
  Matrix sampled(count, data.dim);
  for (int64_t s = 0; s < count; ++s) {
    std::copy(data.row(truth.rows[s]), data.row(truth.rows[s]) + data.dim, sampled.row(s));
  }
  const int width = kGraphRecallAt + 1;
  std::vector<uint32_t> ids(count * width);
  std::vector<float> dists(ids.size());
  exact_knn(data, sampled.view(), metric, width, ids.data(), dists.data(), control);
  truth.ids.assign(count * kGraphRecallAt, kInvalidId);
  for (int64_t s = 0; s < count; ++s) {
    int out = 0;
    for (int j = 0; j < width && out < kGraphRecallAt; ++j) {
      if (ids[s * width + j] == truth.rows[s]) continue;
      truth.ids[s * kGraphRecallAt + out++] = ids[s * width + j];
    }
  }
  return truth;
}

// The k nearest rows of data for each query: the float32 brute force's 2k
// nearest, ranked again by distances computed in float64 (L2), so that near
// ties are ordered exactly.
std::vector<uint32_t> exact_truth(MatrixView data, MatrixView queries, Metric metric, int k,
                                  const RunControl& control) {
  const int width = static_cast<int>(std::min<int64_t>(metric == Metric::L2 ? 2 * k : k, data.rows));
  std::vector<uint32_t> ids(queries.rows * width);
  std::vector<float> dists(ids.size());
  exact_knn(data, queries, metric, width, ids.data(), dists.data(), control);
  std::vector<uint32_t> truth(queries.rows * k, kInvalidId);
  parallel_for(control, queries.rows, 64, [&](int64_t begin, int64_t end, int) {
    std::vector<std::pair<double, uint32_t>> ranked;
    for (int64_t q = begin; q < end; ++q) {
      ranked.clear();
      for (int j = 0; j < width; ++j) {
        const uint32_t id = ids[q * width + j];
        if (id == kInvalidId) continue;
        double d = dists[q * width + j];
        if (metric == Metric::L2) {
          d = 0.0;
          for (int c = 0; c < data.dim; ++c) {
            const double diff = static_cast<double>(queries.row(q)[c]) - static_cast<double>(data.row(id)[c]);
            d += diff * diff;
          }
        }
        ranked.emplace_back(d, id);
      }
      std::sort(ranked.begin(), ranked.end());
      for (int j = 0; j < k && j < static_cast<int>(ranked.size()); ++j) truth[q * k + j] = ranked[j].second;
    }
  });
  return truth;
}

double graph_recall(const KnnGraph& graph, const GraphTruth& truth) {
  const int64_t count = static_cast<int64_t>(truth.rows.size());
  std::vector<uint32_t> found(count * kGraphRecallAt, kInvalidId);
  const int width = std::min(graph.k, kGraphRecallAt);
  for (int64_t s = 0; s < count; ++s) {
    std::copy_n(graph.list(truth.rows[s]), width, &found[s * kGraphRecallAt]);
  }
  return recall_at(found.data(), kGraphRecallAt, truth.ids.data(), kGraphRecallAt, count,
                   kGraphRecallAt);
}

struct SweepPoint {
  double recall = 0;
  // Queries none of whose k true neighbors were found: on clustered data,
  // mostly walks that ended in another cluster than the query's.
  int64_t queries_without_hit = 0;
  double qps = 0;
  double distances_per_query = 0;
};

// record with the figures of a sweep point after its own.
Record& add_point(Record& record, const SweepPoint& p) {
  return record.add("recall", p.recall)
      .add("without_hit", p.queries_without_hit)
      .add("qps", p.qps, 6)
      .add("dist_per_query", p.distances_per_query, 5);
}

int64_t queries_without_hit(const std::vector<uint32_t>& found, const std::vector<uint32_t>& truth, int64_t queries,
                            int k) {
  int64_t without = 0;
  for (int64_t i = 0; i < queries; ++i) {
    const uint32_t* t = truth.data() + i * k;
    const uint32_t* f = found.data() + i * k;
    without += std::none_of(f, f + k, [&](uint32_t id) { return std::find(t, t + k, id) != t + k; });
  }
  return without;
}

// Runs search(first, count, ids) over all queries in batches until at least
// min_seconds have passed; counts distances through count_distances().
template <class SearchBatch, class CountDistances>
SweepPoint measure(int64_t queries, int k, int64_t batch, const std::vector<uint32_t>& truth,
                   double min_seconds, SearchBatch search, CountDistances count_distances) {
  std::vector<uint32_t> ids(queries * k);
  if (batch <= 0) batch = queries;
  // One untimed batch first: lazy setup (entry points) and cold caches.
  search(0, std::min(batch, queries), ids.data());
  const int64_t distances_before = count_distances();
  int64_t passes = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  do {
    for (int64_t first = 0; first < queries; first += batch) {
      search(first, std::min(batch, queries - first), ids.data() + first * k);
    }
    ++passes;
    elapsed = seconds_since(start);
  } while (elapsed < min_seconds);
  SweepPoint point;
  point.recall = recall_at(ids.data(), k, truth.data(), k, queries, k);
  point.queries_without_hit = queries_without_hit(ids, truth, queries, k);
  point.qps = static_cast<double>(passes * queries) / elapsed;
  point.distances_per_query =
      static_cast<double>(count_distances() - distances_before) / (passes * queries);
  return point;
}

// The best QPS among points at or above the target recall.
struct Best {
  double qps = 0;
  double recall = 0;
  int ef = 0;
  void offer(const SweepPoint& p, int ef_used) {
    if (p.recall >= kTargetRecall && p.qps > qps) {
      qps = p.qps;
      recall = p.recall;
      ef = ef_used;
    }
  }
};

std::string today() {
  char text[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return text;
}

int run(const BenchOptions& o) {
  Report report(o.json_path);
  ThreadPool pool(o.threads);
  RunControl control;
  control.pool = &pool;
  std::unique_ptr<Backend> backend = make_backend(o.backend);

  Clock::time_point start = Clock::now();
  const Workload w = load_workload(o);
  const MatrixView data = w.data.view();
  const MatrixView queries = w.queries.view();
  Record data_record("data");
  data_record.add("source", w.source)
      .add("rows", data.rows)
      .add("dim", data.dim)
      .add("queries", queries.rows)
      .add("metric", metric_flag(o.metric));
  if (o.data_path.empty()) {
    data_record.add("clusters", o.synthetic.clusters)
        .add("intrinsic_dim", o.synthetic.intrinsic_dim)
        .add("spread", o.synthetic.spread)
        .add("absolute_scale", o.synthetic.absolute_scale ? 1 : 0)
        .add("noise", o.synthetic.noise)
        .add("seed", static_cast<int64_t>(o.synthetic.seed));
  }
  report.emit(data_record.add("threads", pool.size())
                  .add("backend", backend->name())
                  .add("kernel", distance_kernels().name)
                  .add("date", today())
                  .add("load_s", seconds_since(start)));

  // Ground truth by the core's brute force (ranked in float64), which is also the baseline.
  const int k = o.k;
  std::vector<uint32_t> truth;
  {
    start = Clock::now();
    truth = exact_truth(data, queries, o.metric, k, control);
    const double elapsed = seconds_since(start);
    report.emit(Record("brute_force")
                    .add("k", k)
                    .add("time_s", elapsed)
                    .add("qps", queries.rows / elapsed)
                    .add("recall", 1.0));
  }
  const GraphTruth sample_truth = graph_truth(data, o.metric, o.recall_sample, control);

  if (o.exact_graph) {
    start = Clock::now();
    const int width = static_cast<int>(std::min<int64_t>(o.gnnd.k + 1, data.rows));
    std::vector<uint32_t> ids(data.rows * width);
    std::vector<float> dists(ids.size());
    backend->exact_knn(data, data, o.metric, width, ids.data(), dists.data(), control);
    report.emit(Record("exact_graph").add("k", o.gnnd.k).add("time_s", seconds_since(start)));
  }

  GnndParams gnnd = o.gnnd;
  if (gnnd.samples == 0) gnnd.samples = default_gnnd_samples(gnnd.k, o.backend == "cpu", data.rows);
  start = Clock::now();
  const KnnGraph knn = backend->build_knn_graph(data, o.metric, gnnd, control);
  const double gnnd_seconds = seconds_since(start);
  report.emit(Record("gnnd")
                  .add("k", o.gnnd.k)
                  .add("samples", gnnd.samples)
                  .add("iterations", o.gnnd.iterations)
                  .add("time_s", gnnd_seconds)
                  .add("recall_at_10", graph_recall(knn, sample_truth)));

  if (o.ggm) {
    const int64_t split = data.rows / 2;
    start = Clock::now();
    const KnnGraph first = backend->build_knn_graph(data.slice(0, split), o.metric, gnnd, control);
    const KnnGraph second =
        backend->build_knn_graph(data.slice(split, data.rows - split), o.metric, gnnd, control);
    const double halves_seconds = seconds_since(start);
    start = Clock::now();
    const KnnGraph merged =
        backend->merge_knn_graphs(data, split, first, second, o.metric, gnnd, control);
    const double merge_seconds = seconds_since(start);
    report.emit(Record("ggm")
                    .add("halves_s", halves_seconds)
                    .add("merge_s", merge_seconds)
                    .add("time_s", halves_seconds + merge_seconds)
                    .add("recall_at_10", graph_recall(merged, sample_truth))
                    .add("direct_recall_at_10", graph_recall(knn, sample_truth))
                    .add("direct_time_s", gnnd_seconds));
  }

  const int64_t check_rows = o.build_check_rows > 0 ? o.build_check_rows : kBuildCheckRows;
  start = Clock::now();
  TsdgGraph graph = backend->diversify(data, o.metric, knn, o.diversify, control);
  double diversify_seconds = seconds_since(start);
  // The layer depends on the rows alone: built before the check, whose
  // walks start from it as the searches do.
  TsdgGraph layer;
  double layer_seconds = 0;
  if (o.layer) {
    start = Clock::now();
    layer = build_navigating_layer(*backend, data, o.metric, o.diversify, o.gnnd.seed, control);
    layer_seconds = seconds_since(start);
  }
  if (o.build_check) {
    start = Clock::now();
    const int64_t linked = link_rows_missed_by_narrow_walks(*backend, data, o.metric, GraphSpan::of(graph), control,
                                                            check_rows, {}, nullptr, nullptr, GraphView::of(layer));
    const double check_seconds = seconds_since(start);
    diversify_seconds += check_seconds;
    report.emit(Record("build_check").add("rows_linked", linked).add("time_s", check_seconds));
  }
  {
    int64_t edges = 0;
    int64_t edges_at_most_1 = 0;
    int64_t edges_at_most_4 = 0;
    for (size_t i = 0; i < graph.neighbors.size(); ++i) {
      if (graph.neighbors[i] == kInvalidId) continue;
      ++edges;
      edges_at_most_1 += graph.lambdas[i] <= 1;
      edges_at_most_4 += graph.lambdas[i] <= 4;
    }
    const double nodes = static_cast<double>(std::max<int64_t>(graph.nodes, 1));
    report.emit(Record("diversify")
                    .add("degree", o.diversify.degree)
                    .add("alpha", o.diversify.alpha)
                    .add("lambda0", o.diversify.lambda0)
                    .add("pivots", o.diversify.pivot_candidates)
                    .add("pivot_stride", o.diversify.pivot_stride)
                    .add("random_candidates", o.diversify.random_candidates)
                    .add("time_s", diversify_seconds)
                    .add("avg_degree", edges / nodes)
                    .add("avg_degree_lambda_le_1", edges_at_most_1 / nodes)
                    .add("avg_degree_lambda_le_4", edges_at_most_4 / nodes)
                    .add("build_s", gnnd_seconds + diversify_seconds));
  }

  if (o.one_call_build) {
    start = Clock::now();
    std::unique_ptr<DeviceRows> rows_left;
    TsdgGraph built =
        backend->build_tsdg_graph(data, o.metric, gnnd, o.diversify, nullptr, nullptr, control, &rows_left);
    if (o.build_check) {
      link_rows_missed_by_narrow_walks(*backend, data, o.metric, GraphSpan::of(built), control, check_rows, {},
                                       std::move(rows_left), nullptr, GraphView::of(layer));
    }
    report.emit(Record("one_call_build").add("time_s", seconds_since(start)).add("nodes", built.nodes));
  }

  // The CPU index is built directly, to read its distance counter.
  std::unique_ptr<SearchIndex> index;
  CpuSearchIndex* cpu_index = nullptr;
  start = Clock::now();
  if (o.backend == "cpu") {
    auto owned = std::make_unique<CpuSearchIndex>(data, GraphView::of(graph), o.metric);
    cpu_index = owned.get();
    index = std::move(owned);
  } else {
    index = backend->make_search_index(data, graph, o.metric);
  }
  report.emit(Record("index").add("time_s", seconds_since(start)));
  if (o.layer) {
    index->set_layer(GraphView::of(layer));
    report.emit(Record("layer").add("nodes", layer.nodes).add("time_s", layer_seconds));
  }
  {
    SearchParams params;
    params.entry_samples = o.entry_samples;
    params.entry_stride = o.entry_stride;
    start = Clock::now();
    const size_t entries = index->entry_points(params, control).size();
    report.emit(Record("entries").add("count", static_cast<int64_t>(entries)).add("time_s", seconds_since(start)));
  }
  auto tsdg_distances = [&]() -> int64_t {
    return cpu_index ? cpu_index->distance_computations() : 0;
  };

  Best tsdg_best;
  std::vector<float> dists(queries.rows * k);
  const std::vector<int> gpu_kernels = o.backend == "cpu" ? std::vector<int>{0} : o.gpu_kernels;
  for (int lambda_limit : o.lambda_limits) {
    for (float slack : o.slacks) {
      for (int64_t batch : o.batch_sizes) {
        for (int gpu_kernel : gpu_kernels) {
          for (int ef : o.ef_list) {
            SearchParams params;
            params.k = k;
            params.ef = ef;
            params.lambda_limit = lambda_limit;
            params.slack = slack;
            params.entry_samples = o.entry_samples;
            params.entry_stride = o.entry_stride;
            params.gpu_kernel = gpu_kernel;
            params.gpu_search_width = o.gpu_search_width;
            const SweepPoint p = measure(
                queries.rows, k, batch, truth, o.min_seconds,
                [&](int64_t first, int64_t count, uint32_t* ids) {
                  index->search(queries.slice(first, count), params, ids, dists.data() + first * k,
                                control);
                },
                tsdg_distances);
            if (batch == o.batch_sizes.front() && slack == o.slacks.front() && gpu_kernel == gpu_kernels.front()) {
              tsdg_best.offer(p, ef);
            }
            report.emit(add_point(Record("tsdg_search")
                                  .add("ef", ef)
                                  .add("lambda_limit", lambda_limit)
                                  .add("slack", slack)
                                  .add("gpu_kernel", gpu_kernel)
                                  .add("batch", batch > 0 ? batch : queries.rows), p));
          }
        }
      }
    }
  }

  // A GPU run also times, on the same queries, the exact scan of the rows
  // resident on the GPU (the GPU brute force) at each batch size, and the CPU
  // search on the same graph.
  if (o.backend != "cpu") {
    for (int64_t batch : o.batch_sizes) {
      SearchParams params;
      params.k = k;
      params.gpu_kernel = 3;
      const SweepPoint p = measure(
          queries.rows, k, batch, truth, o.min_seconds,
          [&](int64_t first, int64_t count, uint32_t* ids) {
            index->search(queries.slice(first, count), params, ids, dists.data() + first * k,
                          control);
          },
          [] { return int64_t{0}; });
      report.emit(Record("gpu_brute_force")
                      .add("batch", batch > 0 ? batch : queries.rows)
                      .add("recall", p.recall)
                      .add("qps", p.qps, 6));
    }
    CpuSearchIndex cpu(data, GraphView::of(graph), o.metric);
    cpu.set_layer(GraphView::of(layer));
    for (int ef : o.ef_list) {
      SearchParams params;
      params.k = k;
      params.ef = ef;
      params.entry_samples = o.entry_samples;
      params.entry_stride = o.entry_stride;
      const SweepPoint p = measure(
          queries.rows, k, 0, truth, o.min_seconds,
          [&](int64_t first, int64_t count, uint32_t* ids) {
            cpu.search(queries.slice(first, count), params, ids, dists.data() + first * k, control);
          },
          [&] { return cpu.distance_computations(); });
      report.emit(add_point(Record("cpu_search")
                            .add("ef", ef)
                            .add("batch", queries.rows), p));
    }
  }

  Record summary("summary");
  summary.add("tsdg_build_s", gnnd_seconds + diversify_seconds)
      .add("tsdg_qps_at_0.95", tsdg_best.qps, 6)
      .add("tsdg_ef", tsdg_best.ef)
      .add("tsdg_recall", tsdg_best.recall);
#ifdef TSDG_HAVE_HNSWLIB
  if (o.hnsw) {
    start = Clock::now();
    HnswBaseline hnsw(data, o.metric, o.hnsw_m, o.hnsw_ef_construction, control);
    const double hnsw_build_seconds = seconds_since(start);
    report.emit(Record("hnsw_build")
                    .add("m", o.hnsw_m)
                    .add("ef_construction", o.hnsw_ef_construction)
                    .add("time_s", hnsw_build_seconds));
    Best hnsw_best;
    int64_t hnsw_distances = 0;
    for (int ef : o.hnsw_ef_list) {
      const SweepPoint p = measure(
          queries.rows, k, 0, truth, o.min_seconds,
          [&](int64_t first, int64_t count, uint32_t* ids) {
            hnsw_distances += hnsw.search(queries.slice(first, count), k, ef, ids, control);
          },
          [&] { return hnsw_distances; });
      hnsw_best.offer(p, ef);
      report.emit(add_point(Record("hnsw_search").add("ef", ef), p));
    }
    summary.add("hnsw_build_s", hnsw_build_seconds)
        .add("hnsw_qps_at_0.95", hnsw_best.qps, 6)
        .add("hnsw_ef", hnsw_best.ef)
        .add("hnsw_recall", hnsw_best.recall)
        .add("build_speedup", hnsw_build_seconds / (gnnd_seconds + diversify_seconds), 3)
        .add("qps_ratio", hnsw_best.qps > 0 ? tsdg_best.qps / hnsw_best.qps : 0.0, 3);
  }
#endif
  report.emit(summary);
  return 0;
}

}  // namespace

}  // namespace bench
}  // namespace tsdg

int main(int argc, char** argv) {
  try {
    const tsdg::bench::BenchOptions options = tsdg::bench::parse_options(argc, argv);
    if (options.merge_batches > 0) return tsdg::bench::run_merge_benchmark(options);
    return tsdg::bench::run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tsdg-bench: %s\n", e.what());
    return 1;
  }
}
