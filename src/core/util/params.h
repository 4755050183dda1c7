// Parameters of the algorithms, with the defaults the index uses.
#pragma once

#include <algorithm>

#include <cstdint>

namespace tsdg {

// GNND (Wang et al., 2021, section 4) and GGM (section 5).
struct GnndParams {
  // k-NN list length: the TSDG search is as good from k = 32 lists as from 64
  // at half the GNND time (the index asks for 64, see tsdg.h).
  int k = 32;
  // p: NEW and OLD samples per list and iteration. Fewer leave GNND short of
  // convergence on clustered data at the iteration bound (its k-NN recall
  // stops near 0.87 with 16), and the search graph's recall at a large ef
  // follows the k-NN graph's.
  int samples = 32;
  // Upper bound on iterations; the update rate below ends GNND earlier where
  // it converges sooner. Past about ten iterations on clustered data the
  // lists' nearest entries no longer change, and what GNND still refines is
  // the far end of each list: entries toward the row's neighboring regions
  // give way to nearer rows of its own. The diversification keeps those
  // entries as the graph's longer edges, so further iterations raise the
  // k-NN graph's accuracy while the search graph loses routes.
  int iterations = 10;
  double min_update_rate = 0.001;  // stop when updates < rate * n * k
  uint64_t seed = 42;
};

// The samples of a build that leaves them to the backend: half the list. A
// local join on the CPU costs the square of its samples in distances, so a
// CPU build of fewer than kQuarterSampleRows rows takes a quarter, which
// converges there within the iteration bound. Past that a quarter leaves
// GNND on clustered rows far from convergence at the bound, and more
// iterations of the smaller samples cost as much time as half the list for
// a less accurate graph.
inline constexpr int64_t kQuarterSampleRows = 500000;
inline int default_gnnd_samples(int k, bool on_cpu, int64_t rows) {
  return std::max(1, on_cpu && rows < kQuarterSampleRows ? k / 4 : k / 2);
}

// TSDG diversification (Wang, Wang, Zhao, 2022, section 3).
struct DiversifyParams {
  // R: stored list length. With a converged k-NN graph, lists of 32 cut
  // the long-range edges off many nodes' lists; stage 2 keeps far fewer
  // than 48 on average.
  int degree = 48;
  float alpha = 1.2f;  // stage-1 relaxed pruning factor
  int lambda0 = 10;    // stage-2: edges with occlusion factor > lambda0 dropped
  // Long-range candidates (long_range.h): each row's pivot_candidates
  // nearest pivots (every pivot_stride-th row) join its k-NN list before
  // stage 1; 0 disables them.
  int pivot_candidates = 16;
  int pivot_stride = 64;
  // The stride grows so that there are at most this many pivots: their
  // exact search costs rows * pivots distances.
  int max_pivots = 16384;
  // Rows drawn at random that join each k-NN list too: links to clusters
  // that no pivot near the row reaches.
  int random_candidates = 16;
  uint64_t random_seed = 11;
};

// The largest ef of the GPU small-batch kernel (its pool lives in shared
// memory), which is the largest of the GPU searches too: a single query
// keeps the small-batch kernel's latency at every ef the GPU serves.
inline constexpr int kGpuSmallBatchMaxEf = 1024;

// Graph search (Wang, Wang, Zhao, 2022, section 4; Groh et al., 2023 for the slack stop rule).
struct SearchParams {
  int k = 10;
  int ef = 64;              // candidate list length
  int lambda_limit = 255;   // visit only edges with occlusion factor <= this
  float slack = 0.0f;       // tau of the GGNN stop rule; 0 disables it
  // The navigating set every search starts from (select_entry_points). It must
  // start a search near its query's cluster: a few entries spread over many
  // clusters leave most queries a long way from their own.
  int entry_samples = 256;
  // Besides them, every entry_stride-th node (with_strided_entries): -1 picks
  // the spacing by the node count (navigating_stride), 0 adds none.
  int64_t entry_stride = -1;
  uint64_t seed = 7;
  // GPU only (Wang, Wang, Zhao, 2022, section 4): 0 picks the kernel by batch size, 1 forces
  // the small-batch kernel, 2 the large-batch kernel; 3 scans the resident
  // rows exactly (the GPU brute force, as a baseline).
  int gpu_kernel = 0;
  // GPU small-batch kernel (ef <= kGpuSmallBatchMaxEf): pool nodes expanded per step of its beam search
  // (more steps in parallel, a few more distances); 0 = the kernel's default.
  int gpu_search_width = 0;
};

}  // namespace tsdg
