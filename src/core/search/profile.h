// The search profile of a graph held in memory: how many nodes the walk of
// the index pages' scans scores for sample rows searched for their own
// vectors, at several values of ef. The planner prices a search by it; an
// index build computes it from its arrays on a thread while it writes its
// pages, where ANALYZE and VACUUM walk the pages, and both must store the
// same counts, so this walk is the pages' walk step for step: the
// navigating set scored once a sample and offered in its order (or, for a
// graph with a navigating layer, the entries of the layer's walk at the
// search's ef, offered in theirs), then GraphSearch's next and unvisited
// over each list up to its first empty slot, the fresh neighbors scored in
// list order by the metric's kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "navigating_layer.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

struct SearchProfileInput {
  MatrixView data;
  GraphView graph;
  Metric metric = Metric::L2;
  int lambda_limit = 0;              // the searches follow edges of λ <= this
  std::vector<uint32_t> navigating;  // the navigating set, in its offering order
  // the graph's layer, walked first as the scans walk it; null: the
  // navigating set is offered instead
  NavigatingLayer* layer = nullptr;
  std::vector<uint32_t> samples;  // the rows searched for their own vectors
  std::vector<int> efs;           // each sample is searched at each
};

struct SearchProfile {
  // for each ef of the input's efs, over all the samples together: the
  // nodes the graph's searches scored (the entries offered included), and
  // the distances the layer's walks computed (0 without a layer)
  std::vector<int64_t> scored;
  std::vector<int64_t> layer_scored;
};

// The samples are spread over control's pool, each worker with a search of
// its own. Throws Error(InvalidArgument) for a node id past the graph, as a
// scan of the pages refuses one.
SearchProfile search_profile(const SearchProfileInput& input, const RunControl& control);

}  // namespace tsdg
