#include "identical_rows.h"

#include <algorithm>
#include <cstring>

#include "thread_pool.h"

namespace tsdg {

namespace {

struct RowHash {
  uint64_t hash;
  uint32_t id;
};

// Buckets by the hash's top bits: enough that a bucket stays in a core's
// cache at 10M rows, few enough that the counts stay small.
constexpr int kBucketBits = 12;
constexpr int64_t kBuckets = int64_t{1} << kBucketBits;
// Rows a chunk hashes: each chunk keeps a count of every bucket, so large
// sets take larger chunks.
constexpr int64_t kMinChunkRows = 16384;
constexpr int64_t kMostChunks = 1024;

// A hash of a row's bytes in four independent lanes of 64-bit words, so that
// hashing every row costs about a read of the rows.
uint64_t hash_row(const float* row, int dim) {
  const char* bytes = reinterpret_cast<const char*>(row);
  const size_t size = sizeof(float) * static_cast<size_t>(dim);
  uint64_t lane[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull,
                      0x27D4EB2F165667C5ull};
  size_t at = 0;
  for (; at + 32 <= size; at += 32) {
    for (int i = 0; i < 4; ++i) {
      uint64_t word;
      std::memcpy(&word, bytes + at + 8 * i, sizeof(word));
      lane[i] = (lane[i] ^ word) * 0xFF51AFD7ED558CCDull;
      lane[i] ^= lane[i] >> 29;
    }
  }
  for (int i = 0; at < size; at += sizeof(uint32_t), ++i) {
    uint32_t tail;
    std::memcpy(&tail, bytes + at, sizeof(tail));
    lane[i % 4] = (lane[i % 4] ^ tail) * 0xFF51AFD7ED558CCDull;
    lane[i % 4] ^= lane[i % 4] >> 29;
  }
  uint64_t hash = size;
  for (uint64_t value : lane) {
    hash = (hash ^ value) * 0xC4CEB9FE1A85EC53ull;
    hash ^= hash >> 32;
  }
  return hash;
}

int64_t bucket_of(uint64_t hash) { return static_cast<int64_t>(hash >> (64 - kBucketBits)); }

// The groups of one bucket, sorted by hash and then id: within a run of one
// hash the copies of its first row form a group, and rows that only share
// the hash are grouped by a later pass over what is left.
void group_bucket(MatrixView rows, RowHash* begin, RowHash* end, IdenticalRowGroups& out) {
  std::sort(begin, end, [](const RowHash& a, const RowHash& b) {
    return a.hash != b.hash ? a.hash < b.hash : a.id < b.id;
  });
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(rows.dim);
  for (RowHash* run = begin; run < end;) {
    RowHash* run_end = run + 1;
    while (run_end < end && run_end->hash == run->hash) ++run_end;
    for (RowHash* first = run; run_end - first > 1;) {
      RowHash* same = first + 1;
      for (RowHash* other = first + 1; other < run_end; ++other) {
        if (std::memcmp(rows.row(other->id), rows.row(first->id), row_bytes) == 0) {
          std::rotate(same, other, other + 1);  // keeps both parts in id order
          ++same;
        }
      }
      if (same - first > 1) {
        for (RowHash* copy = first; copy < same; ++copy) out.ids.push_back(copy->id);
        out.ends.push_back(static_cast<int64_t>(out.ids.size()));
      }
      first = same;
    }
    run = run_end;
  }
}

}  // namespace

IdenticalRowGroups find_identical_rows(MatrixView rows, const RunControl& control, int hash_bits) {
  IdenticalRowGroups groups;
  const int64_t n = rows.rows;
  if (n < 2) return groups;
  if (n > int64_t{UINT32_MAX}) throw Error(Status::InvalidArgument, "too many rows for 32-bit ids");
  if (hash_bits < 1 || hash_bits > 64) throw Error(Status::InvalidArgument, "hash_bits must be in [1, 64]");
  const uint64_t hash_mask = ~uint64_t{0} << (64 - hash_bits);

  // Hashes, and each chunk's count of every bucket.
  const int64_t chunk_rows = std::max(kMinChunkRows, (n + kMostChunks - 1) / kMostChunks);
  const int64_t chunks = (n + chunk_rows - 1) / chunk_rows;
  std::vector<RowHash> hashes(static_cast<size_t>(n));
  std::vector<int64_t> counts(static_cast<size_t>(chunks * kBuckets), 0);
  parallel_for(control, chunks, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      int64_t* count = counts.data() + chunk * kBuckets;
      for (int64_t i = chunk * chunk_rows; i < std::min(n, (chunk + 1) * chunk_rows); ++i) {
        hashes[i] = RowHash{hash_row(rows.row(i), rows.dim) & hash_mask, static_cast<uint32_t>(i)};
        ++count[bucket_of(hashes[i].hash)];
      }
    }
  });
  control.throw_if_cancelled();

  // Where each chunk's rows of each bucket go: buckets in order, chunks in
  // order within a bucket, so that a bucket's rows stay in id order.
  std::vector<int64_t> bucket_start(kBuckets + 1, 0);
  int64_t at = 0;
  for (int64_t bucket = 0; bucket < kBuckets; ++bucket) {
    bucket_start[bucket] = at;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      int64_t& count = counts[chunk * kBuckets + bucket];
      const int64_t rows_here = count;
      count = at;
      at += rows_here;
    }
  }
  bucket_start[kBuckets] = at;
  std::vector<RowHash> placed(static_cast<size_t>(n));
  parallel_for(control, chunks, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      int64_t* next = counts.data() + chunk * kBuckets;
      for (int64_t i = chunk * chunk_rows; i < std::min(n, (chunk + 1) * chunk_rows); ++i)
        placed[next[bucket_of(hashes[i].hash)]++] = hashes[i];
    }
  });
  control.throw_if_cancelled();
  std::vector<RowHash>().swap(hashes);

  // Each bucket grouped on its own, then the buckets' groups in bucket order.
  std::vector<IdenticalRowGroups> bucket_groups(kBuckets);
  parallel_for(control, kBuckets, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t bucket = begin; bucket < end; ++bucket)
      group_bucket(rows, placed.data() + bucket_start[bucket], placed.data() + bucket_start[bucket + 1],
                   bucket_groups[bucket]);
  });
  control.throw_if_cancelled();
  for (const IdenticalRowGroups& bucket : bucket_groups) {
    const int64_t offset = static_cast<int64_t>(groups.ids.size());
    groups.ids.insert(groups.ids.end(), bucket.ids.begin(), bucket.ids.end());
    for (int64_t end : bucket.ends) groups.ends.push_back(offset + end);
  }
  return groups;
}

}  // namespace tsdg
