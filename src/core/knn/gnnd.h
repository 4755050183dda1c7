// GNND (Wang et al., 2021, section 4): NN-Descent with p NEW and p OLD samples per list,
// reverse samples appended up to 2p, NEW-NEW and NEW-OLD cross-matching, and a
// selective update that inserts only the nearest pair found for each sample.
#pragma once

#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

// The approximate k-NN graph of data (self excluded), params.k per list.
// Deterministic for a fixed params.seed and thread count.
KnnGraph gnnd_build(MatrixView data, Metric metric, const GnndParams& params,
                    const RunControl& control);

}  // namespace tsdg
