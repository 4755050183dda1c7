#include "dataset_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tsdg {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(Status::InvalidArgument, path + ": " + what);
}

File open_file(const std::string& path, const char* mode) {
  File f(std::fopen(path.c_str(), mode));
  if (!f) fail(path, std::strerror(errno));
  return f;
}

int64_t file_size(std::FILE* f, const std::string& path) {
  if (std::fseek(f, 0, SEEK_END) != 0) fail(path, "cannot seek");
  const long size = std::ftell(f);
  if (size < 0 || std::fseek(f, 0, SEEK_SET) != 0) fail(path, "cannot seek");
  return size;
}

void read_exact(std::FILE* f, void* out, size_t bytes, const std::string& path) {
  if (std::fread(out, 1, bytes, f) != bytes) fail(path, "truncated file");
}

void write_exact(std::FILE* f, const void* in, size_t bytes, const std::string& path) {
  if (std::fwrite(in, 1, bytes, f) != bytes) fail(path, "write failed");
}

int64_t rows_to_read(int64_t available, int64_t max_rows) {
  return max_rows < 0 ? available : std::min(available, max_rows);
}

// The .*vecs formats: every row is an int32 dimension followed by that many
// elements of Element; all rows must have the same dimension.
template <typename Element, typename Out>
void read_vecs(const std::string& path, int64_t max_rows, std::vector<Out>& values, int64_t& rows,
               int& dim) {
  File f = open_file(path, "rb");
  const int64_t size = file_size(f.get(), path);
  if (size == 0) {
    rows = 0;
    dim = 0;
    values.clear();
    return;
  }
  int32_t d = 0;
  read_exact(f.get(), &d, sizeof d, path);
  if (d <= 0 || d > (1 << 20)) fail(path, "bad dimension " + std::to_string(d));
  const int64_t record = sizeof(int32_t) + static_cast<int64_t>(d) * sizeof(Element);
  if (size % record != 0) fail(path, "size is not a whole number of rows of dimension " + std::to_string(d));
  rows = rows_to_read(size / record, max_rows);
  dim = d;
  values.resize(static_cast<size_t>(rows) * d);
  std::vector<Element> buffer(d);
  for (int64_t i = 0; i < rows; ++i) {
    if (i > 0) {
      int32_t di = 0;
      read_exact(f.get(), &di, sizeof di, path);
      if (di != d) fail(path, "row " + std::to_string(i) + " has dimension " + std::to_string(di) + ", expected " + std::to_string(d));
    }
    read_exact(f.get(), buffer.data(), buffer.size() * sizeof(Element), path);
    std::copy(buffer.begin(), buffer.end(), values.begin() + i * d);
  }
}

// The .*bin formats: int32 rows, int32 dim, then rows * dim elements.
template <typename Element>
void read_bin(const std::string& path, int64_t max_rows, std::vector<Element>& values, int64_t& rows,
              int& dim) {
  File f = open_file(path, "rb");
  const int64_t size = file_size(f.get(), path);
  int32_t header[2] = {0, 0};
  read_exact(f.get(), header, sizeof header, path);
  if (header[0] < 0 || header[1] <= 0) {
    fail(path, "bad header: rows " + std::to_string(header[0]) + ", dim " + std::to_string(header[1]));
  }
  const int64_t needed = 8 + static_cast<int64_t>(header[0]) * header[1] * static_cast<int64_t>(sizeof(Element));
  if (size < needed) fail(path, "truncated file: header promises " + std::to_string(header[0]) + " rows");
  rows = rows_to_read(header[0], max_rows);
  dim = header[1];
  values.resize(static_cast<size_t>(rows) * dim);
  read_exact(f.get(), values.data(), values.size() * sizeof(Element), path);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename Element>
void write_vecs(const std::string& path, const Element* values, int64_t rows, int dim) {
  File f = open_file(path, "wb");
  const int32_t d = dim;
  for (int64_t i = 0; i < rows; ++i) {
    write_exact(f.get(), &d, sizeof d, path);
    write_exact(f.get(), values + i * dim, sizeof(Element) * dim, path);
  }
  if (std::fflush(f.get()) != 0) fail(path, "write failed");
}

}  // namespace

Matrix read_fvecs(const std::string& path, int64_t max_rows) {
  Matrix m;
  read_vecs<float>(path, max_rows, m.values, m.rows, m.dim);
  return m;
}

Matrix read_bvecs(const std::string& path, int64_t max_rows) {
  Matrix m;
  read_vecs<uint8_t>(path, max_rows, m.values, m.rows, m.dim);
  return m;
}

IntMatrix read_ivecs(const std::string& path, int64_t max_rows) {
  IntMatrix m;
  read_vecs<int32_t>(path, max_rows, m.values, m.rows, m.dim);
  return m;
}

Matrix read_fbin(const std::string& path, int64_t max_rows) {
  Matrix m;
  read_bin<float>(path, max_rows, m.values, m.rows, m.dim);
  return m;
}

IntMatrix read_ibin(const std::string& path, int64_t max_rows) {
  IntMatrix m;
  read_bin<int32_t>(path, max_rows, m.values, m.rows, m.dim);
  return m;
}

Matrix read_vectors(const std::string& path, int64_t max_rows) {
  if (ends_with(path, ".fvecs")) return read_fvecs(path, max_rows);
  if (ends_with(path, ".bvecs")) return read_bvecs(path, max_rows);
  if (ends_with(path, ".fbin")) return read_fbin(path, max_rows);
  fail(path, "unknown vector file format (expected .fvecs, .bvecs or .fbin)");
}

void write_fvecs(const std::string& path, MatrixView rows) {
  write_vecs(path, rows.data, rows.rows, rows.dim);
}

void write_ivecs(const std::string& path, const IntMatrix& rows) {
  write_vecs(path, rows.values.data(), rows.rows, rows.dim);
}

void write_fbin(const std::string& path, MatrixView rows) {
  if (rows.rows > INT32_MAX) fail(path, "too many rows for .fbin");
  File f = open_file(path, "wb");
  const int32_t header[2] = {static_cast<int32_t>(rows.rows), rows.dim};
  write_exact(f.get(), header, sizeof header, path);
  write_exact(f.get(), rows.data, sizeof(float) * rows.rows * rows.dim, path);
  if (std::fflush(f.get()) != 0) fail(path, "write failed");
}

}  // namespace tsdg
