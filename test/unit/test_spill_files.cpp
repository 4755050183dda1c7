// Arrays in temporary files: while a spill directory is set, large arrays
// are shared mappings of files there (unlinked, so the directory stays
// empty) that hold what is written to them, smaller ones and every array
// once spilling is off come from the heap, and a build's graph is the same
// wherever its arrays live.
#include <gtest/gtest.h>

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "huge_pages.h"
#include "spill_files.h"
#include "synthetic.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace {

constexpr size_t kMinBytes = size_t{1} << 20;

class SpillFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tsdg_spill_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
  }
  void TearDown() override {
    set_spill_directory("", 0);
    rmdir(directory_.c_str());
  }
  int entries() const {
    int count = 0;
    DIR* dir = opendir(directory_.c_str());
    while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
    return count;
  }
  std::string directory_;
};

// A line of /proc/self/maps for the mapping that starts at memory.
std::string mapping_of(const void* memory) {
  std::ifstream maps("/proc/self/maps");
  char start[32];
  snprintf(start, sizeof(start), "%lx-", reinterpret_cast<unsigned long>(memory));
  for (std::string line; std::getline(maps, line);) {
    if (line.rfind(start, 0) == 0) return line;
  }
  return "";
}

TEST_F(SpillFiles, LargeArraysAreUnlinkedFiles) {
  set_spill_directory(directory_, kMinBytes);
  const size_t count = (size_t{8} << 20) / sizeof(uint32_t);
  uint32_t* values = static_cast<uint32_t*>(allocate_huge_page_backed(count * sizeof(uint32_t)));
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<uint32_t>(i * 2654435761u);
  EXPECT_EQ(entries(), 0);
  const std::string line = mapping_of(values);
  EXPECT_NE(line.find(directory_ + "/tsdg_spill."), std::string::npos) << line;
  EXPECT_NE(line.find("(deleted)"), std::string::npos) << line;
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(values[i], static_cast<uint32_t>(i * 2654435761u));
  free_huge_page_backed(values);
  EXPECT_EQ(mapping_of(values), "");
}

TEST_F(SpillFiles, SmallArraysAndArraysAfterwardsStayOnTheHeap) {
  set_spill_directory(directory_, kMinBytes);
  void* small = allocate_huge_page_backed(kMinBytes - 1);
  EXPECT_FALSE(spill_free(small));
  free_huge_page_backed(small);
  set_spill_directory("", 0);
  void* large = allocate_huge_page_backed(kMinBytes * 4);
  EXPECT_EQ(mapping_of(large).find("tsdg_spill"), std::string::npos);
  free_huge_page_backed(large);
}

TEST_F(SpillFiles, MissingDirectoryIsAnError) {
  set_spill_directory(directory_ + "/missing", kMinBytes);
  EXPECT_THROW(allocate_huge_page_backed(kMinBytes), Error);
  void* memory = nullptr;
  TsdgError error;
  EXPECT_EQ(tsdg_spill_allocate(kMinBytes, &memory, &error), TSDG_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(memory, nullptr);
}

TEST_F(SpillFiles, BuildInFilesEqualsBuildInMemory) {
  const int64_t n = 4000;
  const int dim = 16;
  SyntheticSpec spec;
  spec.rows = n;
  spec.dim = dim;
  spec.clusters = 20;
  const Matrix rows = make_clustered(spec);
  TsdgBuildParams params;
  tsdg_build_params_default(&params);
  params.threads = 1;  // one thread: the same graph on every run
  std::vector<uint32_t> neighbors[2];
  std::vector<uint8_t> lambdas[2];
  for (int spilled = 0; spilled < 2; ++spilled) {
    set_spill_directory(spilled ? directory_ : "", kMinBytes / 16);
    neighbors[spilled].resize(n * params.degree);
    lambdas[spilled].resize(n * params.degree);
    TsdgError error;
    ASSERT_EQ(tsdg_build_graph(nullptr, rows.values.data(), n, dim, TSDG_METRIC_L2, &params,
                               neighbors[spilled].data(), lambdas[spilled].data(), nullptr, nullptr,
                               nullptr, nullptr, &error),
              TSDG_OK)
        << error.message;
  }
  EXPECT_EQ(neighbors[0], neighbors[1]);
  EXPECT_EQ(lambdas[0], lambdas[1]);
}

}  // namespace
}  // namespace tsdg
