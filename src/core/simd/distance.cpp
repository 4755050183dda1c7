// Distance kernels: one reduction per metric, written three times for the
// instruction sets that matter (AVX-512F, AVX2+FMA, and plain x86-64/any CPU),
// the best one this CPU runs chosen once at first use. The binary is built for
// the baseline ISA; only the functions marked with a target attribute use the
// wider instructions, so it runs everywhere.
//
// Every kernel accumulates in float with several independent accumulators, so
// consecutive iterations do not wait on one add/FMA latency chain. The vector
// tails are handled with masked loads: a masked-out lane reads 0 from both
// operands, and (0 - 0)^2, 0 * 0 and |0 - 0| add nothing.
#include "distance.h"

#include <cmath>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TSDG_X86 1
#endif

#include "tsdg_capi.h"

namespace tsdg {
namespace {

// ---- generic: plain C++ the compiler can vectorize for the baseline ISA ----
namespace generic {

constexpr int kLanes = 8;

template <class Op>
float reduce(const float* a, const float* b, int dim) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= dim; i += kLanes) {
    for (int j = 0; j < kLanes; j++) acc[j] += Op::term(a[i + j], b[i + j]);
  }
  for (int j = 0; i < dim; i++, j++) acc[j] += Op::term(a[i], b[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

struct L2 {
  static float term(float x, float y) { return (x - y) * (x - y); }
};
struct Dot {
  static float term(float x, float y) { return x * y; }
};
struct L1 {
  static float term(float x, float y) { return std::fabs(x - y); }
};

float l2_squared(const float* a, const float* b, int dim) { return reduce<L2>(a, b, dim); }
float inner_product(const float* a, const float* b, int dim) { return reduce<Dot>(a, b, dim); }
float l1(const float* a, const float* b, int dim) { return reduce<L1>(a, b, dim); }

struct CosineParts {
  float dot, norm_a, norm_b;
};
// Three vectorized passes over cache-hot rows: GCC does not vectorize a
// fused three-sum loop for the baseline ISA (measured 3x slower).
CosineParts cosine_parts(const float* a, const float* b, int dim) {
  return {reduce<Dot>(a, b, dim), reduce<Dot>(a, a, dim), reduce<Dot>(b, b, dim)};
}

}  // namespace generic

#ifdef TSDG_X86
// ---- AVX2 + FMA: 8 lanes, 4 accumulators (32 floats per iteration) ----
namespace avx2 {
#define TSDG_AVX2 __attribute__((target("avx2,fma")))

// Lanes [0, rem) enabled: a window into -1 x 8, 0 x 8.
alignas(32) constexpr int32_t kMaskWindow[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                 0,  0,  0,  0,  0,  0,  0,  0};
TSDG_AVX2 inline __m256i tail_mask(int rem) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskWindow + 8 - rem));
}

TSDG_AVX2 inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

struct L2 {
  TSDG_AVX2 static __m256 step(__m256 acc, __m256 x, __m256 y) {
    __m256 d = _mm256_sub_ps(x, y);
    return _mm256_fmadd_ps(d, d, acc);
  }
};
struct Dot {
  TSDG_AVX2 static __m256 step(__m256 acc, __m256 x, __m256 y) {
    return _mm256_fmadd_ps(x, y, acc);
  }
};
struct L1 {
  TSDG_AVX2 static __m256 step(__m256 acc, __m256 x, __m256 y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    return _mm256_add_ps(acc, _mm256_andnot_ps(sign, _mm256_sub_ps(x, y)));
  }
};

template <class Op>
TSDG_AVX2 float reduce(const float* a, const float* b, int dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 32 <= dim; i += 32) {
    acc0 = Op::step(acc0, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    acc1 = Op::step(acc1, _mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    acc2 = Op::step(acc2, _mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
    acc3 = Op::step(acc3, _mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
  }
  for (; i + 8 <= dim; i += 8) {
    acc0 = Op::step(acc0, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
  }
  if (i < dim) {
    const __m256i mask = tail_mask(dim - i);
    acc1 = Op::step(acc1, _mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask));
  }
  return horizontal_sum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

TSDG_AVX2 float l2_squared(const float* a, const float* b, int dim) {
  return reduce<L2>(a, b, dim);
}
TSDG_AVX2 float inner_product(const float* a, const float* b, int dim) {
  return reduce<Dot>(a, b, dim);
}
TSDG_AVX2 float l1(const float* a, const float* b, int dim) { return reduce<L1>(a, b, dim); }

TSDG_AVX2 generic::CosineParts cosine_parts(const float* a, const float* b, int dim) {
  __m256 dot0 = _mm256_setzero_ps(), na0 = _mm256_setzero_ps(), nb0 = _mm256_setzero_ps();
  __m256 dot1 = _mm256_setzero_ps(), na1 = _mm256_setzero_ps(), nb1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= dim; i += 16) {
    __m256 x0 = _mm256_loadu_ps(a + i), y0 = _mm256_loadu_ps(b + i);
    __m256 x1 = _mm256_loadu_ps(a + i + 8), y1 = _mm256_loadu_ps(b + i + 8);
    dot0 = _mm256_fmadd_ps(x0, y0, dot0);
    na0 = _mm256_fmadd_ps(x0, x0, na0);
    nb0 = _mm256_fmadd_ps(y0, y0, nb0);
    dot1 = _mm256_fmadd_ps(x1, y1, dot1);
    na1 = _mm256_fmadd_ps(x1, x1, na1);
    nb1 = _mm256_fmadd_ps(y1, y1, nb1);
  }
  for (; i < dim; i += 8) {
    const __m256i mask = tail_mask(dim - i < 8 ? dim - i : 8);
    __m256 x = _mm256_maskload_ps(a + i, mask), y = _mm256_maskload_ps(b + i, mask);
    dot0 = _mm256_fmadd_ps(x, y, dot0);
    na0 = _mm256_fmadd_ps(x, x, na0);
    nb0 = _mm256_fmadd_ps(y, y, nb0);
  }
  return {horizontal_sum(_mm256_add_ps(dot0, dot1)), horizontal_sum(_mm256_add_ps(na0, na1)),
          horizontal_sum(_mm256_add_ps(nb0, nb1))};
}

#undef TSDG_AVX2
}  // namespace avx2

// ---- AVX-512F: 16 lanes, 4 accumulators (64 floats per iteration) ----
namespace avx512 {
#define TSDG_AVX512 __attribute__((target("avx512f")))

TSDG_AVX512 inline __mmask16 tail_mask(int rem) {
  return static_cast<__mmask16>((1u << rem) - 1u);
}

// Not _mm512_reduce_add_ps: GCC 12 flags its _mm256_undefined_pd as
// uninitialized (GCC PR105593); the zero-masked forms avoid it.
TSDG_AVX512 inline float horizontal_sum(__m512 v) {
  constexpr __mmask16 kAll = 0xFFFF;
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 s = _mm512_maskz_extractf32x4_ps(0xF, v, 0);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

struct L2 {
  TSDG_AVX512 static __m512 step(__m512 acc, __m512 x, __m512 y) {
    __m512 d = _mm512_sub_ps(x, y);
    return _mm512_fmadd_ps(d, d, acc);
  }
};
struct Dot {
  TSDG_AVX512 static __m512 step(__m512 acc, __m512 x, __m512 y) {
    return _mm512_fmadd_ps(x, y, acc);
  }
};
struct L1 {
  TSDG_AVX512 static __m512 step(__m512 acc, __m512 x, __m512 y) {
    return _mm512_add_ps(acc, _mm512_abs_ps(_mm512_sub_ps(x, y)));
  }
};

template <class Op>
TSDG_AVX512 float reduce(const float* a, const float* b, int dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 64 <= dim; i += 64) {
    acc0 = Op::step(acc0, _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    acc1 = Op::step(acc1, _mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    acc2 = Op::step(acc2, _mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32));
    acc3 = Op::step(acc3, _mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48));
  }
  for (; i + 16 <= dim; i += 16) {
    acc0 = Op::step(acc0, _mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
  }
  if (i < dim) {
    const __mmask16 mask = tail_mask(dim - i);
    acc1 = Op::step(acc1, _mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i));
  }
  return horizontal_sum(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

TSDG_AVX512 float l2_squared(const float* a, const float* b, int dim) {
  return reduce<L2>(a, b, dim);
}
TSDG_AVX512 float inner_product(const float* a, const float* b, int dim) {
  return reduce<Dot>(a, b, dim);
}
TSDG_AVX512 float l1(const float* a, const float* b, int dim) { return reduce<L1>(a, b, dim); }

TSDG_AVX512 generic::CosineParts cosine_parts(const float* a, const float* b, int dim) {
  __m512 dot0 = _mm512_setzero_ps(), na0 = _mm512_setzero_ps(), nb0 = _mm512_setzero_ps();
  __m512 dot1 = _mm512_setzero_ps(), na1 = _mm512_setzero_ps(), nb1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= dim; i += 32) {
    __m512 x0 = _mm512_loadu_ps(a + i), y0 = _mm512_loadu_ps(b + i);
    __m512 x1 = _mm512_loadu_ps(a + i + 16), y1 = _mm512_loadu_ps(b + i + 16);
    dot0 = _mm512_fmadd_ps(x0, y0, dot0);
    na0 = _mm512_fmadd_ps(x0, x0, na0);
    nb0 = _mm512_fmadd_ps(y0, y0, nb0);
    dot1 = _mm512_fmadd_ps(x1, y1, dot1);
    na1 = _mm512_fmadd_ps(x1, x1, na1);
    nb1 = _mm512_fmadd_ps(y1, y1, nb1);
  }
  for (; i < dim; i += 16) {
    const __mmask16 mask = tail_mask(dim - i < 16 ? dim - i : 16);
    __m512 x = _mm512_maskz_loadu_ps(mask, a + i), y = _mm512_maskz_loadu_ps(mask, b + i);
    dot0 = _mm512_fmadd_ps(x, y, dot0);
    na0 = _mm512_fmadd_ps(x, x, na0);
    nb0 = _mm512_fmadd_ps(y, y, nb0);
  }
  return {horizontal_sum(_mm512_add_ps(dot0, dot1)),
          horizontal_sum(_mm512_add_ps(na0, na1)),
          horizontal_sum(_mm512_add_ps(nb0, nb1))};
}

#undef TSDG_AVX512
}  // namespace avx512
#endif  // TSDG_X86

// 1 - cos from the fused parts. sqrt(|a|^2 |b|^2) in double rather than
// |a| |b|, like pgvector; a zero vector gives 0/0 = NaN. Rounding can push the
// cosine of (anti)parallel vectors just past +-1, so it is clamped.
double cosine_from_parts(generic::CosineParts p) {
  double cosine = static_cast<double>(p.dot) /
                  std::sqrt(static_cast<double>(p.norm_a) * static_cast<double>(p.norm_b));
  if (cosine > 1.0) cosine = 1.0;
  if (cosine < -1.0) cosine = -1.0;
  return 1.0 - cosine;
}

// One table per variant, so a caller holding a DistanceFn pays one indirect
// call and nothing else: the metric adapters are instantiated per variant.
template <float (*Ip)(const float*, const float*, int),
          generic::CosineParts (*Parts)(const float*, const float*, int)>
struct Adapters {
  static float negative_ip(const float* a, const float* b, int dim) { return -Ip(a, b, dim); }
  static float one_minus_ip(const float* a, const float* b, int dim) {
    return 1.0f - Ip(a, b, dim);
  }
  static double cosine(const float* a, const float* b, int dim) {
    return cosine_from_parts(Parts(a, b, dim));
  }
};

template <float (*L2)(const float*, const float*, int),
          float (*Ip)(const float*, const float*, int),
          float (*L1)(const float*, const float*, int),
          generic::CosineParts (*Parts)(const float*, const float*, int)>
constexpr DistanceKernels make_table(const char* name) {
  using A = Adapters<Ip, Parts>;
  return DistanceKernels{L2, Ip, L1, name, A::cosine, A::negative_ip, A::one_minus_ip};
}

constexpr DistanceKernels kGeneric =
    make_table<generic::l2_squared, generic::inner_product, generic::l1,
               generic::cosine_parts>("generic");
#ifdef TSDG_X86
constexpr DistanceKernels kAvx2 =
    make_table<avx2::l2_squared, avx2::inner_product, avx2::l1, avx2::cosine_parts>("avx2");
constexpr DistanceKernels kAvx512 =
    make_table<avx512::l2_squared, avx512::inner_product, avx512::l1, avx512::cosine_parts>(
        "avx512");
#endif

std::vector<const DistanceKernels*> detect_supported() {
  std::vector<const DistanceKernels*> supported;
#ifdef TSDG_X86
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the wide registers.
  if (__builtin_cpu_supports("avx512f")) supported.push_back(&kAvx512);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    supported.push_back(&kAvx2);
  }
#endif
  supported.push_back(&kGeneric);
  return supported;
}

}  // namespace

const std::vector<const DistanceKernels*>& supported_distance_kernels() {
  static const std::vector<const DistanceKernels*> supported = detect_supported();
  return supported;
}

const DistanceKernels& distance_kernels() {
  static const DistanceKernels& best = *supported_distance_kernels().front();
  return best;
}

DistanceFn metric_distance_fn(Metric metric) {
  const DistanceKernels& k = distance_kernels();
  switch (metric) {
    case Metric::L2:
      return k.l2_squared;
    case Metric::InnerProduct:
      return k.negative_inner_product;
    case Metric::Cosine:
      return k.one_minus_inner_product;
    case Metric::L1:
      return k.l1;
  }
  throw Error(Status::InvalidArgument, "unknown metric " + std::to_string(static_cast<int>(metric)));
}

float metric_distance(Metric metric, const float* a, const float* b, int dim) {
  return metric_distance_fn(metric)(a, b, dim);
}

void normalize_rows(float* rows, int64_t n, int dim) {
  const DistanceFn ip = distance_kernels().inner_product;
  for (int64_t i = 0; i < n; i++) {
    float* row = rows + i * static_cast<int64_t>(dim);
    const float norm = std::sqrt(ip(row, row, dim));
    if (norm > 0.0f) {
      const float inverse = 1.0f / norm;
      for (int j = 0; j < dim; j++) row[j] *= inverse;
    }
  }
}

void row_norms_squared(MatrixView rows, float* out) {
  const DistanceFn ip = distance_kernels().inner_product;
  for (int64_t i = 0; i < rows.rows; i++) out[i] = ip(rows.row(i), rows.row(i), rows.dim);
}

}  // namespace tsdg

// ---- C entry points ----
extern "C" {

float tsdg_l2_squared_distance(const float* a, const float* b, int dim) {
  return tsdg::distance_kernels().l2_squared(a, b, dim);
}

float tsdg_inner_product(const float* a, const float* b, int dim) {
  return tsdg::distance_kernels().inner_product(a, b, dim);
}

float tsdg_l1_distance(const float* a, const float* b, int dim) {
  return tsdg::distance_kernels().l1(a, b, dim);
}

double tsdg_cosine_distance(const float* a, const float* b, int dim) {
  return tsdg::distance_kernels().cosine(a, b, dim);
}

float tsdg_norm_squared(const float* a, int dim) {
  return tsdg::distance_kernels().inner_product(a, a, dim);
}

float tsdg_metric_distance(TsdgMetric metric, const float* a, const float* b, int dim) {
  switch (metric) {
    case TSDG_METRIC_L2:
      return tsdg::distance_kernels().l2_squared(a, b, dim);
    case TSDG_METRIC_INNER_PRODUCT:
      return tsdg::distance_kernels().negative_inner_product(a, b, dim);
    case TSDG_METRIC_COSINE:
      return tsdg::distance_kernels().one_minus_inner_product(a, b, dim);
    case TSDG_METRIC_L1:
      return tsdg::distance_kernels().l1(a, b, dim);
  }
  return std::nanf("");
}

const char* tsdg_distance_kernel_name(void) { return tsdg::distance_kernels().name; }

}  // extern "C"
