#include "profile.h"

#include <algorithm>
#include <memory>
#include <string>

#include "distance.h"
#include "search.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// One worker's search and buffers, reused from sample to sample.
class ProfileWalker {
 public:
  ProfileWalker(const SearchProfileInput& input, DistanceFn distance)
      : input_(input),
        distance_(distance),
        search_(input.lambda_limit, 0.0f),
        navigating_dists_(input.navigating.size()),
        fresh_(static_cast<size_t>(input.graph.degree)) {}

  // The nodes the searches of sample score at each ef, into scored, and
  // the distances the layer's walks compute, into layer_scored.
  void walk_sample(uint32_t sample, int64_t* scored, int64_t* layer_scored, const RunControl& control) {
    const float* query = row_of(sample);
    if (input_.layer == nullptr) {
      for (size_t i = 0; i < input_.navigating.size(); ++i) {
        navigating_dists_[i] = distance_(query, row_of(input_.navigating[i]), input_.data.dim);
      }
    }
    for (size_t step = 0; step < input_.efs.size(); ++step) {
      const int ef = std::max(input_.efs[step], 1);
      search_.begin(ef);
      layer_scored[step] = 0;
      if (input_.layer != nullptr) {
        layer_scored[step] = offer_layer_entries(query, ef, control);
      } else {
        search_.offer_many(input_.navigating.data(), navigating_dists_.data(),
                           static_cast<int64_t>(input_.navigating.size()));
      }
      expand(query, control);
      scored[step] = search_.distance_count();
    }
  }

 private:
  // every node offered was scored through this check, so those next() returns passed it
  const float* row_of(uint32_t id) const {
    if (id >= input_.data.rows) {
      throw Error(Status::InvalidArgument, "search profile: node " + std::to_string(id) + " of " +
                                               std::to_string(input_.data.rows));
    }
    return input_.data.row(id);
  }

  // the layer's entries for a search of ef, offered up to the first missing
  // one as a scan offers them; returns the distances the layer's walk computed
  int64_t offer_layer_entries(const float* query, int ef, const RunControl& control) {
    const int width = NavigatingLayer::width(ef);
    layer_ids_.resize(static_cast<size_t>(width));
    layer_dists_.resize(static_cast<size_t>(width));
    RunControl on_this_thread;
    on_this_thread.cancel = control.cancel;
    const int64_t computed = input_.layer->entries(MatrixView{query, 1, input_.data.dim}, ef, layer_ids_.data(),
                                                   layer_dists_.data(), on_this_thread);
    int count = 0;
    while (count < width && layer_ids_[static_cast<size_t>(count)] != kInvalidId) {
      row_of(layer_ids_[static_cast<size_t>(count++)]);
    }
    search_.offer_many(layer_ids_.data(), layer_dists_.data(), count);
    return computed;
  }

  void expand(const float* query, const RunControl& control) {
    const int degree = input_.graph.degree;
    uint32_t node;
    while ((node = search_.next()) != kInvalidId) {
      control.throw_if_cancelled();
      const uint32_t* ids = input_.graph.list(node);
      // a list ends at its first empty slot, as one read from a page does
      int count = 0;
      while (count < degree && ids[count] != kInvalidId) ++count;
      const int fresh = search_.unvisited(ids, input_.graph.list_lambdas(node), count, fresh_.data());
      for (int i = 0; i < fresh; ++i) {
        search_.offer(fresh_[i], distance_(query, row_of(fresh_[i]), input_.data.dim));
      }
    }
  }

  const SearchProfileInput& input_;
  DistanceFn distance_;
  GraphSearch search_;
  std::vector<float> navigating_dists_;
  std::vector<uint32_t> fresh_;
  std::vector<uint32_t> layer_ids_;
  std::vector<float> layer_dists_;
};

}  // namespace

SearchProfile search_profile(const SearchProfileInput& input, const RunControl& control) {
  if (input.data.rows != input.graph.nodes) {
    throw Error(Status::InvalidArgument, "search profile: row count and node count differ");
  }
  if (input.graph.degree <= 0) throw Error(Status::InvalidArgument, "search profile: degree must be positive");
  const DistanceFn distance = metric_distance_fn(input.metric);
  const size_t steps = input.efs.size();
  std::vector<int64_t> per_sample(input.samples.size() * steps, 0);
  std::vector<int64_t> layer_per_sample(per_sample.size(), 0);
  std::vector<std::unique_ptr<ProfileWalker>> walkers(static_cast<size_t>(worker_count(control)));
  parallel_for(control, static_cast<int64_t>(input.samples.size()), 1,
               [&](int64_t begin, int64_t end, int worker) {
                 auto& walker = walkers[static_cast<size_t>(worker)];
                 if (!walker) walker = std::make_unique<ProfileWalker>(input, distance);
                 for (int64_t s = begin; s < end; ++s) {
                   const size_t at = static_cast<size_t>(s) * steps;
                   walker->walk_sample(input.samples[static_cast<size_t>(s)], per_sample.data() + at,
                                       layer_per_sample.data() + at, control);
                 }
               });
  SearchProfile profile{std::vector<int64_t>(steps, 0), std::vector<int64_t>(steps, 0)};
  for (size_t s = 0; s < input.samples.size(); ++s) {
    for (size_t step = 0; step < steps; ++step) {
      profile.scored[step] += per_sample[s * steps + step];
      profile.layer_scored[step] += layer_per_sample[s * steps + step];
    }
  }
  return profile;
}

}  // namespace tsdg
