// Synthetic clustered data with a chosen intrinsic dimension: a mixture of
// Gaussians, each cluster living on its own random intrinsic_dim-dimensional
// subspace of the ambient space, plus small isotropic noise. Deterministic by
// seed. Two hard regimes: overlapping clusters of high intrinsic dimension
// (spread >= 1, intrinsic_dim 32-64) and well separated ones (spread << 1).
// With absolute_scale the mixture is instead row = center + z·B + noise, with
// centers N(0, spread²) per coordinate, B an intrinsic_dim × dim matrix of
// N(0, 1/intrinsic_dim) entries (each coordinate of z·B has std about 1),
// z ~ N(0, I) and noise N(0, noise²) per coordinate: spread 1 gives
// overlapping clusters, spread 4 well separated ones.
#pragma once

#include <cstdint>

#include "types.h"

namespace tsdg {

struct SyntheticSpec {
  int64_t rows = 0;
  int dim = 0;
  int clusters = 64;
  int intrinsic_dim = 16;
  float spread = 1.0f;  // cluster std relative to the typical spacing of the centers
  float noise = 0.05f;  // std of the isotropic noise in all ambient dims, same unit
  bool absolute_scale = false;  // spread and noise as stds in data units (above)
  uint64_t seed = 1;    // fixes the mixture (centers, bases) and the rows drawn
};

// spec.rows points drawn from the mixture fixed by spec.seed.
Matrix make_clustered(const SyntheticSpec& spec);

// count fresh points from the same mixture (same centers and bases as
// make_clustered(spec)), drawn with query_seed.
Matrix make_clustered_queries(const SyntheticSpec& spec, int64_t count, uint64_t query_seed);

}  // namespace tsdg
