// Links the separate components of a TSDG graph into one. A k-NN graph of
// well separated clusters falls apart into one component per cluster (no
// k-NN list leaves its cluster), and neither diversification stage adds edges
// between components, so a search started in one cluster could never reach
// another. Like NSG's connectivity step, this adds the missing bridges.
#pragma once

#include "run_control.h"
#include "types.h"

namespace tsdg {

// First every node that no list points to gets an edge from its nearest
// neighbor. Then Borůvka rounds over the weakly connected components: each component is
// joined to the component whose representative (its member nearest the
// component mean) is nearest, by an edge in both directions between the two
// members found by a greedy descent towards each other. Bridges get λ = 0 (a
// search at any λ limit crosses them) and take the last place of the λ = 0
// prefix; a full list gives up its last, most occluded edge. Returns the
// number of edges added; relinked (graph.nodes, may be null) gets 1 for
// every list that changed.
int64_t connect_components(MatrixView data, GraphSpan graph, const RunControl& control,
                           uint8_t* relinked = nullptr);
inline int64_t connect_components(MatrixView data, TsdgGraph& graph, const RunControl& control) {
  return connect_components(data, GraphSpan::of(graph), control);
}

}  // namespace tsdg
