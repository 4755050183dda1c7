// A small navigating set of entry points for the graph search: nodes spread
// over the data, so a search starts close to its query even when the data
// forms well separated clusters that a few random nodes would miss.
#pragma once

#include <cstdint>
#include <vector>

#include "run_control.h"
#include "params.h"
#include "types.h"

namespace tsdg {

// min(count, data.rows) distinct node ids: first the node nearest the data
// mean, then the nodes nearest k-means centers of a random sample of the rows
// (k-means++ seeding, a few Lloyd iterations, L2 for every metric since only
// the spread matters). Each center's node is found by a greedy descent on the
// graph from the nearest sampled row. Deterministic by seed, on any pool
// of control's.
std::vector<uint32_t> select_entry_points(MatrixView data, GraphView graph, int count,
                                          uint64_t seed, const RunControl& control = RunControl{});

// What select_entry_points finds without the graph: the sampled rows, the
// targets (the data mean, then the k-means centers) and each target's
// nearest sampled row, where a descent starts. Empty where count <= 0 or
// the data has at most count rows.
struct EntryTargets {
  int count = 0;
  std::vector<uint32_t> sample;
  Matrix targets;
  std::vector<uint32_t> nearest_sample;
};
EntryTargets entry_targets(MatrixView data, int count, uint64_t seed, const RunControl& control = RunControl{});
// select_entry_points from its targets: the greedy descents on graph.
std::vector<uint32_t> entry_points_toward(MatrixView data, GraphView graph, const EntryTargets& targets,
                                          const RunControl& control = RunControl{});

// The spacing of the strided part of the navigating set of a graph of
// `nodes` nodes: every kRowsPerStridedEntry-th node up to
// kNodesAtBaseSpacing nodes, the spacing divided by 1 + log10(nodes /
// kNodesAtBaseSpacing) past that, and at most kMaxStridedEntries of them.
// A fixed set of entries spread over many clusters leaves most queries far
// from their own cluster once the clusters outnumber the entries; nodes
// taken at a fixed spacing grow with the data, cost nothing to choose and
// need no storage (the index pages keep only the selected entries, the scan
// derives the rest from the node count). The spacing narrows past a
// million nodes because a query whose cluster holds no entry gets there only
// through the graph's long-range edges, and among more clusters each such
// edge is less likely to lead to the right one.
inline constexpr int64_t kRowsPerStridedEntry = 256;
inline constexpr int64_t kNodesAtBaseSpacing = 1000000;
inline constexpr int64_t kMaxStridedEntries = 131072;
int64_t navigating_stride(int64_t nodes);

// entries, then the nodes 0, stride, 2 * stride, ... below nodes that are
// not among them (stride <= 0: entries alone).
std::vector<uint32_t> with_strided_entries(std::vector<uint32_t> entries, int64_t nodes, int64_t stride);

// The navigating set of params: select_entry_points for entry_samples and
// seed, then the strided nodes of entry_stride.
std::vector<uint32_t> navigating_set(MatrixView data, GraphView graph, const SearchParams& params,
                                     const RunControl& control = RunControl{});

// A search index's navigating set for the params of its searches, computed
// again only when they change or its lists did (lists_changed). Since only
// the greedy descents follow the graph, changed lists cost the descents,
// not the sample and its k-means again.
class NavigatingSetCache {
 public:
  // Whether the set was computed again.
  bool refresh(MatrixView data, GraphView graph, const SearchParams& params, const RunControl& control);
  void lists_changed() { current_ = false; }
  const std::vector<uint32_t>& entries() const { return entries_; }

 private:
  EntryTargets targets_;
  uint64_t targets_seed_ = 0;
  int64_t stride_ = 0;
  bool current_ = false;
  std::vector<uint32_t> entries_;
};

}  // namespace tsdg
