// The groups of identical rows (identical_rows.h, tsdg_identical_rows_job_*)
// against grouping by a map of each row's bytes: the same groups, each in id
// order, whatever the number of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "identical_rows.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace {

struct Rows {
  std::vector<float> values;
  int64_t n = 0;
  int dim = 0;
  MatrixView view() const { return MatrixView{values.data(), n, dim}; }
};

// n random rows, with copies of a few of them placed at random ids; rows
// that differ from a copied row in one component only, the last or the
// first, or in the sign of a zero.
Rows rows_with_copies(int64_t n, int dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Rows rows{std::vector<float>(static_cast<size_t>(n) * dim), n, dim};
  for (float& value : rows.values) value = normal(rng);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int group = 0; group < 20; ++group) {
    const int64_t source = pick(rng);
    const int copies = 1 + group * 3;
    for (int c = 0; c < copies; ++c)
      std::memcpy(&rows.values[pick(rng) * dim], &rows.values[source * dim], sizeof(float) * dim);
  }
  for (int near = 0; near < 10; ++near) {
    const int64_t source = pick(rng), target = pick(rng);
    std::memcpy(&rows.values[target * dim], &rows.values[source * dim], sizeof(float) * dim);
    float& changed = rows.values[target * dim + (near % 2 == 0 ? dim - 1 : 0)];
    changed = near % 3 == 0 ? std::nextafter(changed, 1e30f) : changed + 1.0f;
  }
  std::memset(&rows.values[0], 0, sizeof(float) * dim);
  std::memset(&rows.values[static_cast<size_t>(n - 1) * dim], 0, sizeof(float) * dim);
  rows.values[static_cast<size_t>(n - 1) * dim] = -0.0f;
  return rows;
}

// The groups by a map of the rows' bytes, ordered by their first id.
std::vector<std::vector<uint32_t>> expected_groups(const Rows& rows) {
  std::map<std::string, std::vector<uint32_t>> by_bytes;
  for (int64_t i = 0; i < rows.n; ++i)
    by_bytes[std::string(reinterpret_cast<const char*>(rows.view().row(i)), sizeof(float) * rows.dim)]
        .push_back(static_cast<uint32_t>(i));
  std::vector<std::vector<uint32_t>> groups;
  for (auto& [bytes, ids] : by_bytes)
    if (ids.size() > 1) groups.push_back(ids);
  std::sort(groups.begin(), groups.end());
  return groups;
}

std::vector<std::vector<uint32_t>> split(const std::vector<uint32_t>& ids, const std::vector<int64_t>& ends) {
  std::vector<std::vector<uint32_t>> groups;
  int64_t start = 0;
  for (int64_t end : ends) {
    groups.emplace_back(ids.begin() + start, ids.begin() + end);
    start = end;
  }
  return groups;
}

std::vector<std::vector<uint32_t>> sorted(std::vector<std::vector<uint32_t>> groups) {
  std::sort(groups.begin(), groups.end());
  return groups;
}

TEST(IdenticalRows, FindsEveryGroupInIdOrder) {
  for (int dim : {1, 3, 8, 16, 130}) {
    const Rows rows = rows_with_copies(5000, dim, 7 + dim);
    const auto expected = expected_groups(rows);
    ASSERT_GE(expected.size(), 15u) << "dim " << dim;
    IdenticalRowGroups found = find_identical_rows(rows.view(), RunControl{});
    const auto groups = split(found.ids, found.ends);
    for (const auto& group : groups) EXPECT_TRUE(std::is_sorted(group.begin(), group.end())) << "dim " << dim;
    EXPECT_EQ(sorted(groups), expected) << "dim " << dim;
  }
}

TEST(IdenticalRows, RowsThatShareAHashAreComparedByteForByte) {
  const Rows rows = rows_with_copies(6000, 10, 17);
  const auto expected = expected_groups(rows);
  for (int bits : {1, 3, 14}) {
    IdenticalRowGroups found = find_identical_rows(rows.view(), RunControl{}, bits);
    const auto groups = split(found.ids, found.ends);
    for (const auto& group : groups) EXPECT_TRUE(std::is_sorted(group.begin(), group.end())) << bits << " bits";
    EXPECT_EQ(sorted(groups), expected) << bits << " bits";
  }
}

TEST(IdenticalRows, TheSameGroupsInTheSameOrderOnAnyNumberOfThreads) {
  const Rows rows = rows_with_copies(300000, 12, 3);
  const IdenticalRowGroups alone = find_identical_rows(rows.view(), RunControl{});
  EXPECT_EQ(sorted(split(alone.ids, alone.ends)), expected_groups(rows));
  for (int threads : {2, 5}) {
    ThreadPool pool(threads);
    RunControl control;
    control.pool = &pool;
    const IdenticalRowGroups spread = find_identical_rows(rows.view(), control);
    EXPECT_EQ(spread.ids, alone.ids) << threads << " threads";
    EXPECT_EQ(spread.ends, alone.ends) << threads << " threads";
  }
}

TEST(IdenticalRows, UniqueRowsAndTinySetsHaveNoGroups) {
  Rows rows{{1, 2, 3, 4, 5, 6}, 3, 2};
  EXPECT_TRUE(find_identical_rows(rows.view(), RunControl{}).ids.empty());
  Rows one{{1, 2}, 1, 2};
  EXPECT_TRUE(find_identical_rows(one.view(), RunControl{}).ends.empty());
  Rows all_same{std::vector<float>(4000, 0.5f), 1000, 4};
  const IdenticalRowGroups groups = find_identical_rows(all_same.view(), RunControl{});
  ASSERT_EQ(groups.ends.size(), 1u);
  EXPECT_EQ(groups.ids.size(), 1000u);
  EXPECT_TRUE(std::is_sorted(groups.ids.begin(), groups.ids.end()));
}

TEST(IdenticalRows, StopsWhenCancelled) {
  const Rows rows = rows_with_copies(50000, 8, 5);
  std::atomic<bool> cancel{true};
  RunControl control;
  control.cancel = &cancel;
  try {
    find_identical_rows(rows.view(), control);
    FAIL() << "a cancelled search returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), Status::Cancelled);
  }
}

TEST(IdenticalRowsJob, GivesTheGroupsOfTheCoreSearch) {
  const Rows rows = rows_with_copies(100000, 24, 11);
  TsdgError error;
  TsdgIdenticalRowsJob* job = tsdg_identical_rows_job_start(rows.values.data(), rows.n, rows.dim, &error);
  ASSERT_NE(job, nullptr) << error.message;
  int64_t groups = -1, group_rows = -1;
  double seconds = -1.0;
  ASSERT_EQ(tsdg_identical_rows_job_wait(job, &groups, &group_rows, &seconds, &error), TSDG_OK) << error.message;
  EXPECT_TRUE(tsdg_identical_rows_job_done(job));
  EXPECT_GE(seconds, 0.0);
  std::vector<uint32_t> ids(static_cast<size_t>(group_rows));
  std::vector<int64_t> ends(static_cast<size_t>(groups));
  tsdg_identical_rows_job_take(job, ids.data(), ends.data());
  const IdenticalRowGroups direct = find_identical_rows(rows.view(), RunControl{});
  EXPECT_EQ(ids, direct.ids);
  EXPECT_EQ(ends, direct.ends);
  EXPECT_EQ(sorted(split(ids, ends)), expected_groups(rows));
}

TEST(IdenticalRowsJob, RefusesBadArgumentsAndCancels) {
  TsdgError error;
  EXPECT_EQ(tsdg_identical_rows_job_start(nullptr, 10, 4, &error), nullptr);
  EXPECT_STRNE(error.message, "");
  float row[4] = {0, 0, 0, 0};
  EXPECT_EQ(tsdg_identical_rows_job_start(row, 1, 0, &error), nullptr);
  EXPECT_EQ(tsdg_identical_rows_job_start(row, -1, 4, &error), nullptr);
  tsdg_identical_rows_job_cancel(nullptr);
  const Rows rows = rows_with_copies(200000, 32, 13);
  TsdgIdenticalRowsJob* job = tsdg_identical_rows_job_start(rows.values.data(), rows.n, rows.dim, &error);
  ASSERT_NE(job, nullptr) << error.message;
  tsdg_identical_rows_job_cancel(job);
}

}  // namespace
}  // namespace tsdg
