// The iteration shared by GNND and GGM (Wang et al., 2021, Algorithm 1 lines 7-35):
// k-NN lists with NEW/OLD flags, sampling of p NEW and p OLD neighbors per list
// with reverse samples appended up to 2p, cross-matching of the samples, and
// the selective update that inserts only the nearest pair found per sample.
#pragma once

#include <cstdint>
#include <vector>

#include "huge_pages.h"
#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

// k-NN lists under construction, each sorted by (distance, id) and guarded by
// its own spinlock so that local joins on all threads can insert into it.
// Each list is one record: its lock and insertion bound, its entries, its
// flags. Kept together, an insertion touches only its own list's cache
// lines; locks and bounds in arrays of their own put 16 to 64 lists on one
// line, which the threads then keep taking from each other.
class DescentLists {
 public:
  static constexpr uint8_t kNew = 1;    // not yet taken as a sample
  static constexpr uint8_t kFresh = 2;  // inserted since the last tally

  // Every list empty, its records written on control's pool.
  DescentLists(int64_t nodes, int k, const RunControl& control);

  struct Entry {
    float dist;
    uint32_t id;
  };

  int64_t nodes() const { return nodes_; }
  int k() const { return k_; }
  Entry* list(int64_t u) { return reinterpret_cast<Entry*>(record(u) + sizeof(Header)); }
  uint8_t* flags(int64_t u) { return record(u) + sizeof(Header) + k_ * sizeof(Entry); }

  // Cheap test without the lock: false when d cannot enter list u.
  bool may_improve(uint32_t u, float d) const {
    float bound;
    __atomic_load(&header(u)->bound, &bound, __ATOMIC_RELAXED);
    return d <= bound;
  }
  void prefetch(uint32_t u) const;
  void prefetch_bound(uint32_t u) const;

  // Sorts list u by (distance, id) and refreshes its insertion bound; for
  // filling the lists before the iterations start (not thread safe).
  void sort_list(int64_t u);

  // Inserts v at distance d into list u unless it is already there or not
  // closer than the list's last entry; marks it NEW and fresh. Thread safe.
  void insert(uint32_t u, uint32_t v, float d);

 private:
  // Read and written through __atomic builtins only.
  struct Header {
    uint32_t lock;
    // The last entry's distance, read without the lock to reject most
    // candidates cheaply; exact checks happen under the lock.
    float bound;
  };

  uint8_t* record(int64_t u) { return records_.data() + u * record_bytes_; }
  const uint8_t* record(int64_t u) const { return records_.data() + u * record_bytes_; }
  Header* header(int64_t u) { return reinterpret_cast<Header*>(record(u)); }
  const Header* header(int64_t u) const { return reinterpret_cast<const Header*>(record(u)); }
  void set_bound(int64_t u, float bound) { __atomic_store(&header(u)->bound, &bound, __ATOMIC_RELAXED); }
  void lock(int64_t u);
  void unlock(int64_t u);

  int64_t nodes_;
  int k_;
  int64_t record_bytes_;  // header, k entries sorted by (dist, id) padded with kInvalidId / +inf, k flags
  HugePageArray<uint8_t> records_;
};

struct DescentOptions {
  int samples = 16;           // p
  int iterations = 12;
  double min_update_rate = 0.001;
  // When positive, rows [0, split) and [split, n) are two sides whose own
  // lists are final (GGM): only pairs across the sides are cross-matched.
  int64_t split = 0;
  // With a split: the forward OLD samples of a row of the first side, when
  // positive and under samples (each row of the second side still takes
  // samples).
  int first_side_old_samples = 0;
  uint64_t seed = 42;  // varies where the reverse sampling starts
  // Run the joins in region_order (see there); off when the rows are already
  // stored in that order.
  bool order_joins_by_region = true;
};

// The rows grouped by their nearest of about n / 1024 pivot rows (drawn with
// seed), as a list of row ids. Joins run in this order find their sample
// rows in cache far more often once the lists hold near neighbors (a region
// of 1024 rows of 128 floats fits in a core's L2); the order never changes
// the result, since each list ends as the best k of everything offered to it.
std::vector<uint32_t> region_order(MatrixView data, uint64_t seed, const RunControl& control);

// For every query row, the index in sample of its nearest row of base among
// the rows sample lists (exact, by metric), without reporting progress.
std::vector<uint32_t> nearest_sampled_row(MatrixView base, const std::vector<uint32_t>& sample,
                                          MatrixView queries, Metric metric, const RunControl& control);

// Starts loading rows ids[0..count) of data into the caches, so that the
// memory latency of rows read at random overlaps the work before them.
// Invalid ids (the padding of short lists) are skipped.
inline void prefetch_rows(MatrixView data, const uint32_t* ids, int count) {
  const int64_t row_bytes = int64_t{data.dim} * sizeof(float);
  for (int j = 0; j < count; ++j) {
    if (ids[j] == kInvalidId) continue;
    const char* row = reinterpret_cast<const char*>(data.row(ids[j]));
    for (int64_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(row + line, 0, 1);
  }
}

// Draws count distinct values from [0, range) (count <= range) into out by
// Floyd's algorithm, advancing the splitmix64 state.
void draw_distinct(uint64_t& state, uint64_t range, int count, uint32_t* out);

// Throws Error(Status::InvalidArgument) unless params and data suit GNND/GGM.
void check_gnnd_params(MatrixView data, const GnndParams& params);

// Refines lists by GNND iterations until options.iterations have run or an
// iteration inserts fewer than min_update_rate * n * k entries. Returns the
// number of iterations run. Reports progress in units of rows joined, out of
// a total of iterations * n that the caller set.
int run_descent(MatrixView data, Metric metric, DescentLists& lists, const DescentOptions& options,
                const RunControl& control);

}  // namespace tsdg
