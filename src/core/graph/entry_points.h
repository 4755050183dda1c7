// A small navigating set of entry points for the graph search: nodes spread
// over the data, so a search starts close to its query even when the data
// forms well separated clusters that a few random nodes would miss.
#pragma once

#include <cstdint>
#include <vector>

#include "run_control.h"
#include "search.h"
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

}  // namespace tsdg
