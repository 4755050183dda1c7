// Links the separate components of a TSDG graph into one. A k-NN graph of
// well separated clusters falls apart into one component per cluster (no
// k-NN list leaves its cluster), and neither diversification stage adds edges
// between components, so a search started in one cluster could never reach
// another. Like NSG's connectivity step, this adds the missing bridges.
#pragma once

#include <vector>

#include "run_control.h"
#include "types.h"

namespace tsdg {

// The passes of connect_components that read every list: which nodes no
// list points to, and the weakly connected components. On the host's
// threads by default; the GPU backend answers them from a copy of the lists
// on the device (cuda/graph_scan.h), which the linking keeps up to date
// through lists_changed.
class GraphScan {
 public:
  virtual ~GraphScan() = default;
  // The nodes no list points to, ascending. A list ends at its first
  // kInvalidId.
  virtual std::vector<uint32_t> unpointed_nodes(GraphSpan graph, const RunControl& control) = 0;
  // Component ids 0..*count-1 numbered by their smallest node (may be
  // empty when *count is 1).
  virtual std::vector<int64_t> component_ids(GraphSpan graph, int64_t* count, const RunControl& control) = 0;
  // Lists graph has had written since the last scan.
  virtual void lists_changed(GraphSpan graph, const std::vector<uint32_t>& lists) = 0;
};

// Component ids 0..*count-1 from each node's root, where a root is its
// component's smallest node (both scans root their sets so).
std::vector<int64_t> component_ids_of_roots(const std::vector<uint32_t>& root_of, int64_t* count);

class HostGraphScan final : public GraphScan {
 public:
  std::vector<uint32_t> unpointed_nodes(GraphSpan graph, const RunControl& control) override;
  std::vector<int64_t> component_ids(GraphSpan graph, int64_t* count, const RunControl& control) override;
  void lists_changed(GraphSpan, const std::vector<uint32_t>&) override {}
};

// First every node that no list points to gets an edge from its nearest
// neighbor. Then Borůvka rounds over the weakly connected components: each component is
// joined to the component whose representative (its member nearest the
// component mean) is nearest, by an edge in both directions between the two
// members found by a greedy descent towards each other. Bridges get λ = 0 (a
// search at any λ limit crosses them) and take the last place of the λ = 0
// prefix; a full list gives up its last, most occluded edge. Returns the
// number of edges added; relinked (graph.nodes, may be null) gets 1 for
// every list that changed. scan (null: a HostGraphScan) reads the lists.
int64_t connect_components(MatrixView data, GraphSpan graph, const RunControl& control,
                           uint8_t* relinked = nullptr, GraphScan* scan = nullptr);
inline int64_t connect_components(MatrixView data, TsdgGraph& graph, const RunControl& control) {
  return connect_components(data, GraphSpan::of(graph), control);
}

}  // namespace tsdg
