// The pending rows' brute force by batch size: tsdg_exact_set_search on the
// GPU backend against the CPU backend's, on the same random rows, each call
// timed on the host after warm-up (it returns its results to host memory,
// as the worker needs them). The GPU's answers are checked against the CPU's.
//   tsdg-exact-set-bench PATH_TO_pg_tsdg_cuda.so [ROWS [DIM]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tsdg_capi.h"

namespace {

constexpr int kMaxQueries = 4096;
constexpr int kMaxK = 100;

double microseconds_per_call(TsdgExactSet* set, const std::vector<float>& queries, int nq, int k,
                             std::vector<uint32_t>& ids, std::vector<float>& dists, int reps) {
  TsdgError error;
  for (int w = 0; w < 3; ++w) {
    if (tsdg_exact_set_search(set, queries.data(), nq, k, ids.data(), dists.data(), &error) != TSDG_OK) {
      std::fprintf(stderr, "search failed: %s\n", error.message);
      std::exit(1);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) tsdg_exact_set_search(set, queries.data(), nq, k, ids.data(), dists.data(), &error);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_pg_tsdg_cuda.so [ROWS [DIM]]\n", argv[0]);
    return 2;
  }
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 100000;
  const int dim = argc > 3 ? std::atoi(argv[3]) : 128;
  TsdgError error;
  TsdgBackend* gpu = tsdg_backend_load(argv[1], 0, &error);
  if (gpu == nullptr) {
    std::fprintf(stderr, "no GPU backend: %s\n", error.message);
    return 1;
  }
  std::vector<float> base(static_cast<size_t>(rows) * dim), queries(static_cast<size_t>(kMaxQueries) * dim);
  std::mt19937 random(1);
  std::normal_distribution<float> normal;
  for (float& x : base) x = normal(random);
  for (float& x : queries) x = normal(random);

  TsdgExactSet* on_gpu = tsdg_exact_set_create(gpu, dim, TSDG_METRIC_L2, &error);
  TsdgExactSet* on_cpu = tsdg_exact_set_create(nullptr, dim, TSDG_METRIC_L2, &error);
  if (on_gpu == nullptr || on_cpu == nullptr ||
      tsdg_exact_set_append(on_gpu, base.data(), rows, &error) != TSDG_OK ||
      tsdg_exact_set_append(on_cpu, base.data(), rows, &error) != TSDG_OK) {
    std::fprintf(stderr, "could not fill the sets: %s\n", error.message);
    return 1;
  }
  std::vector<uint32_t> gpu_ids(static_cast<size_t>(kMaxQueries) * kMaxK), cpu_ids(gpu_ids.size());
  std::vector<float> gpu_dists(gpu_ids.size()), cpu_dists(gpu_ids.size());
  std::printf("%lld rows x %d, L2; per call (us), GPU against the CPU backend's set\n", static_cast<long long>(rows), dim);
  std::printf("| k | queries | GPU us | CPU us | CPU / GPU | GPU ids equal to the CPU's |\n|---|---|---|---|---|---|\n");
  for (int k : {10, 32, kMaxK}) {
    for (int nq : {1, 8, 64, 512, kMaxQueries}) {
      const double gpu_us = microseconds_per_call(on_gpu, queries, nq, k, gpu_ids, gpu_dists, 20);
      const double cpu_us = microseconds_per_call(on_cpu, queries, nq, k, cpu_ids, cpu_dists, nq >= 512 ? 1 : 5);
      int64_t equal = 0;
      for (int64_t i = 0; i < static_cast<int64_t>(nq) * k; ++i) equal += gpu_ids[i] == cpu_ids[i];
      std::printf("| %d | %d | %.1f | %.1f | %.1f | %.4f |\n", k, nq, gpu_us, cpu_us, cpu_us / gpu_us,
                  static_cast<double>(equal) / (static_cast<double>(nq) * k));
    }
  }
  tsdg_exact_set_free(on_gpu);
  tsdg_exact_set_free(on_cpu);
  tsdg_backend_free(gpu);
  return 0;
}
