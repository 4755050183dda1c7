#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "dataset_io.h"

namespace tsdg {
namespace {

class DatasetIo : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tsdg_io_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const auto& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string path(const std::string& name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }
  void write_bytes(const std::string& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

Matrix sample_matrix(int64_t rows, int dim) {
  Matrix m(rows, dim);
  for (size_t i = 0; i < m.values.size(); ++i) m.values[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return m;
}

TEST_F(DatasetIo, FvecsRoundTrip) {
  const Matrix m = sample_matrix(7, 5);
  const std::string p = path("a.fvecs");
  write_fvecs(p, m.view());
  const Matrix back = read_fvecs(p);
  EXPECT_EQ(back.rows, 7);
  EXPECT_EQ(back.dim, 5);
  EXPECT_EQ(back.values, m.values);
  const Matrix head = read_vectors(p, 3);
  EXPECT_EQ(head.rows, 3);
  EXPECT_EQ(std::vector<float>(m.values.begin(), m.values.begin() + 15), head.values);
}

TEST_F(DatasetIo, FbinRoundTrip) {
  const Matrix m = sample_matrix(9, 4);
  const std::string p = path("a.fbin");
  write_fbin(p, m.view());
  const Matrix back = read_vectors(p);
  EXPECT_EQ(back.rows, 9);
  EXPECT_EQ(back.dim, 4);
  EXPECT_EQ(back.values, m.values);
  EXPECT_EQ(read_fbin(p, 100).rows, 9);
}

TEST_F(DatasetIo, IvecsRoundTrip) {
  IntMatrix m;
  m.rows = 3;
  m.dim = 2;
  m.values = {1, 2, -3, 4, 500000, 6};
  const std::string p = path("a.ivecs");
  write_ivecs(p, m);
  const IntMatrix back = read_ivecs(p);
  EXPECT_EQ(back.rows, 3);
  EXPECT_EQ(back.dim, 2);
  EXPECT_EQ(back.values, m.values);
  EXPECT_EQ(back.row(2)[0], 500000);
}

TEST_F(DatasetIo, ReadsBvecsAndIbin) {
  const std::string b = path("a.bvecs");
  // Two rows of dimension 3.
  write_bytes(b, std::string("\x03\x00\x00\x00\x01\x02\xff\x03\x00\x00\x00\x00\x10\x20", 14));
  const Matrix m = read_vectors(b);
  EXPECT_EQ(m.rows, 2);
  EXPECT_EQ(m.values, (std::vector<float>{1, 2, 255, 0, 16, 32}));

  const std::string i = path("a.ibin");
  write_bytes(i, std::string("\x02\x00\x00\x00\x01\x00\x00\x00\x07\x00\x00\x00\x09\x00\x00\x00", 16));
  const IntMatrix ints = read_ibin(i);
  EXPECT_EQ(ints.rows, 2);
  EXPECT_EQ(ints.dim, 1);
  EXPECT_EQ(ints.values, (std::vector<int32_t>{7, 9}));
}

void expect_invalid(const std::function<void()>& read) {
  try {
    read();
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
  }
}

TEST_F(DatasetIo, RejectsBadFiles) {
  expect_invalid([&] { read_fvecs(dir_ + "/missing.fvecs"); });
  const std::string truncated = path("t.fvecs");
  write_bytes(truncated, std::string("\x02\x00\x00\x00\x00\x00\x80\x3f", 8));  // one float of two
  expect_invalid([&] { read_fvecs(truncated); });
  const std::string ragged = path("r.fvecs");
  write_bytes(ragged, std::string("\x01\x00\x00\x00\x00\x00\x80\x3f\x02\x00\x00\x00\x00\x00\x80\x3f", 16));
  expect_invalid([&] { read_fvecs(ragged); });
  const std::string negative = path("n.fvecs");
  write_bytes(negative, std::string("\xff\xff\xff\xff", 4));
  expect_invalid([&] { read_fvecs(negative); });
  const std::string short_bin = path("s.fbin");
  write_bytes(short_bin, std::string("\x05\x00\x00\x00\x02\x00\x00\x00\x00\x00\x80\x3f", 12));
  expect_invalid([&] { read_fbin(short_bin); });
  expect_invalid([&] { read_vectors(path("x.txt")); });
}

}  // namespace
}  // namespace tsdg
