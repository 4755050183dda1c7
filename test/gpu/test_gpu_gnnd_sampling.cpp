// GNND's sampling (cuda/gnnd.cu, sample_lists) ranks an entry from the
// list's sorted segments; here against a host rank over the whole list, on
// random lists whose segments are sorted as the inserts keep them: with
// distance ties, short and empty segments, NEW and OLD entries, and the
// incremental merge's cap on the old rows' OLD samples.
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "gnnd_workspace.h"
#include "gpu_test_support.h"

namespace tsdg {
namespace {

using cuda::kNewFlag;
using cuda::kSegmentSize;

struct Lists {
  std::vector<uint32_t> ids;  // flagged
  std::vector<float> dists;
};

// Segment s of a list holds ids v with v % segments == s, sorted by
// (distance, id), its invalid slots last; a quarter of the segments are
// short, a third of the entries NEW.
Lists random_sorted_lists(int64_t nodes, int k, uint64_t seed) {
  const int segments = cuda::segment_count(k);
  std::mt19937_64 random(seed);
  Lists lists{std::vector<uint32_t>(nodes * k, kInvalidId), std::vector<float>(nodes * k, INFINITY)};
  for (int64_t v = 0; v < nodes; ++v) {
    for (int s = 0; s < segments; ++s) {
      const int length = std::min(kSegmentSize, k - s * kSegmentSize);
      const int valid = random() % 4 == 0 ? static_cast<int>(random() % (length + 1)) : length;
      std::vector<std::pair<float, uint32_t>> entries;
      while (static_cast<int>(entries.size()) < valid) {
        const auto id = static_cast<uint32_t>((random() % (nodes / segments)) * segments + s);
        if (std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.second == id; })) continue;
        entries.emplace_back(static_cast<float>(random() % 40) * 0.25f, id);  // ties on purpose
      }
      std::sort(entries.begin(), entries.end());
      for (int j = 0; j < valid; ++j) {
        const int64_t at = v * k + s * kSegmentSize + j;
        lists.ids[at] = entries[j].second | (random() % 3 == 0 ? kNewFlag : 0u);
        lists.dists[at] = entries[j].first;
      }
    }
  }
  return lists;
}

struct Samples {
  std::vector<uint32_t> new_samples;
  std::vector<uint32_t> old_samples;
  std::vector<int> forward_new;
  std::vector<int> forward_old;
  std::vector<uint32_t> ids_after;
};

// The host's sampling: each kind's eligible entries ranked by (distance, id) over the whole list.
Samples host_samples(const Lists& lists, int64_t nodes, int k, int p, int64_t capped_end, int capped_old) {
  Samples out{std::vector<uint32_t>(nodes * 2 * p, kInvalidId), std::vector<uint32_t>(nodes * 2 * p, kInvalidId),
              std::vector<int>(nodes), std::vector<int>(nodes), lists.ids};
  for (int64_t v = 0; v < nodes; ++v) {
    const bool capped = v < capped_end;
    std::vector<std::tuple<float, uint32_t, int>> kinds[2];  // OLD, NEW: (distance, id, slot)
    for (int j = 0; j < k; ++j) {
      const uint32_t entry = lists.ids[v * k + j];
      if (entry == kInvalidId) continue;
      const bool is_new = (entry & kNewFlag) != 0;
      const uint32_t id = entry & ~kNewFlag;
      if (!is_new && capped && id >= capped_end) continue;
      kinds[is_new].emplace_back(lists.dists[v * k + j], id, j);
    }
    for (int is_new = 0; is_new < 2; ++is_new) {
      std::sort(kinds[is_new].begin(), kinds[is_new].end());
      const int limit = is_new || !capped ? p : capped_old;
      const int taken = std::min(static_cast<int>(kinds[is_new].size()), limit);
      (is_new ? out.forward_new : out.forward_old)[v] = taken;
      for (int r = 0; r < taken; ++r) {
        const auto [dist, id, slot] = kinds[is_new][r];
        (is_new ? out.new_samples : out.old_samples)[v * 2 * p + r] = id;
        if (is_new) out.ids_after[v * k + slot] = id;
      }
    }
  }
  return out;
}

template <class T>
std::vector<T> download(const cuda::DeviceBuffer<T>& buffer, size_t count) {
  std::vector<T> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), buffer.data(), count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

void expect_host_samples(int64_t nodes, int k, int p, int64_t capped_end, int capped_old, uint64_t seed) {
  const Lists lists = random_sorted_lists(nodes, k, seed);
  cuda::GnndWorkspace ws(nodes, k, p);
  ASSERT_EQ(cudaMemcpy(ws.ids.data(), lists.ids.data(), lists.ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ws.dists.data(), lists.dists.data(), lists.dists.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  const size_t sample_slots = static_cast<size_t>(nodes) * 2 * p;
  ASSERT_EQ(cudaMemset(ws.new_samples.data(), 0xff, sample_slots * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(ws.old_samples.data(), 0xff, sample_slots * 4), cudaSuccess);
  cuda::sample_lists(ws, capped_end, capped_old, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const Samples expected = host_samples(lists, nodes, k, p, capped_end, capped_old);
  EXPECT_EQ(download(ws.forward_new, nodes), expected.forward_new);
  EXPECT_EQ(download(ws.forward_old, nodes), expected.forward_old);
  EXPECT_EQ(download(ws.total_new, nodes), expected.forward_new);
  EXPECT_EQ(download(ws.total_old, nodes), expected.forward_old);
  EXPECT_EQ(download(ws.new_samples, sample_slots), expected.new_samples);
  EXPECT_EQ(download(ws.old_samples, sample_slots), expected.old_samples);
  EXPECT_EQ(download(ws.ids, lists.ids.size()), expected.ids_after);
}

TEST(GpuGnndSampling, SameSamplesAsARankOverTheWholeList) {
  TSDG_REQUIRE_GPU();
  (void)gpu_backend;  // the workspace and the kernel use the current device directly
  expect_host_samples(30000, 64, 16, 0, 0, 1);      // GNND: two full segments
  expect_host_samples(30000, 40, 16, 0, 0, 2);      // a segment of 8
  expect_host_samples(30000, 96, 32, 0, 0, 3);      // three segments, p 32
  expect_host_samples(30000, 64, 16, 18000, 8, 4);  // GGM's old rows: 8 OLD samples below the split
}

}  // namespace
}  // namespace tsdg
