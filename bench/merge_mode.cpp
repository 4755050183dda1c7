#include "merge_mode.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "bench_report.h"
#include "bruteforce.h"
#include "dataset_io.h"
#include "recall.h"
#include "search.h"
#include "synthetic.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace bench {

namespace {

// What the index computes besides the graph after a build or a merge
// (src/pg/am/tsdgbuild.c, src/pg/merge/tsdgmerge.c): the metapage's navigating set (as many
// entries as TSDG_MAX_ENTRY_POINTS), d_nn1+ and the navigating layer.
constexpr int kIndexEntryPoints = 256;
// The walk of the check for merged rows the searches do not reach: the
// index's default tsdg.ef_search, no λ limit (tsdg.lambda_search's default).
constexpr int kIndexEfSearch = 100;
constexpr int kNoLambdaLimit = 255;
// the check's walks all kept, as the session keeps them when
// maintenance_work_mem has room for them
constexpr int64_t kUnboundedRecords = std::numeric_limits<int64_t>::max();

struct Clocks {
  double wall;
  double cpu;  // the process's CPU seconds, all threads
  static Clocks now() {
    timespec cpu{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    return Clocks{std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
                  static_cast<double>(cpu.tv_sec) + 1e-9 * static_cast<double>(cpu.tv_nsec)};
  }
  Clocks since(const Clocks& start) const { return Clocks{wall - start.wall, cpu - start.cpu}; }
};

// CPU seconds per build phase, taken at the C API's progress polls (every
// 50 ms and at each phase's start). A merge's k-NN phase holds the batch's
// graph; its merge phase GGM with the old lists' distances (the index stores
// ids only); its diversify phase TSDG's update (and, on a GPU, its link
// phase the search lists out and the component linking).
struct PhaseClock {
  Clocks start = Clocks::now();
  Clocks last = start;
  int phase = TSDG_PHASE_KNN_GRAPH;
  double cpu[TSDG_PHASE_LINK + 1] = {};

  static bool poll(void* arg, TsdgBuildPhase phase, int64_t, int64_t) {
    auto* self = static_cast<PhaseClock*>(arg);
    const Clocks now = Clocks::now();
    self->cpu[self->phase] += now.cpu - self->last.cpu;
    self->last = now;
    self->phase = phase;
    return false;
  }
  void finish() { poll(this, static_cast<TsdgBuildPhase>(phase), 0, 0); }
};

void check(TsdgStatus status, const TsdgError& error, const char* what) {
  if (status != TSDG_OK) throw Error(Status::Internal, std::string(what) + ": " + error.message);
}

// This program's other modes call the CUDA backend directly: linked in
// statically (its symbols then stay inside the program, and a library that
// --cuda-library loads calls its own) or as pg_tsdg_cuda.so by name. In the
// latter case a library loaded beside it would call the linked one's
// exported functions, kernels included, and an A/B of two builds would time
// one: a --cuda-library that is not the linked one is refused.
void check_linked_cuda_library([[maybe_unused]] const std::string& requested) {
#ifdef TSDG_HAVE_CUDA
  Dl_info linked;
  if (dladdr(reinterpret_cast<void*>(&tsdg_cuda_create_backend), &linked) == 0 || linked.dli_fname == nullptr) return;
  char linked_path[PATH_MAX];
  char requested_path[PATH_MAX];
  char program_path[PATH_MAX];
  if (realpath(linked.dli_fname, linked_path) == nullptr || realpath(requested.c_str(), requested_path) == nullptr) {
    return;  // a name, not a path: the search finds the linked one
  }
  if (realpath("/proc/self/exe", program_path) != nullptr && std::string(linked_path) == program_path) return;
  if (std::string(linked_path) != requested_path) {
    throw Error(Status::InvalidArgument, std::string("--cuda-library ") + requested_path +
                                             " is not the pg_tsdg_cuda.so this program is linked to (" + linked_path +
                                             "), whose functions it would call: set LD_LIBRARY_PATH to its directory");
  }
#endif
}

// The backend the index's C API calls run on, as the GPU worker loads it
// (--backend cuda: --cuda-library), or NULL for the CPU.
TsdgBackend* load_backend(const BenchOptions& o) {
  if (o.backend == "cpu") return nullptr;
  if (o.backend != "cuda") throw Error(Status::InvalidArgument, "--backend must be cpu or cuda");
  check_linked_cuda_library(o.cuda_library);
  TsdgError error;
  TsdgBackend* backend = tsdg_backend_load(o.cuda_library.c_str(), 0, &error);
  if (backend == nullptr) throw Error(Status::DeviceError, std::string("cuda: ") + error.message);
  return backend;
}

struct IndexGraph {
  std::vector<uint32_t> neighbors, knn_ids, entries;
  std::vector<uint8_t> lambdas;
  std::vector<uint8_t> changed;  // after a merge: its changed flags (tsdg_merge_graph_incremental)
  // the navigating layer's lists, as tsdg_build_layer writes them; empty where the graph has none
  std::vector<uint32_t> layer_ids;
  std::vector<uint8_t> layer_lambdas;

  GraphView layer(int degree) const {
    return GraphView{layer_ids.data(), layer_lambdas.data(),
                     static_cast<int64_t>(layer_ids.size()) / std::max(degree, 1), degree};
  }
};

void entry_points_of(MatrixView rows, IndexGraph& graph, int degree) {
  std::vector<uint32_t>& entries = graph.entries;
  entries.assign(kIndexEntryPoints, TSDG_INVALID_ID);
  TsdgError error;
  check(tsdg_select_entry_points(rows.data, rows.rows, rows.dim, TSDG_METRIC_L2, graph.neighbors.data(),
                                 degree, kIndexEntryPoints, entries.data(), &error),
        error, "entry points");
  entries.erase(std::remove(entries.begin(), entries.end(), TSDG_INVALID_ID), entries.end());
  // the scans' navigating set: these and the strided nodes
  std::vector<uint32_t> navigating(entries.size() + TSDG_MAX_STRIDED_ENTRIES);
  navigating.resize(static_cast<size_t>(
      tsdg_navigating_set(entries.data(), static_cast<int>(entries.size()), rows.rows, navigating.data())));
  entries = std::move(navigating);
  float bound = 0;
  check(tsdg_graph_nn1_bound(rows.data, rows.rows, rows.dim, TSDG_METRIC_L2, graph.neighbors.data(),
                             degree, &bound, &error),
        error, "nn1 bound");
}

// Room for the layer of a graph of n rows, which the build or merge writes.
void make_room_for_layer(int64_t n, IndexGraph& graph, const TsdgBuildParams& params) {
  const size_t lists = static_cast<size_t>(tsdg_layer_node_count(n)) * params.degree;
  graph.layer_ids.assign(lists, TSDG_INVALID_ID);
  graph.layer_lambdas.assign(lists, 0);
}

// CREATE INDEX's computation on rows (on backend, NULL: the CPU): the graph,
// its k-NN lists, the entry points, the layer.
IndexGraph build(TsdgBackend* backend, MatrixView rows, const TsdgBuildParams& params) {
  IndexGraph graph;
  graph.neighbors.resize(static_cast<size_t>(rows.rows) * params.degree);
  graph.lambdas.resize(graph.neighbors.size());
  graph.knn_ids.resize(static_cast<size_t>(rows.rows) * params.build_k);
  make_room_for_layer(rows.rows, graph, params);
  TsdgError error;
  check(tsdg_build_graph_with_layer(backend, rows.data, rows.rows, rows.dim, TSDG_METRIC_L2, &params,
                                    graph.neighbors.data(), graph.lambdas.data(), graph.knn_ids.data(), nullptr,
                                    graph.layer_ids.data(), graph.layer_lambdas.data(), nullptr, nullptr, &error),
        error, "build");
  entry_points_of(rows, graph, params.degree);
  return graph;
}

// tsdg_merge's computation: the old lists as the index stores them (k-NN ids
// without distances), the merge and its layer, the entry points.
IndexGraph merge(TsdgBackend* backend, MatrixView rows, int64_t n_old, const IndexGraph& old,
                 const TsdgBuildParams& params, PhaseClock& phases, int64_t& changed_lists) {
  const int64_t n = rows.rows;
  IndexGraph graph;
  graph.neighbors.resize(static_cast<size_t>(n) * params.degree);
  graph.lambdas.resize(graph.neighbors.size());
  graph.knn_ids.resize(static_cast<size_t>(n) * params.build_k);
  std::vector<uint8_t>& changed = graph.changed;
  changed.resize(n);
  make_room_for_layer(n, graph, params);
  uint32_t* layer_ids = graph.layer_ids.empty() ? nullptr : graph.layer_ids.data();
  uint8_t* layer_lambdas = graph.layer_lambdas.empty() ? nullptr : graph.layer_lambdas.data();
  TsdgError error;
  check(tsdg_merge_graph_incremental(backend, rows.data, nullptr, nullptr, n_old, n - n_old, rows.dim, TSDG_METRIC_L2,
                                     &params, old.knn_ids.data(), nullptr, old.neighbors.data(),
                                     old.lambdas.data(), nullptr, graph.knn_ids.data(), nullptr,
                                     graph.neighbors.data(), graph.lambdas.data(), changed.data(), layer_ids,
                                     layer_lambdas, &PhaseClock::poll, &phases, &error),
        error, "merge");
  phases.finish();
  changed_lists = std::count_if(changed.begin(), changed.begin() + n_old,
                                [](uint8_t c) { return (c & TSDG_CHANGED_GRAPH) != 0; });
  const Clocks before_entries = Clocks::now();
  entry_points_of(rows, graph, params.degree);
  phases.cpu[0] += Clocks::now().cpu - before_entries.cpu;  // slot 0: entry points
  return graph;
}

// The graph searched as the index searches it: from its layer where it has
// one (with_layer), else from the navigating set scored whole.
std::unique_ptr<CpuSearchIndex> search_index(MatrixView data, const IndexGraph& graph, int degree, bool with_layer) {
  auto index = std::make_unique<CpuSearchIndex>(
      data, GraphView{graph.neighbors.data(), graph.lambdas.data(), data.rows, degree}, Metric::L2);
  if (with_layer) index->set_layer(graph.layer(degree));
  return index;
}

// Recall of the graph searched as the index searches it.
double search_recall(MatrixView data, const IndexGraph& graph, int degree, bool with_layer, MatrixView queries,
                     const std::vector<uint32_t>& truth, int k, int ef, const RunControl& control) {
  const std::unique_ptr<CpuSearchIndex> index = search_index(data, graph, degree, with_layer);
  SearchParams params;
  params.k = k;
  params.ef = ef;
  std::vector<uint32_t> ids(static_cast<size_t>(queries.rows) * k);
  std::vector<float> dists(ids.size());
  index->search(queries, params, ids.data(), dists.data(), control);
  return recall_at(ids.data(), k, truth.data(), k, queries.rows, k);
}

// Rows [first, data.rows) looked up by their own vector (k 1, ef 64): how
// many do not come back first.
int64_t self_lookup_misses(MatrixView data, const IndexGraph& graph, int degree, bool with_layer, int64_t first,
                           const RunControl& control) {
  const std::unique_ptr<CpuSearchIndex> index = search_index(data, graph, degree, with_layer);
  SearchParams params;
  params.k = 1;
  const int64_t count = data.rows - first;
  std::vector<uint32_t> ids(count);
  std::vector<float> dists(count);
  index->search(data.slice(first, count), params, ids.data(), dists.data(), control);
  int64_t misses = 0;
  for (int64_t i = 0; i < count; ++i) misses += ids[i] != static_cast<uint32_t>(first + i) && dists[i] > 0.0f;
  return misses;
}

// The check tsdg_merge runs beside its page writes (src/pg/merge/tsdgmergecompute.c):
// rows [first, rows.rows), and the old rows the merge marked
// TSDG_CHANGED_RECHECK, looked up by their own vector the way the pages'
// scans walk, from the layer where the graph has one. Returns the rows not
// reached; *seconds gets its wall time.
int64_t unreached_check(MatrixView rows, const IndexGraph& graph, int degree, int64_t first,
                        double& seconds) {
  const Clocks start = Clocks::now();
  TsdgError error;
  TsdgUnreachedJob* job = tsdg_unreached_job_start(
      rows.data, rows.rows, rows.dim, TSDG_METRIC_L2, graph.neighbors.data(), graph.lambdas.data(), degree,
      graph.entries.data(), static_cast<int>(graph.entries.size()),
      graph.layer_ids.empty() ? nullptr : graph.layer_ids.data(),
      graph.layer_lambdas.empty() ? nullptr : graph.layer_lambdas.data(), first, graph.changed.data(),
      kIndexEfSearch, kNoLambdaLimit, kUnboundedRecords, &error);
  if (job == nullptr) throw Error(Status::OutOfMemory, std::string("unreached check: ") + error.message);
  int64_t count = 0;
  check(tsdg_unreached_job_finish(job, nullptr, 0, &count, &error), error, "unreached check");
  seconds = Clocks::now().since(start).wall;
  return count;
}

}  // namespace

int run_merge_benchmark(const BenchOptions& o) {
  if (o.metric != Metric::L2) throw Error(Status::InvalidArgument, "--merge-batches runs on L2 data only");
  if (!o.data_path.empty() && o.query_path.empty()) {
    throw Error(Status::InvalidArgument, "--merge-batches with --data needs --queries");
  }
  // A file's rows merge in the file's order: merge_bench.sh's chunks, each
  // drawn with its own cluster weights, come in as its loads do.
  const Matrix data = o.data_path.empty() ? make_clustered(o.synthetic) : read_vectors(o.data_path, o.max_rows);
  const Matrix queries = o.data_path.empty() ? make_clustered_queries(o.synthetic, o.query_count, o.query_seed)
                                             : read_vectors(o.query_path, o.query_count);
  if (queries.dim != data.dim) throw Error(Status::InvalidArgument, "queries and data differ in dimension");
  const int64_t n = data.rows;
  const int64_t initial = o.merge_initial_rows;
  if (initial <= 0 || initial >= n) {
    throw Error(Status::InvalidArgument, "--merge-initial must be in (0, --rows)");
  }
  Report report(o.json_path);
  const std::unique_ptr<TsdgBackend, void (*)(TsdgBackend*)> backend(load_backend(o), tsdg_backend_free);
  ThreadPool pool(o.threads);
  RunControl control;
  control.pool = &pool;

  const int k = o.k;
  std::vector<uint32_t> truth(static_cast<size_t>(queries.rows) * k);
  {
    std::vector<float> dists(truth.size());
    exact_knn(data.view(), queries.view(), Metric::L2, k, truth.data(), dists.data(), control);
  }
  TsdgBuildParams params;
  tsdg_build_params_default(&params);
  params.degree = o.diversify.degree;
  params.alpha = o.diversify.alpha;
  params.lambda0 = o.diversify.lambda0;
  params.build_k = o.gnnd.k;
  params.samples = o.gnnd.samples;
  params.iterations = o.gnnd.iterations;
  params.seed = o.gnnd.seed;
  params.threads = o.threads;
  report.emit(Record("merge_data")
                  .add("backend", o.backend)
                  .add("data", o.data_path.empty() ? std::string("synthetic") : o.data_path)
                  .add("rows", n)
                  .add("dim", data.dim)
                  .add("clusters", o.synthetic.clusters)
                  .add("intrinsic_dim", o.synthetic.intrinsic_dim)
                  .add("spread", o.synthetic.spread)
                  .add("absolute_scale", o.synthetic.absolute_scale ? 1 : 0)
                  .add("initial", initial)
                  .add("batches", o.merge_batches)
                  .add("build_k", params.build_k)
                  .add("degree", params.degree));

  Clocks start = Clocks::now();
  const IndexGraph fresh = build(backend.get(), data.view(), params);
  const Clocks fresh_time = Clocks::now().since(start);
  report.emit(Record("fresh_build").add("wall_s", fresh_time.wall).add("cpu_s", fresh_time.cpu));

  start = Clocks::now();
  IndexGraph graph = build(backend.get(), data.view().slice(0, initial), params);
  const Clocks base_time = Clocks::now().since(start);
  report.emit(Record("base_build").add("rows", initial).add("wall_s", base_time.wall).add("cpu_s", base_time.cpu));

  double worst_cpu_ratio = 0;
  int64_t rows = initial;
  for (int b = 0; b < o.merge_batches; ++b) {
    const int64_t next = initial + (n - initial) * (b + 1) / o.merge_batches;
    PhaseClock phases;
    int64_t changed_lists = 0;
    start = Clocks::now();
    graph = merge(backend.get(), data.view().slice(0, next), rows, graph, params, phases, changed_lists);
    const Clocks merge_time = Clocks::now().since(start);
    worst_cpu_ratio = std::max(worst_cpu_ratio, merge_time.cpu / fresh_time.cpu);
    const int64_t rechecked = std::count_if(graph.changed.begin(), graph.changed.begin() + rows,
                                            [](uint8_t c) { return (c & TSDG_CHANGED_RECHECK) != 0; });
    Record record("merge");
    record.add("into", rows)
        .add("batch", next - rows)
        .add("wall_s", merge_time.wall)
        .add("cpu_s", merge_time.cpu)
        .add("cpu_ratio", merge_time.cpu / fresh_time.cpu, 3)
        .add("knn_cpu_s", phases.cpu[TSDG_PHASE_KNN_GRAPH])
        .add("ggm_cpu_s", phases.cpu[TSDG_PHASE_MERGE])
        .add("tsdg_cpu_s", phases.cpu[TSDG_PHASE_DIVERSIFY] + phases.cpu[TSDG_PHASE_LINK])
        .add("entry_cpu_s", phases.cpu[0])
        .add("old_lists_changed", changed_lists)
        .add("rechecked", rechecked);
    if (o.merge_check) {
      double check_seconds = 0;
      const int64_t unreached =
          unreached_check(data.view().slice(0, next), graph, params.degree, rows, check_seconds);
      record.add("check_wall_s", check_seconds).add("unreached", unreached);
    }
    report.emit(record);
    rows = next;
  }

  for (int ef : o.ef_list) {
    const double fresh_recall = search_recall(data.view(), fresh, params.degree, o.layer, queries.view(), truth, k, ef, control);
    const double merged_recall = search_recall(data.view(), graph, params.degree, o.layer, queries.view(), truth, k, ef, control);
    report.emit(Record("merge_recall")
                    .add("ef", ef)
                    .add("fresh", fresh_recall)
                    .add("merged", merged_recall)
                    .add("gap", fresh_recall - merged_recall));
  }
  report.emit(Record("merge_self_lookup")
                  .add("rows", n - initial)
                  .add("misses_merged", self_lookup_misses(data.view(), graph, params.degree, o.layer, initial, control))
                  .add("misses_fresh", self_lookup_misses(data.view(), fresh, params.degree, o.layer, initial, control)));
  report.emit(Record("merge_summary").add("worst_cpu_ratio", worst_cpu_ratio, 3));
  return 0;
}

}  // namespace bench
}  // namespace tsdg
