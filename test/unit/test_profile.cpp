// The search profile of a graph in memory (tsdg_profile_job_*) against the
// walk of the index pages' scans, driven here through tsdg_search_* as
// tsdgscanwalk.c drives it: each list read up to its first empty slot,
// its fresh neighbors scored by tsdg_metric_distance and offered in order,
// the navigating set scored once a sample and offered first, or, for a
// graph with a navigating layer, the layer's walk at the search's ef
// (tsdg_layer_search_entries, as tsdgnavcache.c walks it) and its entries
// offered first. The counts must be equal, sample by sample and ef by ef.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distance.h"
#include "synthetic.h"
#include "tsdg_capi.h"
#include "tsdg_test_graphs.h"

namespace tsdg {
namespace {

using testing::small_clustered_spec;

constexpr int kFirstEf = 16;
constexpr int kSteps = 7;

struct Graph {
  std::vector<float> rows;
  int64_t n = 0;
  int dim = 0;
  TsdgMetric metric = TSDG_METRIC_L2;
  int degree = 0;
  std::vector<uint32_t> neighbors;
  std::vector<uint8_t> lambdas;
  std::vector<uint32_t> navigating;
  std::vector<uint32_t> samples;
  int64_t layer_nodes = 0;
  std::vector<uint32_t> layer_ids;
  std::vector<uint8_t> layer_lambdas;
};

struct Profile {
  std::vector<int64_t> scored;
  std::vector<int64_t> layer_scored;
};

Graph built_graph(int64_t rows, int dim, TsdgMetric metric, uint64_t seed) {
  Graph g;
  Matrix data = make_clustered(small_clustered_spec(rows, dim, 12, seed));
  if (metric == TSDG_METRIC_COSINE) normalize_rows(data.values.data(), data.rows, data.dim);
  g.rows = data.values;
  g.n = rows;
  g.dim = dim;
  g.metric = metric;
  TsdgBuildParams params;
  tsdg_build_params_default(&params);
  params.degree = 16;
  params.build_k = 16;
  params.threads = 2;
  g.degree = params.degree;
  g.neighbors.resize(static_cast<size_t>(rows) * params.degree);
  g.lambdas.resize(g.neighbors.size());
  TsdgError error;
  EXPECT_EQ(tsdg_build_graph(nullptr, g.rows.data(), rows, dim, metric, &params, g.neighbors.data(),
                             g.lambdas.data(), nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  std::vector<uint32_t> entries(32);
  EXPECT_EQ(tsdg_select_entry_points(g.rows.data(), rows, dim, metric, g.neighbors.data(), g.degree, 32,
                                     entries.data(), &error),
            TSDG_OK)
      << error.message;
  int entry_count = 0;
  while (entry_count < 32 && entries[entry_count] != TSDG_INVALID_ID) ++entry_count;
  g.navigating.resize(entry_count + TSDG_MAX_STRIDED_ENTRIES);
  g.navigating.resize(tsdg_navigating_set(entries.data(), entry_count, rows, g.navigating.data()));
  const int samples = static_cast<int>(std::min<int64_t>(16, rows));
  for (int s = 0; s < samples; ++s) g.samples.push_back(static_cast<uint32_t>(rows * (2 * s + 1) / (2 * samples)));
  g.layer_nodes = tsdg_layer_node_count(rows);
  if (g.layer_nodes > 0) {
    g.layer_ids.resize(static_cast<size_t>(g.layer_nodes) * g.degree);
    g.layer_lambdas.resize(g.layer_ids.size());
    EXPECT_EQ(tsdg_build_layer(nullptr, g.rows.data(), rows, dim, metric, &params, g.layer_ids.data(),
                               g.layer_lambdas.data(), nullptr, nullptr, &error),
              TSDG_OK)
        << error.message;
  }
  return g;
}

// the layer's walk as a scan makes it: its own search over the layer nodes' rows
TsdgLayerSearch* layer_search_of(const Graph& g) {
  if (g.layer_nodes == 0) return nullptr;
  std::vector<float> layer_rows;
  for (int64_t i = 0; i < g.layer_nodes; ++i) {
    const float* row = &g.rows[static_cast<size_t>(i * TSDG_LAYER_STRIDE) * g.dim];
    layer_rows.insert(layer_rows.end(), row, row + g.dim);
  }
  TsdgError error;
  TsdgLayerSearch* layer = tsdg_layer_search_create(layer_rows.data(), g.layer_nodes, g.dim, g.metric,
                                                    g.layer_ids.data(), g.layer_lambdas.data(), g.degree, &error);
  EXPECT_NE(layer, nullptr) << error.message;
  return layer;
}

// The page walk's counts: one search object for every search, as the pages' profile keeps.
Profile walked_as_the_pages(const Graph& g, int lambda_limit) {
  TsdgError error;
  TsdgSearch* search = tsdg_search_create(lambda_limit, 0.0f, &error);
  EXPECT_NE(search, nullptr) << error.message;
  TsdgLayerSearch* layer = layer_search_of(g);
  Profile walked{std::vector<int64_t>(kSteps, 0), std::vector<int64_t>(kSteps, 0)};
  std::vector<uint32_t> entry_ids(static_cast<size_t>(tsdg_layer_entry_count(kFirstEf << (kSteps - 1))));
  std::vector<float> entry_dists(entry_ids.size());
  std::vector<float> navigating_dists(g.navigating.size());
  std::vector<uint32_t> list(g.degree);
  std::vector<uint8_t> lambdas(g.degree);
  std::vector<uint32_t> fresh(g.degree);
  for (const uint32_t sample : g.samples) {
    const float* query = &g.rows[static_cast<size_t>(sample) * g.dim];
    for (size_t i = 0; i < g.navigating.size(); ++i) {
      navigating_dists[i] =
          tsdg_metric_distance(g.metric, query, &g.rows[static_cast<size_t>(g.navigating[i]) * g.dim], g.dim);
    }
    for (int step = 0; step < kSteps; ++step) {
      const int ef = kFirstEf << step;
      tsdg_search_begin(search, ef);
      if (layer != nullptr) {
        const int width = tsdg_layer_entry_count(ef);
        int64_t layer_scored = 0;
        EXPECT_EQ(tsdg_layer_search_entries(layer, query, ef, entry_ids.data(), entry_dists.data(),
                                            &layer_scored, &error),
                  TSDG_OK)
            << error.message;
        int count = 0;
        while (count < width && entry_ids[count] != TSDG_INVALID_ID) ++count;
        tsdg_search_offer_many(search, entry_ids.data(), entry_dists.data(), count);
        walked.layer_scored[step] += layer_scored;
      } else {
        tsdg_search_offer_many(search, g.navigating.data(), navigating_dists.data(),
                               static_cast<int64_t>(g.navigating.size()));
      }
      uint32_t node;
      while ((node = tsdg_search_next(search)) != TSDG_INVALID_ID) {
        const size_t at = static_cast<size_t>(node) * g.degree;
        int count = 0;
        while (count < g.degree && g.neighbors[at + count] != TSDG_INVALID_ID) {
          list[count] = g.neighbors[at + count];
          lambdas[count] = g.lambdas[at + count];
          ++count;
        }
        const int found = tsdg_search_unvisited(search, list.data(), lambdas.data(), count, fresh.data());
        for (int i = 0; i < found; ++i) {
          tsdg_search_offer(search, fresh[i],
                            tsdg_metric_distance(g.metric, query,
                                                 &g.rows[static_cast<size_t>(fresh[i]) * g.dim], g.dim));
        }
      }
      walked.scored[step] += tsdg_search_distance_count(search);
    }
  }
  tsdg_search_free(search);
  tsdg_layer_search_free(layer);
  return walked;
}

TsdgProfileJob* start(const Graph& g, int lambda_limit, TsdgError* error) {
  return tsdg_profile_job_start(g.rows.data(), g.n, g.dim, g.metric, g.neighbors.data(), g.lambdas.data(),
                                g.degree, lambda_limit, g.navigating.data(),
                                static_cast<int>(g.navigating.size()),
                                g.layer_nodes > 0 ? g.layer_ids.data() : nullptr,
                                g.layer_nodes > 0 ? g.layer_lambdas.data() : nullptr, g.layer_nodes,
                                g.samples.data(), static_cast<int>(g.samples.size()), kFirstEf, kSteps, error);
}

Profile profiled(const Graph& g, int lambda_limit) {
  TsdgError error;
  TsdgProfileJob* job = start(g, lambda_limit, &error);
  EXPECT_NE(job, nullptr) << error.message;
  Profile profile{std::vector<int64_t>(kSteps, -1), std::vector<int64_t>(kSteps, -1)};
  double seconds = -1.0;
  EXPECT_EQ(tsdg_profile_job_finish(job, profile.scored.data(), profile.layer_scored.data(), &seconds, &error),
            TSDG_OK)
      << error.message;
  EXPECT_GE(seconds, 0.0);
  return profile;
}

void expect_the_pages_counts(const Graph& g, int lambda_limit) {
  const Profile walked = walked_as_the_pages(g, lambda_limit);
  const Profile profile = profiled(g, lambda_limit);
  EXPECT_EQ(profile.scored, walked.scored);
  EXPECT_EQ(profile.layer_scored, walked.layer_scored);
  // wider searches score more: the counts are the walks', not zeros
  EXPECT_GT(walked.scored[kSteps - 1], walked.scored[0]);
  if (g.layer_nodes > 0) {
    EXPECT_GT(walked.layer_scored[kSteps - 1], walked.layer_scored[0]);
  } else {
    EXPECT_EQ(walked.layer_scored, std::vector<int64_t>(kSteps, 0));
  }
}

TEST(SearchProfile, CountsOfThePagesWalk) {
  for (const TsdgMetric metric : {TSDG_METRIC_L2, TSDG_METRIC_INNER_PRODUCT, TSDG_METRIC_COSINE}) {
    SCOPED_TRACE(std::to_string(static_cast<int>(metric)));
    const Graph g = built_graph(5000, 24, metric, 17);
    expect_the_pages_counts(g, TSDG_LAMBDA_LIMIT_ALL);
    // the λ filter of tsdg_search_unvisited applies as it does on the pages
    expect_the_pages_counts(g, 0);
  }
}

// A graph with a navigating layer is searched from the layer's walk.
TEST(SearchProfile, CountsOfTheLayersWalk) {
  const Graph g = built_graph(TSDG_LAYER_MIN_NODES, 8, TSDG_METRIC_L2, 31);
  ASSERT_GT(g.layer_nodes, 0);
  expect_the_pages_counts(g, TSDG_LAMBDA_LIMIT_ALL);
}

// A list with an empty slot before other ids: a page's list ends there.
TEST(SearchProfile, ListsEndAtTheirFirstEmptySlot) {
  Graph g = built_graph(3000, 16, TSDG_METRIC_L2, 5);
  for (int64_t u = 0; u < g.n; u += 3) g.neighbors[static_cast<size_t>(u) * g.degree + 1] = TSDG_INVALID_ID;
  expect_the_pages_counts(g, TSDG_LAMBDA_LIMIT_ALL);
}

TEST(SearchProfile, TinyGraphs) {
  for (const int64_t rows : {1, 2, 17}) {
    SCOPED_TRACE(rows);
    Graph g;
    g.n = rows;
    g.dim = 3;
    g.degree = 4;
    for (int64_t i = 0; i < rows * g.dim; ++i) g.rows.push_back(static_cast<float>(i % 7));
    g.neighbors.assign(static_cast<size_t>(rows) * g.degree, TSDG_INVALID_ID);
    g.lambdas.assign(g.neighbors.size(), 0);
    for (int64_t u = 0; u + 1 < rows; ++u) g.neighbors[static_cast<size_t>(u) * g.degree] = static_cast<uint32_t>(u + 1);
    g.navigating = {0};
    for (int64_t s = 0; s < rows && s < 16; ++s) g.samples.push_back(static_cast<uint32_t>(s));
    EXPECT_EQ(profiled(g, TSDG_LAMBDA_LIMIT_ALL).scored, walked_as_the_pages(g, TSDG_LAMBDA_LIMIT_ALL).scored);
  }
}

TEST(SearchProfile, NodePastTheGraphFailsTheJob) {
  Graph g = built_graph(2000, 8, TSDG_METRIC_L2, 9);
  g.neighbors[static_cast<size_t>(g.navigating[0]) * g.degree] = static_cast<uint32_t>(g.n);
  TsdgError error;
  TsdgProfileJob* job = start(g, TSDG_LAMBDA_LIMIT_ALL, &error);
  ASSERT_NE(job, nullptr) << error.message;
  std::vector<int64_t> scored(kSteps);
  std::vector<int64_t> layer_scored(kSteps);
  double seconds = 0.0;
  EXPECT_EQ(tsdg_profile_job_finish(job, scored.data(), layer_scored.data(), &seconds, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error.message).find("node 2000 of 2000"), std::string::npos) << error.message;
}

TEST(SearchProfile, CancelStopsAndFreesTheJob) {
  const Graph g = built_graph(5000, 24, TSDG_METRIC_L2, 23);
  TsdgError error;
  TsdgProfileJob* job = start(g, TSDG_LAMBDA_LIMIT_ALL, &error);
  ASSERT_NE(job, nullptr) << error.message;
  tsdg_profile_job_cancel(job);
  tsdg_profile_job_cancel(nullptr);
  EXPECT_EQ(tsdg_profile_job_start(g.rows.data(), g.n, g.dim, g.metric, g.neighbors.data(), g.lambdas.data(),
                                   g.degree, 255, nullptr, 3, nullptr, nullptr, 0, g.samples.data(), 1, kFirstEf,
                                   kSteps, &error),
            nullptr);
  EXPECT_NE(std::string(error.message).find("navigating"), std::string::npos) << error.message;
}

}  // namespace
}  // namespace tsdg
