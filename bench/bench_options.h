// Command-line options of tsdg-bench.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "params.h"
#include "synthetic.h"
#include "types.h"

namespace tsdg {
namespace bench {

struct BenchOptions {
  // Data: a file (.fvecs/.bvecs/.fbin), or the synthetic mixture.
  std::string data_path;
  std::string query_path;  // empty: queries from the mixture, or rows held out of the file
  int64_t max_rows = -1;
  SyntheticSpec synthetic;
  int64_t query_count = 1000;
  uint64_t query_seed = 2;
  Metric metric = Metric::L2;

  int k = 10;
  GnndParams gnnd;
  DiversifyParams diversify;
  std::vector<int> ef_list{10, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  std::vector<int> lambda_limits{255};
  std::vector<float> slacks{0.0f};
  std::vector<int64_t> batch_sizes{0};  // 0: all queries in one call
  int entry_samples = SearchParams{}.entry_samples;
  int64_t entry_stride = SearchParams{}.entry_stride;
  std::vector<int> gpu_kernels{0};  // SearchParams::gpu_kernel values swept on the GPU
  int gpu_search_width = 0;
  // Searches start from the navigating layer, as the index's do; without
  // it, from the navigating set scored whole.
  bool layer = true;
  int threads = 0;
  double min_seconds = 0.5;  // each search point repeats until it ran this long
  int64_t recall_sample = 1000;

  bool exact_graph = false;
  bool ggm = false;
  bool one_call_build = false;
  // the build's check of every row's route (link_rows_missed_by_narrow_walks)
  bool build_check = true;
  // the rows the build check walks at most (every m-th row past them); 0:
  // the index's bound (kBuildCheckRows)
  int64_t build_check_rows = 0;
  bool hnsw = true;
  // --merge-batches B > 0: the incremental-merge benchmark instead
  // (merge_mode.h): a build on the first merge_initial_rows rows, then B
  // equal batches merged into it, against a fresh build of all rows.
  int merge_batches = 0;
  int64_t merge_initial_rows = 0;
  bool merge_check = true;
  int hnsw_m = 16;
  int hnsw_ef_construction = 200;
  std::vector<int> hnsw_ef_list{10, 16, 24, 32, 48, 64, 96, 128, 192, 256};

  std::string backend = "cpu";
  // the CUDA backend's shared object, for --merge-batches on --backend cuda
  std::string cuda_library = "pg_tsdg_cuda.so";
  std::string json_path;
};

// Throws Error(Status::InvalidArgument) with the offending flag; prints the
// usage and exits for --help.
BenchOptions parse_options(int argc, char** argv);

}  // namespace bench
}  // namespace tsdg
