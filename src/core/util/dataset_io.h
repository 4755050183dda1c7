// Readers and writers for the standard ANN benchmark formats:
//   .fvecs / .ivecs / .bvecs: per row an int32 dim, then dim float32 / int32 / uint8
//   .fbin / .ibin: int32 rows, int32 dim, then rows * dim float32 / int32
// Readers throw Error(Status::InvalidArgument) on malformed or unreadable files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "types.h"

namespace tsdg {

// An owning row-major int32 set (ground-truth ids).
struct IntMatrix {
  std::vector<int32_t> values;
  int64_t rows = 0;
  int dim = 0;

  const int32_t* row(int64_t i) const { return values.data() + i * static_cast<int64_t>(dim); }
};

// max_rows < 0: read every row.
Matrix read_fvecs(const std::string& path, int64_t max_rows = -1);
Matrix read_bvecs(const std::string& path, int64_t max_rows = -1);  // bytes widened to float
IntMatrix read_ivecs(const std::string& path, int64_t max_rows = -1);
Matrix read_fbin(const std::string& path, int64_t max_rows = -1);
IntMatrix read_ibin(const std::string& path, int64_t max_rows = -1);

// Reads any float format by its extension (.fvecs, .bvecs, .fbin).
Matrix read_vectors(const std::string& path, int64_t max_rows = -1);

void write_fvecs(const std::string& path, MatrixView rows);
void write_ivecs(const std::string& path, const IntMatrix& rows);
void write_fbin(const std::string& path, MatrixView rows);

}  // namespace tsdg
