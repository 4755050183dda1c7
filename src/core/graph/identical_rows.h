// The groups of rows whose vectors are identical byte for byte. The graph
// links each group into a ring (the index build does, after the graph is
// built), since diversification keeps at most one edge among copies. The
// groups need the rows only, so a build finds them on threads while it does
// other work.
#pragma once

#include <cstdint>
#include <vector>

#include "run_control.h"
#include "types.h"

namespace tsdg {

struct IdenticalRowGroups {
  std::vector<uint32_t> ids;   // the groups' rows, group after group, ascending within a group
  std::vector<int64_t> ends;   // the end of each group in ids
};

// Every group of two or more identical rows of rows. Rows are hashed on
// control's pool and split by the hash's top bits into buckets, each bucket
// sorted and grouped on its own; candidates of one hash are compared byte
// for byte. The groups come in the order of their hashes, whatever the
// number of threads.
// hash_bits keeps the hash's top bits only: with few, unequal rows share a
// hash, which the tests use to check the comparison of candidates.
IdenticalRowGroups find_identical_rows(MatrixView rows, const RunControl& control, int hash_bits = 64);

}  // namespace tsdg
