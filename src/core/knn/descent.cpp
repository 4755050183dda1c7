#include "descent.h"

#include <algorithm>
#include <limits>
#include <string>
#include <thread>
#include <unordered_set>

#include "bruteforce.h"
#include "distance.h"
#include "dot_tiles.h"
#include "thread_pool.h"
#include "tile_nearest.h"

namespace tsdg {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline bool entry_less(float da, uint32_t ia, float db, uint32_t ib) {
  return da < db || (da == db && ia < ib);
}

// Rows joined per chunk of the thread pool: a few milliseconds of work, so
// that cancellation is noticed quickly and threads stay balanced.
constexpr int64_t kJoinChunk = 256;
// Rows per region of the join order: their vectors (512 KiB at 128
// dimensions) stay in a core's L2 cache.
constexpr int64_t kRegionRows = 1024;
// Joins ahead whose sample rows are prefetched.
constexpr int64_t kPrefetchAhead = 2;

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// The samples of one iteration: per row up to 2p NEW and 2p OLD ids, the
// first p of each taken from the row's own list, the rest reverse samples.
struct Samples {
  int capacity = 0;
  HugePageArray<uint32_t> new_ids, old_ids;
  std::vector<int> new_count, old_count;      // after reverse samples
  std::vector<int> new_forward, old_forward;  // from the row's own list

  Samples(int64_t n, int p)
      : capacity(2 * p), new_ids(static_cast<size_t>(n) * 2 * p, kInvalidId),
        old_ids(static_cast<size_t>(n) * 2 * p, kInvalidId),
        new_count(n), old_count(n), new_forward(n), old_forward(n) {}
  uint32_t* new_list(int64_t s) { return new_ids.data() + s * capacity; }
  uint32_t* old_list(int64_t s) { return old_ids.data() + s * capacity; }
};

// A pair found by cross-matching: v is the nearest sample to u in one group.
struct Candidate {
  uint32_t u, v;
  float dist;
};

// Scratch of one worker for the local joins.
struct JoinScratch {
  std::vector<Candidate> candidates;
  std::vector<uint32_t> new_ids, old_ids, columns;
  std::vector<const float*> rows;  // the A side, padded to whole tiles with a zero row
  std::vector<float> zero_row;
  std::vector<float> packed;  // the columns in panels
  std::vector<float> tile;    // dot products, rows x padded columns
  std::vector<float> row_terms, column_terms;
  std::vector<int> row_first, row_second, column_nearest;
  std::vector<float> row_first_dist, row_second_dist, column_nearest_dist;
};

class Descent {
 public:
  Descent(MatrixView data, Metric metric, DescentLists& lists, const DescentOptions& options,
          const RunControl& control)
      : data_(data), metric_(metric), lists_(lists), options_(options), control_(control),
        samples_(data.rows, options.samples), scratch_(worker_count(control)) {
    if (metric_ == Metric::L2) {
      norms_.resize(data.rows);
      row_norms_squared(data, norms_.data());
    }
    if (options_.order_joins_by_region) {
      join_order_ = region_order(data_, options_.seed, control_);
    } else {
      join_order_.resize(data_.rows);
      for (int64_t i = 0; i < data_.rows; ++i) join_order_[i] = static_cast<uint32_t>(i);
    }
  }

  int run() {
    const int64_t n = data_.rows;
    const double stop_below = options_.min_update_rate * static_cast<double>(n) * lists_.k();
    int iteration = 0;
    for (;; ++iteration) {
      const int64_t updates = sample();
      if (iteration > 0 && static_cast<double>(updates) < stop_below) break;
      if (iteration == options_.iterations) break;
      append_reverse_samples(iteration);
      join_all();
    }
    return iteration;
  }

 private:
  // Takes the first p NEW and the first p OLD neighbors of every list as its
  // forward samples and marks the NEW ones OLD. Returns how many entries were
  // inserted since the previous call (the update count of the last iteration).
  int64_t sample() {
    const int k = lists_.k();
    const int p = options_.samples;
    // Across two sides every NEW neighbor of a row lies on the other side (only
    // pairs across the sides are ever inserted), so only OLD neighbors on the
    // row's own side can meet a NEW sample; the others would only take slots.
    const bool split = options_.split > 0;
    const auto side = [&](uint32_t v) { return static_cast<int64_t>(v) >= options_.split; };
    const int first_side_old = split && options_.first_side_old_samples > 0
                                   ? std::min(p, options_.first_side_old_samples)
                                   : p;
    std::vector<int64_t> fresh(worker_count(control_), 0);
    parallel_for(control_, data_.rows, 4096, [&](int64_t begin, int64_t end, int worker) {
      int64_t count = 0;
      for (int64_t s = begin; s < end; ++s) {
        const DescentLists::Entry* entries = lists_.list(s);
        uint8_t* flags = lists_.flags(s);
        uint32_t* new_out = samples_.new_list(s);
        uint32_t* old_out = samples_.old_list(s);
        const int old_p = split && !side(static_cast<uint32_t>(s)) ? first_side_old : p;
        int new_n = 0, old_n = 0;
        for (int j = 0; j < k && entries[j].id != kInvalidId; ++j) {
          if (flags[j] & DescentLists::kFresh) ++count;
          if (flags[j] & DescentLists::kNew) {
            if (new_n < p) {
              new_out[new_n++] = entries[j].id;
              flags[j] = 0;
            } else {
              flags[j] = DescentLists::kNew;
            }
          } else {
            flags[j] = 0;
            if (old_n < old_p && (!split || side(entries[j].id) == side(static_cast<uint32_t>(s)))) {
              old_out[old_n++] = entries[j].id;
            }
          }
        }
        samples_.new_forward[s] = samples_.new_count[s] = new_n;
        samples_.old_forward[s] = samples_.old_count[s] = old_n;
      }
      fresh[worker] += count;
    });
    int64_t total = 0;
    for (int64_t c : fresh) total += c;
    return total;
  }

  // Appends s to the sample lists of its forward samples, up to 2p per list.
  // Every target range scans the sources in the same order (starting at a
  // point that moves each iteration, so that no row is always first), so the
  // result does not depend on how many threads share the work.
  void append_reverse_samples(int iteration) {
    const int64_t n = data_.rows;
    const int64_t start = static_cast<int64_t>(mix(options_.seed ^ (static_cast<uint64_t>(iteration + 1) << 32)) % n);
    const int64_t ranges = std::max<int64_t>(1, worker_count(control_));
    const int64_t range_size = (n + ranges - 1) / ranges;
    parallel_for(control_, ranges, 1, [&](int64_t range, int64_t, int) {
      const uint32_t lo = static_cast<uint32_t>(range * range_size);
      const uint32_t hi = static_cast<uint32_t>(std::min(n, (range + 1) * range_size));
      for (int64_t i = 0; i < n; ++i) {
        if ((i & 0xffff) == 0) control_.throw_if_cancelled();
        const int64_t s = (start + i) % n;
        const uint32_t* fwd_new = samples_.new_list(s);
        for (int j = 0; j < samples_.new_forward[s]; ++j) {
          const uint32_t v = fwd_new[j];
          if (v < lo || v >= hi || samples_.new_count[v] >= samples_.capacity) continue;
          samples_.new_list(v)[samples_.new_count[v]++] = static_cast<uint32_t>(s);
        }
        const uint32_t* fwd_old = samples_.old_list(s);
        for (int j = 0; j < samples_.old_forward[s]; ++j) {
          const uint32_t v = fwd_old[j];
          if (v < lo || v >= hi || samples_.old_count[v] >= samples_.capacity) continue;
          samples_.old_list(v)[samples_.old_count[v]++] = static_cast<uint32_t>(s);
        }
      }
    });
  }

  void join_all() {
    parallel_for(control_, data_.rows, kJoinChunk, [&](int64_t begin, int64_t end, int worker) {
      JoinScratch& scratch = scratch_[worker];
      for (int64_t i = begin; i < end; ++i) {
        if (i + kPrefetchAhead < end) prefetch_samples(join_order_[i + kPrefetchAhead]);
        join(join_order_[i], scratch);
        insert_candidates(scratch.candidates);
      }
      control_.add_done(end - begin);
    });
  }

  // Starts loading the rows that the join of s will read, so that their
  // memory latency overlaps the join before it.
  void prefetch_samples(int64_t s) const {
    // With the rows, the norms and insertion bounds of the samples: every
    // candidate of the join belongs to a sample's list.
    auto fetch = [&](const uint32_t* ids, int count) {
      prefetch_rows(data_, ids, count);
      for (int j = 0; j < count; ++j) {
        if (!norms_.empty()) __builtin_prefetch(&norms_[ids[j]], 0, 1);
        lists_.prefetch_bound(ids[j]);
      }
    };
    fetch(samples_.new_ids.data() + s * samples_.capacity, samples_.new_count[s]);
    fetch(samples_.old_ids.data() + s * samples_.capacity, samples_.old_count[s]);
  }

  // Selective update: only the candidates that can enter their list are kept;
  // their lists are prefetched together before any is locked.
  void insert_candidates(std::vector<Candidate>& candidates) {
    size_t kept = 0;
    for (const Candidate& c : candidates) {
      if (c.u != c.v && lists_.may_improve(c.u, c.dist)) {
        lists_.prefetch(c.u);
        candidates[kept++] = c;
      }
    }
    for (size_t i = 0; i < kept; ++i) lists_.insert(candidates[i].u, candidates[i].v, candidates[i].dist);
    candidates.clear();
  }

  // Cross-matches the samples of row s (Algorithm 1, lines 10-31).
  void join(int64_t s, JoinScratch& scratch) {
    auto& nw = scratch.new_ids;
    auto& od = scratch.old_ids;
    nw.assign(samples_.new_list(s), samples_.new_list(s) + samples_.new_count[s]);
    if (nw.empty()) return;
    od.assign(samples_.old_list(s), samples_.old_list(s) + samples_.old_count[s]);
    // A row can be both a forward and a reverse sample; keep one of each, and
    // drop OLD samples that are also NEW.
    std::sort(nw.begin(), nw.end());
    nw.erase(std::unique(nw.begin(), nw.end()), nw.end());
    std::sort(od.begin(), od.end());
    od.erase(std::unique(od.begin(), od.end()), od.end());
    od.erase(std::remove_if(od.begin(), od.end(),
                            [&](uint32_t v) { return std::binary_search(nw.begin(), nw.end(), v); }),
             od.end());

    if (options_.split <= 0) {
      cross_match(nw.data(), static_cast<int>(nw.size()), kAmongRows, nullptr, 0, od.data(),
                  static_cast<int>(od.size()), scratch);
      return;
    }
    // Two sides: ids below split sort first, so each list splits in two.
    const uint32_t split = static_cast<uint32_t>(options_.split);
    const int new1 = static_cast<int>(std::lower_bound(nw.begin(), nw.end(), split) - nw.begin());
    const int old1 = static_cast<int>(std::lower_bound(od.begin(), od.end(), split) - od.begin());
    const int new2 = static_cast<int>(nw.size()) - new1;
    const int old2 = static_cast<int>(od.size()) - old1;
    // NEW of side 1 against NEW and OLD of side 2; NEW of side 2 against OLD
    // of side 1 only: pairs of NEW samples both on side 2 are within a side.
    cross_match(nw.data(), new1, kGiven, nw.data() + new1, new2, od.data() + old1, old2, scratch);
    cross_match(nw.data() + new1, new2, kGiven, nullptr, 0, od.data(), old1, scratch);
  }

  // Where the NEW samples matched with the rows a come from: the rows
  // themselves (a symmetric block, the diagonal skipped), or other_new.
  enum OtherNew { kAmongRows, kGiven };

  // Distances between rows a and columns (other NEW samples, then OLD samples).
  // Each row gets the nearest other NEW and the nearest OLD sample; each
  // column gets its nearest row.
  void cross_match(const uint32_t* a, int na, OtherNew other, const uint32_t* other_new, int nn,
                   const uint32_t* old, int no, JoinScratch& scratch) {
    const bool symmetric = other == kAmongRows;
    if (symmetric) {
      other_new = a;
      nn = na;
    }
    if (na == 0 || nn + no == 0) return;
    const int dim = data_.dim;
    const int columns = nn + no;
    const int64_t padded_rows = round_up(na, kTileRows);
    const int64_t panels = (columns + kPanelWidth - 1) / kPanelWidth;
    const int64_t stride = panels * kPanelWidth;

    scratch.columns.assign(other_new, other_new + nn);
    scratch.columns.insert(scratch.columns.end(), old, old + no);
    scratch.zero_row.resize(dim, 0.0f);
    scratch.rows.resize(padded_rows);
    for (int64_t i = 0; i < padded_rows; ++i) {
      scratch.rows[i] = i < na ? data_.row(a[i]) : scratch.zero_row.data();
    }
    scratch.tile.resize(padded_rows * stride);
    // Distances as row term + column term - factor * tile (tile_nearest.h):
    // the tile holds dot products, or for L1 the distances themselves
    // (terms 0, factor -1).
    const bool l1 = metric_ == Metric::L1;
    if (l1) {
      for (int i = 0; i < na; ++i) {
        float* tile_row = scratch.tile.data() + i * stride;
        for (int j = 0; j < columns; ++j) tile_row[j] = l1_(scratch.rows[i], data_.row(scratch.columns[j]), dim);
        std::fill(tile_row + columns, tile_row + stride, 0.0f);
      }
    } else {
      scratch.packed.resize(packed_panels_size(columns, dim));
      pack_panels(data_.data, scratch.columns.data(), columns, dim, scratch.packed.data());
      dot_tiles(scratch.rows.data(), padded_rows, scratch.packed.data(), panels, dim,
                scratch.tile.data(), stride);
    }

    scratch.row_terms.resize(na);
    scratch.column_terms.assign(stride, std::numeric_limits<float>::infinity());
    const bool l2 = metric_ == Metric::L2;
    const float row_constant = metric_ == Metric::Cosine ? 1.0f : 0.0f;  // 1 - ip; -ip and L1 add nothing
    for (int i = 0; i < na; ++i) scratch.row_terms[i] = l2 ? norms_[a[i]] : row_constant;
    for (int j = 0; j < columns; ++j) scratch.column_terms[j] = l2 ? norms_[scratch.columns[j]] : 0.0f;
    scratch.row_first.resize(na);
    scratch.row_second.resize(na);
    scratch.row_first_dist.resize(na);
    scratch.row_second_dist.resize(na);
    scratch.column_nearest.resize(stride);
    scratch.column_nearest_dist.resize(stride);
    tile_nearest({scratch.tile.data(), stride, na, columns, nn, scratch.row_terms.data(),
                  scratch.column_terms.data(), l2 ? 2.0f : l1 ? -1.0f : 1.0f, symmetric},
                 {scratch.row_first.data(), scratch.row_first_dist.data(), scratch.row_second.data(),
                  scratch.row_second_dist.data(), scratch.column_nearest.data(),
                  scratch.column_nearest_dist.data()});

    // A rounding below zero is no L2 distance; the minimum is the same.
    const auto distance = [l2](float d) { return l2 ? std::max(0.0f, d) : d; };
    for (int i = 0; i < na; ++i) {
      if (scratch.row_first[i] >= 0) {
        scratch.candidates.push_back(
            {a[i], scratch.columns[scratch.row_first[i]], distance(scratch.row_first_dist[i])});
      }
      if (scratch.row_second[i] >= 0) {
        scratch.candidates.push_back(
            {a[i], scratch.columns[scratch.row_second[i]], distance(scratch.row_second_dist[i])});
      }
    }
    for (int j = symmetric ? nn : 0; j < columns; ++j) {
      if (scratch.column_nearest[j] >= 0) {
        scratch.candidates.push_back(
            {scratch.columns[j], a[scratch.column_nearest[j]], distance(scratch.column_nearest_dist[j])});
      }
    }
  }

  MatrixView data_;
  Metric metric_;
  DescentLists& lists_;
  const DescentOptions& options_;
  const RunControl& control_;
  Samples samples_;
  std::vector<JoinScratch> scratch_;
  std::vector<float> norms_;
  const DistanceFn l1_ = distance_kernels().l1;
  std::vector<uint32_t> join_order_;
};

}  // namespace

DescentLists::DescentLists(int64_t nodes, int k, const RunControl& control)
    : nodes_(nodes), k_(k),
      record_bytes_(round_up(static_cast<int64_t>(sizeof(Header) + k * (sizeof(Entry) + 1)), alignof(Header))),
      records_(static_cast<size_t>(nodes * record_bytes_), HugePageArray<uint8_t>::Unfilled{}) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr int64_t kListsPerChunk = 4096;
  parallel_for(control, nodes, kListsPerChunk, [&](int64_t begin, int64_t end, int) {
    // the whole records, padding too: the array starts unfilled
    std::fill(record(begin), record(begin) + (end - begin) * record_bytes_, uint8_t{0});
    for (int64_t u = begin; u < end; ++u) {
      *header(u) = Header{0, kInf};
      std::fill(list(u), list(u) + k_, Entry{kInf, kInvalidId});
    }
  });
}

void DescentLists::sort_list(int64_t u) {
  Entry* e = list(u);
  uint8_t* f = flags(u);
  // Insertion sort: lists are short and often nearly sorted.
  for (int j = 1; j < k_; ++j) {
    const Entry ve = e[j];
    const uint8_t vf = f[j];
    int i = j;
    for (; i > 0 && entry_less(ve.dist, ve.id, e[i - 1].dist, e[i - 1].id); --i) {
      e[i] = e[i - 1];
      f[i] = f[i - 1];
    }
    e[i] = ve;
    f[i] = vf;
  }
  set_bound(u, e[k_ - 1].dist);
}

void DescentLists::prefetch(uint32_t u) const {
  const char* begin = reinterpret_cast<const char*>(record(u));
  const char* end = begin + record_bytes_;
  for (const char* line = begin; line < end; line += 64) __builtin_prefetch(line, 1);
  __builtin_prefetch(end - 1, 1);  // the record need not start on a line
}

void DescentLists::prefetch_bound(uint32_t u) const { __builtin_prefetch(header(u), 0, 1); }

void DescentLists::lock(int64_t u) {
  uint32_t* word = &header(u)->lock;
  // A list stays locked for well under a microsecond, unless its holder lost
  // its core to another process: then give the core back rather than spin
  // through the holder's time slice.
  constexpr int kSpinsBeforeYield = 1024;
  while (__atomic_exchange_n(word, 1u, __ATOMIC_ACQUIRE) != 0) {
    for (int spins = 0; __atomic_load_n(word, __ATOMIC_RELAXED) != 0; ++spins) {
      if (spins < kSpinsBeforeYield) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
  }
}

void DescentLists::unlock(int64_t u) { __atomic_store_n(&header(u)->lock, 0u, __ATOMIC_RELEASE); }

void DescentLists::insert(uint32_t u, uint32_t v, float d) {
  if (u == v || !may_improve(u, d)) return;
  lock(u);
  Entry* e = list(u);
  const int last = k_ - 1;
  if (!entry_less(d, v, e[last].dist, e[last].id)) {
    unlock(u);
    return;
  }
  for (int j = 0; j < k_; ++j) {
    if (e[j].id == v) {
      unlock(u);
      return;
    }
  }
  uint8_t* flag = flags(u);
  int pos = last;
  for (; pos > 0 && entry_less(d, v, e[pos - 1].dist, e[pos - 1].id); --pos) {
    e[pos] = e[pos - 1];
    flag[pos] = flag[pos - 1];
  }
  e[pos] = Entry{d, v};
  flag[pos] = kNew | kFresh;
  set_bound(u, e[last].dist);
  unlock(u);
}

void draw_distinct(uint64_t& state, uint64_t range, int count, uint32_t* out) {
  const auto draw = [&](auto&& taken) {
    int drawn = 0;
    for (uint64_t j = range - count; j < range; ++j) {
      state += 0x9e3779b97f4a7c15ULL;
      const auto t = static_cast<uint32_t>(mix(state) % (j + 1));
      out[drawn] = taken(t, drawn) ? static_cast<uint32_t>(j) : t;
      ++drawn;
    }
  };
  // Past a few dozen draws the values drawn go in a hash set: scanning them
  // all is quadratic in the draws, and a merge draws thousands.
  constexpr int kScannedDraws = 64;
  if (count <= kScannedDraws) {
    draw([&](uint32_t t, int drawn) { return std::find(out, out + drawn, t) != out + drawn; });
    return;
  }
  std::unordered_set<uint32_t> values;
  values.reserve(static_cast<size_t>(count) * 2);
  const uint64_t first_j = range - count;
  draw([&](uint32_t t, int drawn) {
    // Floyd's j of this draw is new: no earlier draw can have taken it
    const bool taken = !values.insert(t).second;
    if (taken) values.insert(static_cast<uint32_t>(first_j + drawn));
    return taken;
  });
}

void check_gnnd_params(MatrixView data, const GnndParams& params) {
  if (params.k <= 0 || params.samples <= 0 || params.iterations < 0) {
    throw Error(Status::InvalidArgument,
                "GNND needs k > 0, samples > 0 and iterations >= 0 (k=" + std::to_string(params.k) +
                    ", samples=" + std::to_string(params.samples) + ")");
  }
  if (data.dim <= 0 && data.rows > 0) throw Error(Status::InvalidArgument, "GNND needs dim > 0");
  if (data.rows >= static_cast<int64_t>(kInvalidId)) {
    throw Error(Status::InvalidArgument, "too many rows for 32-bit ids");
  }
}

std::vector<uint32_t> nearest_sampled_row(MatrixView base, const std::vector<uint32_t>& sample,
                                          MatrixView queries, Metric metric, const RunControl& control) {
  const auto count = static_cast<int64_t>(sample.size());
  Matrix sampled(count, base.dim);
  for (int64_t i = 0; i < count; ++i) {
    std::copy(base.row(sample[i]), base.row(sample[i]) + base.dim, sampled.row(i));
  }
  std::vector<uint32_t> nearest(queries.rows);
  std::vector<float> dist(queries.rows);
  RunControl without_progress = control;  // the caller's progress counts its own steps
  without_progress.progress_done = nullptr;
  without_progress.progress_total = nullptr;
  exact_knn(sampled.view(), queries, metric, 1, nearest.data(), dist.data(), without_progress);
  return nearest;
}

std::vector<uint32_t> region_order(MatrixView data, uint64_t seed, const RunControl& control) {
  const int64_t n = data.rows;
  const int64_t regions = std::max<int64_t>(1, n / kRegionRows);
  std::vector<uint32_t> order(n);
  if (regions == 1) {
    for (int64_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
    return order;
  }
  std::vector<uint32_t> pivot_ids(regions);
  uint64_t state = seed ^ 0x726567696f6e73ULL;
  draw_distinct(state, static_cast<uint64_t>(n), static_cast<int>(regions), pivot_ids.data());
  const std::vector<uint32_t> region = nearest_sampled_row(data, pivot_ids, data, Metric::L2, control);
  std::vector<int64_t> start(regions + 1, 0);
  for (uint32_t r : region) ++start[r + 1];
  for (int64_t r = 0; r < regions; ++r) start[r + 1] += start[r];
  for (int64_t i = 0; i < n; ++i) order[start[region[i]]++] = static_cast<uint32_t>(i);
  return order;
}

int run_descent(MatrixView data, Metric metric, DescentLists& lists, const DescentOptions& options,
                const RunControl& control) {
  if (data.rows < 2 || options.iterations <= 0) return 0;
  Descent descent(data, metric, lists, options, control);
  return descent.run();
}

}  // namespace tsdg
