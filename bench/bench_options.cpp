#include "bench_options.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

namespace tsdg {
namespace bench {

namespace {

const char kUsage[] = R"(usage: tsdg-bench [options]
data (default: synthetic clustered 200000 x 128, intrinsic dim 16)
  --data FILE            .fvecs, .bvecs or .fbin rows
  --queries FILE         query rows (default: from the mixture, or the last rows of --data)
  --max-rows N           read at most N rows of --data
  --rows N --dim D --clusters C --intrinsic-dim I --spread S --noise E --seed X
  --absolute-scale       clusters as row = center + z·B + noise: centers N(0, S²)
                         per coordinate, B an I x D matrix of N(0, 1/I) entries,
                         z ~ N(0, I_I), noise N(0, E²) per coordinate (S 1:
                         overlapping clusters, S 4: separated; the hard classes
                         use --clusters N/500 --intrinsic-dim 16 --noise 0.05)
  --query-count N        queries (default 1000)  --query-seed X
  --metric l2|ip|cosine|l1
graph
  --k K                  neighbors searched (default 10)
  --build-k K --samples P --iterations T --gnnd-seed X      GNND (samples:
                         by default the index's for the backend, a quarter of
                         K on the CPU and half on the GPU)
  --degree R --alpha A --lambda0 L                          TSDG
  --pivots M --pivot-stride S   long-range candidates: each row's M nearest
                         of every S-th row join its k-NN list (M 0: none)
  --random-candidates N  N rows drawn at random join each k-NN list too
  --exact-graph          also time the exact k-NN graph
  --ggm                  also build two halves and merge them with GGM
  --one-call-build       also time the graph built as an index builds it: one
                         call, the k-NN lists kept on the device between steps
  --no-build-check       leave out the build's check of every row's route (the
                         rows a walk with a pool of 4 misses get an edge)
  --build-check-rows N   the rows the check walks at most, every m-th row past
                         them (default: the index's, 1000000)
merge (instead of the steps above; L2: the synthetic data, or --data and
  --queries, whose rows merge in the file's order)
  --merge-batches B      build on the first --merge-initial N rows, merge the
                         rest in B equal batches (the index's C API calls),
                         report CPU and wall time of each merge against a fresh
                         build of all rows, then the check for merged rows
                         the searches do not reach (ef 100, wall time and
                         rows), recall at --ef, self-lookups, each graph
                         searched from its navigating layer, built again
                         after every merge as the index builds it (with
                         --no-layer, from the navigating set scored whole);
                         on --backend cuda through the CUDA backend's shared
                         object (--cuda-library PATH, default pg_tsdg_cuda.so)
  --no-merge-check       leave out the check for unreached rows after each merge
search
  --ef LIST              comma-separated ef sweep
  --lambda-limits LIST   comma-separated λ limits (default 255)
  --slack LIST           comma-separated GGNN slack factors (default 0: off)
  --batch-sizes LIST     queries per SearchIndex::search call (default: all at once)
  --entry-samples N      navigating-set size (nodes nearest k-means centers)
  --entry-stride N       and every N-th node besides (default -1: by the row
                         count, 0: none)
  --no-layer             start from the navigating set scored whole instead of
                         the navigating layer (graphs of 16,384 rows or more)
  --gpu-kernels LIST     GPU search kernels to sweep: 0 by batch size (default),
                         1 small-batch, 2 large-batch
  --gpu-search-width N   nodes the small-batch kernel expands a step (0: default)
  --min-seconds S        repeat each point until it ran S seconds (default 0.5)
baseline
  --no-hnsw              skip hnswlib  --hnsw-m M --hnsw-ef-construction E --hnsw-ef LIST
run
  --backend cpu|cuda  --threads N  --json FILE  --recall-sample N
)";

template <class T>
T parse_number(const std::string& flag, const std::string& text) {
  std::istringstream in(text);
  T value;
  if (!(in >> value) || !in.eof()) {
    throw Error(Status::InvalidArgument, "bad value '" + text + "' for " + flag);
  }
  return value;
}

template <class T>
std::vector<T> parse_list(const std::string& flag, const std::string& text) {
  std::vector<T> values;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(parse_number<T>(flag, item));
  if (values.empty()) throw Error(Status::InvalidArgument, "empty list for " + flag);
  return values;
}

Metric parse_metric(const std::string& text) {
  if (text == "l2") return Metric::L2;
  if (text == "ip") return Metric::InnerProduct;
  if (text == "cosine") return Metric::Cosine;
  if (text == "l1") return Metric::L1;
  throw Error(Status::InvalidArgument, "unknown metric '" + text + "'");
}

}  // namespace

BenchOptions parse_options(int argc, char** argv) {
  BenchOptions o;
  o.gnnd.samples = 0;  // the index's default for the backend
  o.synthetic.rows = 200000;
  o.synthetic.dim = 128;
  o.synthetic.clusters = 64;
  o.synthetic.intrinsic_dim = 16;

  using Setter = std::function<void(const std::string&, const std::string&)>;
  const std::map<std::string, Setter> valued = {
      {"--data", [&](auto&, auto& v) { o.data_path = v; }},
      {"--queries", [&](auto&, auto& v) { o.query_path = v; }},
      {"--max-rows", [&](auto& f, auto& v) { o.max_rows = parse_number<int64_t>(f, v); }},
      {"--build-check-rows", [&](auto& f, auto& v) { o.build_check_rows = parse_number<int64_t>(f, v); }},
      {"--rows", [&](auto& f, auto& v) { o.synthetic.rows = parse_number<int64_t>(f, v); }},
      {"--dim", [&](auto& f, auto& v) { o.synthetic.dim = parse_number<int>(f, v); }},
      {"--clusters", [&](auto& f, auto& v) { o.synthetic.clusters = parse_number<int>(f, v); }},
      {"--intrinsic-dim",
       [&](auto& f, auto& v) { o.synthetic.intrinsic_dim = parse_number<int>(f, v); }},
      {"--spread", [&](auto& f, auto& v) { o.synthetic.spread = parse_number<float>(f, v); }},
      {"--noise", [&](auto& f, auto& v) { o.synthetic.noise = parse_number<float>(f, v); }},
      {"--seed", [&](auto& f, auto& v) { o.synthetic.seed = parse_number<uint64_t>(f, v); }},
      {"--query-count", [&](auto& f, auto& v) { o.query_count = parse_number<int64_t>(f, v); }},
      {"--query-seed", [&](auto& f, auto& v) { o.query_seed = parse_number<uint64_t>(f, v); }},
      {"--metric", [&](auto&, auto& v) { o.metric = parse_metric(v); }},
      {"--k", [&](auto& f, auto& v) { o.k = parse_number<int>(f, v); }},
      {"--build-k", [&](auto& f, auto& v) { o.gnnd.k = parse_number<int>(f, v); }},
      {"--samples", [&](auto& f, auto& v) { o.gnnd.samples = parse_number<int>(f, v); }},
      {"--iterations", [&](auto& f, auto& v) { o.gnnd.iterations = parse_number<int>(f, v); }},
      {"--gnnd-seed", [&](auto& f, auto& v) { o.gnnd.seed = parse_number<uint64_t>(f, v); }},
      {"--degree", [&](auto& f, auto& v) { o.diversify.degree = parse_number<int>(f, v); }},
      {"--alpha", [&](auto& f, auto& v) { o.diversify.alpha = parse_number<float>(f, v); }},
      {"--lambda0", [&](auto& f, auto& v) { o.diversify.lambda0 = parse_number<int>(f, v); }},
      {"--pivots", [&](auto& f, auto& v) { o.diversify.pivot_candidates = parse_number<int>(f, v); }},
      {"--pivot-stride", [&](auto& f, auto& v) { o.diversify.pivot_stride = parse_number<int>(f, v); }},
      {"--random-candidates", [&](auto& f, auto& v) { o.diversify.random_candidates = parse_number<int>(f, v); }},
      {"--ef", [&](auto& f, auto& v) { o.ef_list = parse_list<int>(f, v); }},
      {"--lambda-limits", [&](auto& f, auto& v) { o.lambda_limits = parse_list<int>(f, v); }},
      {"--slack", [&](auto& f, auto& v) { o.slacks = parse_list<float>(f, v); }},
      {"--batch-sizes", [&](auto& f, auto& v) { o.batch_sizes = parse_list<int64_t>(f, v); }},
      {"--entry-samples", [&](auto& f, auto& v) { o.entry_samples = parse_number<int>(f, v); }},
      {"--entry-stride", [&](auto& f, auto& v) { o.entry_stride = parse_number<int64_t>(f, v); }},
      {"--gpu-kernels", [&](auto& f, auto& v) { o.gpu_kernels = parse_list<int>(f, v); }},
      {"--gpu-search-width", [&](auto& f, auto& v) { o.gpu_search_width = parse_number<int>(f, v); }},
      {"--min-seconds", [&](auto& f, auto& v) { o.min_seconds = parse_number<double>(f, v); }},
      {"--recall-sample", [&](auto& f, auto& v) { o.recall_sample = parse_number<int64_t>(f, v); }},
      {"--hnsw-m", [&](auto& f, auto& v) { o.hnsw_m = parse_number<int>(f, v); }},
      {"--hnsw-ef-construction",
       [&](auto& f, auto& v) { o.hnsw_ef_construction = parse_number<int>(f, v); }},
      {"--hnsw-ef", [&](auto& f, auto& v) { o.hnsw_ef_list = parse_list<int>(f, v); }},
      {"--backend", [&](auto&, auto& v) { o.backend = v; }},
      {"--cuda-library", [&](auto&, auto& v) { o.cuda_library = v; }},
      {"--threads", [&](auto& f, auto& v) { o.threads = parse_number<int>(f, v); }},
      {"--json", [&](auto&, auto& v) { o.json_path = v; }},
      {"--merge-batches", [&](auto& f, auto& v) { o.merge_batches = parse_number<int>(f, v); }},
      {"--merge-initial", [&](auto& f, auto& v) { o.merge_initial_rows = parse_number<int64_t>(f, v); }},
  };
  const std::map<std::string, std::function<void()>> switches = {
      {"--exact-graph", [&] { o.exact_graph = true; }},
      {"--absolute-scale", [&] { o.synthetic.absolute_scale = true; }},
      {"--ggm", [&] { o.ggm = true; }},
      {"--one-call-build", [&] { o.one_call_build = true; }},
      {"--no-hnsw", [&] { o.hnsw = false; }},
      {"--no-build-check", [&] { o.build_check = false; }},
      {"--no-layer", [&] { o.layer = false; }},
      {"--no-merge-check", [&] { o.merge_check = false; }},
      {"--help", [&] {
         std::fputs(kUsage, stdout);
         std::exit(0);
       }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (auto s = switches.find(flag); s != switches.end()) {
      s->second();
    } else if (auto v = valued.find(flag); v != valued.end()) {
      if (i + 1 >= argc) throw Error(Status::InvalidArgument, flag + " needs a value");
      v->second(flag, argv[++i]);
    } else {
      throw Error(Status::InvalidArgument, "unknown option " + flag + " (see --help)");
    }
  }
  if (o.backend != "cpu" && o.backend != "cuda") {
    throw Error(Status::InvalidArgument, "--backend must be cpu or cuda");
  }
  for (int64_t b : o.batch_sizes) {
    if (b < 0) throw Error(Status::InvalidArgument, "batch sizes must be >= 0");
  }
  return o;
}

}  // namespace bench
}  // namespace tsdg
