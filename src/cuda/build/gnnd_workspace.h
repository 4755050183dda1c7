// The device state of a GNND run (the segmented k-NN lists and the sample
// graphs G_new / G_old), shared by GNND (gnnd.cu) and GGM (ggm.cu), which
// differ only in how the lists start and whether matching is cross-side only.
#pragma once

#include <cstdint>
#include <vector>

#include "device_memory.h"
#include "knn_lists_layout.h"
#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg::cuda {

constexpr int kMaxGnndK = 256;
constexpr int kMaxSamplesPerList = 64;  // 2p with p <= 32

struct GnndWorkspace {
  int64_t nodes = 0;
  int k = 0;
  int samples = 0;  // p
  DeviceBuffer<uint32_t> ids;
  DeviceBuffer<float> dists;
  DeviceBuffer<int> locks;
  DeviceBuffer<uint32_t> new_samples;  // nodes * 2p
  DeviceBuffer<uint32_t> old_samples;  // nodes * 2p
  DeviceBuffer<int> forward_new;       // forward sample counts
  DeviceBuffer<int> forward_old;
  DeviceBuffer<int> total_new;         // forward + reverse, may overshoot 2p
  DeviceBuffer<int> total_old;
  DeviceBuffer<unsigned long long> updates;

  GnndWorkspace(int64_t node_count, int list_length, int sample_count);
  static size_t bytes_needed(int64_t node_count, int list_length, int sample_count);
  KnnListsView view();
  // Every list empty: (+inf, kInvalidId), locks released.
  void clear(cudaStream_t stream);
};

// Validates k and p and returns the sample count actually used.
int checked_sample_count(const GnndParams& params);

// Lists of random distinct nodes (self excluded), all NEW (Algorithm 1, lines 1-5).
void fill_random_lists(GnndWorkspace& ws, const float* data, int dim, Metric metric, uint64_t seed,
                       cudaStream_t stream);

// Each list's forward samples: its p closest NEW and p closest OLD entries,
// the sampled NEW ones marked OLD; a node below capped_end takes at most
// capped_old OLD samples, from its OLD entries below capped_end. Each
// segment must be sorted by (distance, id), as the inserts keep them.
void sample_lists(GnndWorkspace& ws, int64_t capped_end, int capped_old, cudaStream_t stream);

// GNND iterations until the update rate falls under params.min_update_rate
// or params.iterations are done; returns how many ran. split >= 0: only pairs
// with one node below split and one at or above it are matched (GGM); with
// first_side_old_samples > 0 too, a node below split takes at most that many
// forward OLD samples, from its OLD entries below split (the incremental
// merge's old rows, ggm.h's kMergeOldRowOldSamples).
int run_gnnd_iterations(DeviceContext& ctx, GnndWorkspace& ws, const float* data, int dim,
                        Metric metric, const GnndParams& params, int64_t split,
                        const RunControl& control, int first_side_old_samples = 0);

// ggm.cu: the incremental GGM (ggm.h) on device rows (n = ws.nodes rows,
// [0, split) indexed) and original lists (n * ws.k, global ids, sorted): the
// indexed lists start whole and OLD, each batch list walks from its start row
// (batch_starts: n - split indexed rows on the device, as ggm.h's seed pivots
// give them; NULL: k/2 random indexed rows, as Algorithm 3); ws ends with the
// merged lists, sorted, flags cleared. Returns the iterations run.
int ggm_merge_incremental_resident(DeviceContext& ctx, GnndWorkspace& ws, const float* rows, int dim,
                                   int64_t split, const uint32_t* original_ids,
                                   const float* original_dists, const uint32_t* batch_starts,
                                   Metric metric, const GnndParams& params, const RunControl& control);

// ggm.cu: graph's ids moved past offset (kInvalidId stays), as the second
// side's ids are in the lists of both sides.
std::vector<uint32_t> ids_past(const KnnGraph& graph, int64_t offset);

// list_distances.cu: dists[u * k + j] = distance(row u, row ids[u * k + j])
// for `lists` lists of device rows (+inf for kInvalidId).
void list_distances_resident(const float* rows, int dim, Metric metric, const uint32_t* ids,
                             int64_t lists, int k, float* dists, cudaStream_t stream);

// Sorts every list (merging its segments) and clears the flags, on the device.
void sort_lists(GnndWorkspace& ws, cudaStream_t stream);
// sort_lists, then the lists copied to host.
KnnGraph download_sorted_lists(DeviceContext& ctx, GnndWorkspace& ws);

// The exact graph through the brute force, for sets too small for sampling.
KnnGraph exact_graph_by_bruteforce(DeviceContext& ctx, MatrixView data, Metric metric, int k,
                                   const RunControl& control);

}  // namespace tsdg::cuda
