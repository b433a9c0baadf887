#pragma once
// One time step of a nearest-neighbour search as the benchmarks time it: update(references), then
// query_async(observations) on one stream, between CUDA events.

#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>

namespace streamkit_bench {

/// Milliseconds of one step: the build, the query and the whole.
struct step_ms {
  double build, query, total;
};

/// Runs one step of `engine` on `s` between `start`, `built` and `done` (events of `s`) and waits for it.
template <class Engine, class Points, class Result>
step_ms timed_step(Engine& engine, Points observations, Points references, Result result, streamkit::stream const& s,
                   streamkit::timed_event& start, streamkit::timed_event& built, streamkit::timed_event& done)
{
  start.record(s);
  engine.update(references, s);
  built.record(s);
  engine.query_async(observations, result, s);
  done.record(s);
  done.sync();
  return {static_cast<double>(streamkit::elapsed(start, built).count()), static_cast<double>(streamkit::elapsed(built, done).count()),
          static_cast<double>(streamkit::elapsed(start, done).count())};
}

}  // namespace streamkit_bench
