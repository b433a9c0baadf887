// Hostile-input benchmark (issue 26): every class of tests/spatial/hostile_inputs.hpp, timed through
// the front end (nearest_index) and both engines (tree_index, brute_force_index), in fast and exact
// precision, for k in {1, 16, 32}; each time reported with its ratio to the uniform class of the same
// N, M, k, engine and precision, and its answers checked on a sample of observations against a float64
// CPU k-nearest.
//
//   bench_hostile [--n N] [--m M] [--quick] [--repeat R] [--brute-n N] [--brute-repeat R] [--sample S]
//                 [--max-seconds T] [--budget-seconds B] [--seed X] [--classes a,b,...]
//                 [--engines nearest_index,tree_index,brute_force_index] [--precisions fast,exact]
//                 [--ks 1,16,32] [--out FILE.json] [--list]
//
// Inputs: float32 (lat, lon) degrees, interleaved, on the device; distances asked for (float, radians);
// on_invalid = mark (nothing waits inside a step). A step is update(references) + query_async(observations)
// on one stream, timed with CUDA events (build, query, whole step); one warm-up step, then R timed steps,
// median reported. The outputs are poisoned (0x7F bytes) before every step, so the answers checked are
// those of the last step. Defaults: N = M = 2^20, R = 5, the brute force on the first N/16 observations
// (--brute-n) with 2 timed steps (--brute-repeat): its ratios are against uniform inputs of that shape.
//
// Bounds on the device time: a case whose warm-up or a timed step exceeds --max-seconds (default 2)
// stops there (status "capped"; its median is over the steps done, the warm-up alone if that was the
// one), and larger k of the same class, engine and precision are then skipped ("skipped_after_cap");
// no case starts once --budget-seconds (default 540, 0 = none) of wall time have passed
// ("skipped_budget"). The JSON (--out) is rewritten after every case, so a run cut short keeps what it
// measured; one JSON line per case also goes to stdout as it finishes. Last comes a table (one line per
// class, engine and precision: per k the median and the ratio to uniform, the wrong rows, the front
// end's picks), the worst ratio per engine and precision, and every shape where the front end took more
// than 2x the faster engine's time ("front_end_vs_best" in the JSON; the brute force's time is scaled
// by N / brute N when it ran on fewer observations: an estimate).
//
// The check (--sample S observations, default 1000, evenly spaced over the first min(N, brute N)):
// float64 unit vectors from the float32 inputs, k nearest by chord, ties to the smallest index. A row
// is wrong when an index is out of range or repeated; when the chord of a slot's reference differs from
// the reference answer's chord in that slot by more than float64 rounding (4e-15 + 4 eps c; for
// fast-precision k = 1 answered by the brute force, which ranks in float32, by more than the documented
// fast-mode bound 4u + 2.5u (c + c'), u = 2^-24); when it breaks the tie order of identical references
// (identical float32 inputs: a row holding one holds every smaller index of its group, earlier); or
// when a reported distance is not the float64 haversine of its pair rounded to float.
//
// The front end's engine is reported as nearest_index::engine_for(n, k) after update() (public API).
// Exits 77 without a GPU (except --list, which prints the classes).
#include "hostile_inputs.hpp"
#include "timed_step.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

namespace hostile = streamkit_hostile;

struct arguments {
  std::size_t n = std::size_t{1} << 20, m = std::size_t{1} << 20, brute_n = 0, sample = 1000;
  int repeat = 5, brute_repeat = 2;
  double max_seconds = 2.0, budget_seconds = 540.0;
  std::uint64_t seed = 20261123;
  std::vector<std::string> classes, engines{"nearest_index", "tree_index", "brute_force_index"}, precisions{"fast", "exact"};
  std::vector<std::size_t> ks{1, 16, 32};
  std::string out;
  bool list = false;
};

std::vector<std::string> split(std::string const& text)
{
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    if (!part.empty()) { parts.push_back(part); }
  }
  return parts;
}

arguments parse(int argc, char** argv)
{
  arguments a;
  bool brute_n_given = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string const key = argv[i];
    if (key == "--quick") {
      quick = true;
      continue;
    }
    if (key == "--list") {
      a.list = true;
      continue;
    }
    if (i + 1 >= argc) { throw std::invalid_argument(key + ": needs a value (or unknown option)"); }
    std::string const value = argv[++i];
    if (key == "--n") { a.n = std::stoull(value); }
    else if (key == "--m") { a.m = std::stoull(value); }
    else if (key == "--brute-n") {
      a.brute_n = std::stoull(value);
      brute_n_given = true;
    }
    else if (key == "--sample") { a.sample = std::stoull(value); }
    else if (key == "--repeat") { a.repeat = std::stoi(value); }
    else if (key == "--brute-repeat") { a.brute_repeat = std::stoi(value); }
    else if (key == "--max-seconds") { a.max_seconds = std::stod(value); }
    else if (key == "--budget-seconds") { a.budget_seconds = std::stod(value); }
    else if (key == "--seed") { a.seed = std::stoull(value); }
    else if (key == "--classes") { a.classes = split(value); }
    else if (key == "--engines") { a.engines = split(value); }
    else if (key == "--precisions") { a.precisions = split(value); }
    else if (key == "--ks") {
      a.ks.clear();
      for (auto const& k : split(value)) { a.ks.push_back(std::stoull(k)); }
    }
    else if (key == "--out") { a.out = value; }
    else { throw std::invalid_argument("unknown option " + key); }
  }
  if (quick) {  // a smoke run: small shapes, fewer steps (explicit --n/--m given after --quick are overridden)
    a.n = a.m = std::size_t{1} << 16;
    a.repeat = std::min(a.repeat, 3);
    a.sample = std::min<std::size_t>(a.sample, 300);
    if (!brute_n_given) { a.brute_n = a.n; }
  }
  if (!brute_n_given && !quick) { a.brute_n = std::max<std::size_t>(a.n / 16, 1); }
  a.brute_n = std::min(a.brute_n, a.n);
  if (a.n == 0 || a.m == 0 || a.brute_n == 0) { throw std::invalid_argument("--n, --m and --brute-n must be positive"); }
  if (a.repeat < 1 || a.brute_repeat < 1) { throw std::invalid_argument("--repeat and --brute-repeat: at least 1"); }
  if (!(a.max_seconds > 0)) { throw std::invalid_argument("--max-seconds: positive"); }
  for (auto const& e : a.engines) {
    if (e != "nearest_index" && e != "tree_index" && e != "brute_force_index") {
      throw std::invalid_argument("--engines: nearest_index, tree_index, brute_force_index (got " + e + ")");
    }
  }
  for (auto const& p : a.precisions) {
    if (p != "fast" && p != "exact") { throw std::invalid_argument("--precisions: fast, exact (got " + p + ")"); }
  }
  for (std::size_t const k : a.ks) {
    if (k < 1 || k > streamkit::max_neighbors) { throw std::invalid_argument("--ks: each k in [1, 32]"); }
  }
  std::sort(a.ks.begin(), a.ks.end());
  a.ks.erase(std::unique(a.ks.begin(), a.ks.end()), a.ks.end());
  for (auto const& c : a.classes) { (void)hostile::find_class(c); }  // throws naming the known classes
  return a;
}

// ---- JSON ----------------------------------------------------------------------------------------

std::string quoted(std::string const& text)
{
  std::string out = "\"";
  for (char const c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double x)
{
  if (!std::isfinite(x)) { return "null"; }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", x);
  return buffer;
}

// ---- timing --------------------------------------------------------------------------------------

double median(std::vector<double> values)
{
  if (values.empty()) { return std::numeric_limits<double>::quiet_NaN(); }
  std::sort(values.begin(), values.end());
  std::size_t const half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : 0.5 * (values[half - 1] + values[half]);
}

struct case_result {
  std::string klass, engine, precision;
  std::size_t k = 0, n = 0, m = 0;
  std::string status = "ok", error, picked;
  bool warmup_only = false;
  double warmup_ms = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> build_ms, query_ms, total_ms;
  double ratio = std::numeric_limits<double>::quiet_NaN();
  std::size_t checked = 0, wrong = 0, index_wrong = 0, tie_order_wrong = 0, distance_wrong = 0, not_identical = 0;
  [[nodiscard]] double median_ms() const { return median(total_ms); }

  [[nodiscard]] std::string json() const
  {
    auto const list = [](std::vector<double> const& values) {
      std::string out = "[";
      for (std::size_t i = 0; i < values.size(); ++i) { out += (i ? ", " : "") + number(values[i]); }
      return out + "]";
    };
    std::string out = "{\"class\": " + quoted(klass) + ", \"engine\": " + quoted(engine) + ", \"precision\": " + quoted(precision) +
                      ", \"k\": " + std::to_string(k) + ", \"n\": " + std::to_string(n) + ", \"m\": " + std::to_string(m) +
                      ", \"status\": " + quoted(status);
    if (!error.empty()) { out += ", \"error\": " + quoted(error); }
    if (!picked.empty()) { out += ", \"picked\": " + quoted(picked); }
    out += ", \"median_ms\": " + number(median_ms()) + ", \"build_median_ms\": " + number(median(build_ms)) +
           ", \"query_median_ms\": " + number(median(query_ms)) + ", \"ratio_to_uniform\": " + number(ratio) +
           ", \"warmup_ms\": " + number(warmup_ms) + ", \"warmup_only\": " + (warmup_only ? "true" : "false") +
           ", \"runs_ms\": " + list(total_ms) + ", \"checked\": " + std::to_string(checked) + ", \"wrong\": " + std::to_string(wrong) +
           ", \"index_wrong\": " + std::to_string(index_wrong) + ", \"tie_order_wrong\": " + std::to_string(tie_order_wrong) +
           ", \"distance_wrong\": " + std::to_string(distance_wrong) + ", \"rows_not_identical_to_reference\": " +
           std::to_string(not_identical) + "}";
    return out;
  }
};

/// One step of an engine: update(references), then query_async(observations), between events.
template <class Engine>
void step(Engine& engine, streamkit::points_ref<float> observations, streamkit::points_ref<float> references,
          streamkit::neighbors_ref<std::int32_t, float> result, streamkit::stream const& s, streamkit::timed_event& start,
          streamkit::timed_event& built, streamkit::timed_event& done, double& build, double& query, double& total)
{
  // Poison the outputs (outside the timed region): a row the step leaves unwritten shows.
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(result.index, 0x7F, result.count * result.stride * sizeof(std::int32_t), s.value()));
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(result.distance, 0x7F, result.count * result.stride * sizeof(float), s.value()));
  streamkit_bench::step_ms const ms = streamkit_bench::timed_step(engine, observations, references, result, s, start, built, done);
  build = ms.build;
  query = ms.query;
  total = ms.total;
}

/// The warm-up step and up to `repeat` timed steps, stopping at the first step over `max_seconds`.
template <class Engine>
void time_case(Engine& engine, streamkit::points_ref<float> observations, streamkit::points_ref<float> references,
               streamkit::neighbors_ref<std::int32_t, float> result, streamkit::stream const& s, int repeat, double max_seconds,
               case_result& r)
{
  streamkit::timed_event start(s.ref()), built(s.ref()), done(s.ref());
  double build = 0, query = 0, total = 0;
  step(engine, observations, references, result, s, start, built, done, build, query, total);
  r.warmup_ms = total;
  if (total > max_seconds * 1e3) {  // a cliff: the warm-up is the one measurement
    r.status = "capped";
    r.warmup_only = true;
    r.build_ms.push_back(build);
    r.query_ms.push_back(query);
    r.total_ms.push_back(total);
    return;
  }
  for (int i = 0; i < repeat; ++i) {
    step(engine, observations, references, result, s, start, built, done, build, query, total);
    r.build_ms.push_back(build);
    r.query_ms.push_back(query);
    r.total_ms.push_back(total);
    if (total > max_seconds * 1e3) {
      r.status = "capped";
      return;
    }
  }
}

// ---- the CPU reference and the check -------------------------------------------------------------

struct unit_vectors {
  std::vector<double> x, y, z;
};

/// Float64 unit vectors of float32 (lat, lon) degrees, interleaved.
unit_vectors vectors_of(std::vector<float> const& pairs)
{
  std::size_t const count = pairs.size() / 2;
  unit_vectors v{std::vector<double>(count), std::vector<double>(count), std::vector<double>(count)};
  for (std::size_t j = 0; j < count; ++j) {
    double const lat = static_cast<double>(pairs[2 * j]) * hostile::pi / 180.0;
    double const lon = static_cast<double>(pairs[2 * j + 1]) * hostile::pi / 180.0;
    v.x[j] = std::cos(lat) * std::cos(lon);
    v.y[j] = std::cos(lat) * std::sin(lon);
    v.z[j] = std::sin(lat);
  }
  return v;
}

double chord(unit_vectors const& a, std::size_t i, unit_vectors const& b, std::size_t j)
{
  double const dx = a.x[i] - b.x[j], dy = a.y[i] - b.y[j], dz = a.z[i] - b.z[j];
  return std::sqrt(dx * dx + dy * dy + dz * dz);
}

/// Calls f(begin, end) on ranges of [0, count) on every hardware thread.
template <class F>
void parallel_for(std::size_t count, F const& f)
{
  std::size_t const threads = std::max<std::size_t>(1, std::min<std::size_t>(std::thread::hardware_concurrency(), count));
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) { pool.emplace_back(f, count * t / threads, count * (t + 1) / threads); }
  for (auto& thread : pool) { thread.join(); }
}

/// Distinct (latitude, longitude) pairs of interleaved float32 points, equal as values (−0 as +0), as
/// hostile::find_identical counts them: each thread keeps the points of its share of a hash of the pair and
/// sorts them (the index sort of find_identical took 6–14 s a class at 2^24 observations).
std::size_t count_distinct(std::vector<float> const& lat_lon)
{
  std::size_t const count = lat_lon.size() / 2;
  std::size_t const shares = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  auto const key = [&](std::size_t i) {
    auto const bits = [](float v) {
      v = v == 0.0f ? 0.0f : v;
      std::uint32_t b;
      std::memcpy(&b, &v, sizeof b);
      return b;
    };
    return std::uint64_t{bits(lat_lon[2 * i])} << 32 | bits(lat_lon[2 * i + 1]);
  };
  std::atomic<std::size_t> distinct{0};
  parallel_for(shares, [&](std::size_t first, std::size_t last) {
    for (std::size_t share = first; share < last; ++share) {
      std::vector<std::uint64_t> mine;
      std::size_t unequal = 0;  // points with a NaN coordinate, each unequal to every point
      for (std::size_t i = 0; i < count; ++i) {
        std::uint64_t const k = key(i);
        if (((k * 0x9e3779b97f4a7c15ull) >> 32) % shares != share) { continue; }
        if (std::isnan(lat_lon[2 * i]) || std::isnan(lat_lon[2 * i + 1])) {
          ++unequal;
        } else {
          mine.push_back(k);
        }
      }
      std::sort(mine.begin(), mine.end());
      distinct += unequal + static_cast<std::size_t>(std::unique(mine.begin(), mine.end()) - mine.begin());
    }
  });
  return distinct;
}

/// The `k` nearest references (by float64 chord, ties to the smallest index) of each sampled observation.
struct reference_answer {
  std::size_t k = 0;
  std::vector<std::int64_t> index;  // sample × k
  std::vector<double> chord;        // sample × k
};

reference_answer nearest_by_chord(unit_vectors const& obs, std::vector<std::size_t> const& rows, unit_vectors const& refs, std::size_t k)
{
  std::size_t const m = refs.x.size();
  reference_answer answer{k, std::vector<std::int64_t>(rows.size() * k, -1),
                          std::vector<double>(rows.size() * k, std::numeric_limits<double>::quiet_NaN())};
  parallel_for(rows.size(), [&](std::size_t begin, std::size_t end) {
    std::vector<double> best(k);
    std::vector<std::int64_t> which(k);
    for (std::size_t s = begin; s < end; ++s) {
      std::size_t const i = rows[s];
      double const ox = obs.x[i], oy = obs.y[i], oz = obs.z[i];
      std::size_t found = 0;
      for (std::size_t j = 0; j < m; ++j) {
        double const dx = ox - refs.x[j], dy = oy - refs.y[j], dz = oz - refs.z[j];
        double const c2 = dx * dx + dy * dy + dz * dz;
        if (found == k && !(c2 < best[k - 1])) { continue; }  // equal: the earlier index stays
        std::size_t at = found < k ? found : k - 1;
        while (at > 0 && c2 < best[at - 1]) {
          best[at] = best[at - 1];
          which[at] = which[at - 1];
          --at;
        }
        best[at] = c2;
        which[at] = static_cast<std::int64_t>(j);
        found += found < k ? 1 : 0;
      }
      for (std::size_t t = 0; t < found; ++t) {
        answer.index[s * k + t] = which[t];
        answer.chord[s * k + t] = std::sqrt(best[t]);
      }
    }
  });
  return answer;
}

/// How far two float64 evaluations of the haversine of `d` radians may differ (nearest_reference.hpp).
double haversine_rounding(double d)
{
  double const h = std::sin(d / 2) * std::sin(d / 2);
  return 16 * std::numeric_limits<double>::epsilon() * std::sqrt(h) / std::sqrt(std::max(1.0 - h, 1e-300));
}

struct problem_on_host {
  std::vector<float> obs, refs;  // interleaved float32 degrees, as uploaded
  unit_vectors obs_v, refs_v;
  hostile::identical_groups groups;  // identical float32 references
  std::vector<std::size_t> rows;     // the sampled observations
  std::size_t row_stride = 1, row_offset = 0;
  reference_answer expected;
};

/// Checks the sampled rows of a result (`index`, `distance`: sample × k) against the reference.
void check(problem_on_host const& p, std::vector<std::int32_t> const& index, std::vector<float> const& distance, std::size_t k,
           bool float32_ranked, case_result& r)
{
  double const u = 0x1.0p-24;
  double const eps = std::numeric_limits<double>::epsilon();
  std::size_t const m = p.refs_v.x.size();
  r.checked = p.rows.size();
  for (std::size_t s = 0; s < p.rows.size(); ++s) {
    std::size_t const i = p.rows[s];
    std::int32_t const* const row = index.data() + s * k;
    float const* const row_distance = distance.data() + s * k;
    bool index_bad = false, tie_bad = false, distance_bad = false, identical = true;
    for (std::size_t t = 0; t < k; ++t) {
      std::int64_t const g = row[t];
      identical = identical && g == p.expected.index[s * p.expected.k + t];
      if (g < 0 || static_cast<std::size_t>(g) >= m) {
        index_bad = true;
        continue;
      }
      for (std::size_t before = 0; before < t; ++before) { index_bad = index_bad || row[before] == row[t]; }
      double const c = chord(p.obs_v, i, p.refs_v, static_cast<std::size_t>(g));
      double const want = p.expected.chord[s * p.expected.k + t];
      if (float32_ranked) {  // k = 1: the fast-mode bound (nearest_reference.hpp, fast_chord_excess)
        index_bad = index_bad || c - want > 4 * u + 2.5 * u * (c + want) + 1e-14;
      } else {
        index_bad = index_bad || std::abs(c - want) > 4e-15 + 4 * eps * want;
      }
      double const lat1 = static_cast<double>(p.obs[2 * i]) * hostile::pi / 180.0;
      double const lon1 = static_cast<double>(p.obs[2 * i + 1]) * hostile::pi / 180.0;
      double const lat2 = static_cast<double>(p.refs[2 * static_cast<std::size_t>(g)]) * hostile::pi / 180.0;
      double const lon2 = static_cast<double>(p.refs[2 * static_cast<std::size_t>(g) + 1]) * hostile::pi / 180.0;
      double const d = streamkit::haversine(lat1, lon1, lat2, lon2);
      double const reported = static_cast<double>(row_distance[t]);
      distance_bad = distance_bad ||
                     !(std::abs(reported - d) <= 4 * std::numeric_limits<float>::epsilon() * d + haversine_rounding(d) + 1e-12);
    }
    tie_bad = hostile::first_tie_order_problem(p.groups, row, k) >= 0;
    r.index_wrong += index_bad ? 1 : 0;
    r.tie_order_wrong += tie_bad ? 1 : 0;
    r.distance_wrong += distance_bad ? 1 : 0;
    r.wrong += index_bad || tie_bad || distance_bad ? 1 : 0;
    r.not_identical += identical ? 0 : 1;
  }
}

// ---- the run -------------------------------------------------------------------------------------

struct class_summary {
  std::string name, description;
  std::size_t distinct_refs = 0, largest_group = 0, refs_in_groups = 0, distinct_obs = 0;
  double generate_s = 0, reference_s = 0;
};

/// The host side of a class: float32 inputs as uploaded, identical references, the sample (evenly
/// strided over the first `searched` observations) and its CPU reference answer of `kmax` neighbours.
problem_on_host prepare(hostile::problem const& p, std::size_t searched, std::size_t sample, std::size_t kmax, class_summary& summary)
{
  auto const seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto const t0 = std::chrono::steady_clock::now();
  std::size_t const n = p.observations.size(), m = p.references.size();
  problem_on_host host;
  host.obs.resize(2 * n);
  host.refs.resize(2 * m);
  for (std::size_t i = 0; i < n; ++i) {
    host.obs[2 * i] = static_cast<float>(p.observations.lat[i]);
    host.obs[2 * i + 1] = static_cast<float>(p.observations.lon[i]);
  }
  for (std::size_t j = 0; j < m; ++j) {
    host.refs[2 * j] = static_cast<float>(p.references.lat[j]);
    host.refs[2 * j + 1] = static_cast<float>(p.references.lon[j]);
  }
  host.groups = hostile::find_identical(hostile::as<float>(p.references.lat), hostile::as<float>(p.references.lon));
  summary.distinct_refs = host.groups.distinct;
  summary.largest_group = host.groups.largest;
  summary.refs_in_groups = host.groups.in_groups;
  summary.distinct_obs = count_distinct(host.obs);
  summary.generate_s = seconds_since(t0);
  searched = std::min(searched, n);
  sample = std::min(sample, searched);
  if (sample > 0) {
    host.row_stride = searched / sample;
    host.row_offset = host.row_stride / 2;
    for (std::size_t q = 0; q < sample; ++q) { host.rows.push_back(host.row_offset + q * host.row_stride); }
  }
  auto const t1 = std::chrono::steady_clock::now();
  host.obs_v = vectors_of(host.obs);
  host.refs_v = vectors_of(host.refs);
  host.expected = nearest_by_chord(host.obs_v, host.rows, host.refs_v, std::min(kmax, m));
  summary.reference_s = seconds_since(t1);
  return host;
}

struct run_state {
  arguments args;
  std::string gpu;
  std::vector<class_summary> classes;
  std::vector<case_result> cases;
  double elapsed_s = 0;
};

std::string engine_name(streamkit::search_engine e) { return e == streamkit::search_engine::tree ? "tree" : "brute_force"; }

/// The front end against the faster engine of the same class, precision and k (the brute force's
/// time scaled from its N to the front end's N when --brute-n is smaller: an estimate).
struct front_end_comparison {
  std::string klass, precision, picked;
  std::size_t k = 0;
  double front_ms = 0, tree_ms = 0, brute_scaled_ms = 0, over_best = 0;
};

std::vector<front_end_comparison> front_end_comparisons(run_state const& state)
{
  std::map<std::tuple<std::string, std::string, std::size_t>, std::map<std::string, case_result const*>> by_shape;
  for (auto const& r : state.cases) {
    if (!r.total_ms.empty()) { by_shape[{r.klass, r.precision, r.k}][r.engine] = &r; }
  }
  std::vector<front_end_comparison> out;
  for (auto const& [key, engines] : by_shape) {
    auto const front = engines.find("nearest_index");
    if (front == engines.end()) { continue; }
    front_end_comparison f;
    std::tie(f.klass, f.precision, f.k) = key;
    f.picked = front->second->picked;
    f.front_ms = front->second->median_ms();
    f.tree_ms = f.brute_scaled_ms = std::numeric_limits<double>::quiet_NaN();
    double best = std::numeric_limits<double>::infinity();
    if (auto const t = engines.find("tree_index"); t != engines.end()) {
      f.tree_ms = t->second->median_ms();
      best = std::min(best, f.tree_ms);
    }
    if (auto const b = engines.find("brute_force_index"); b != engines.end()) {
      f.brute_scaled_ms = b->second->median_ms() * static_cast<double>(front->second->n) / static_cast<double>(b->second->n);
      best = std::min(best, f.brute_scaled_ms);
    }
    f.over_best = f.front_ms / best;
    out.push_back(f);
  }
  return out;
}

std::string json_of(run_state const& state)
{
  arguments const& a = state.args;
  std::string out = "{\n\"benchmark\": \"bench_hostile\",\n\"gpu\": " + quoted(state.gpu) + ",\n\"n\": " + std::to_string(a.n) +
                    ",\n\"m\": " + std::to_string(a.m) + ",\n\"brute_n\": " + std::to_string(a.brute_n) +
                    ",\n\"repeat\": " + std::to_string(a.repeat) + ",\n\"brute_repeat\": " + std::to_string(a.brute_repeat) +
                    ",\n\"max_seconds\": " + number(a.max_seconds) + ",\n\"budget_seconds\": " + number(a.budget_seconds) +
                    ",\n\"sample\": " + std::to_string(a.sample) + ",\n\"seed\": " + std::to_string(a.seed) +
                    ",\n\"inputs\": \"float32 (lat, lon) degrees interleaved on the device; distances as float radians; on_invalid = "
                    "mark; step = update(references) + query_async(observations), CUDA events, median of the timed steps after one "
                    "warm-up\",\n\"elapsed_s\": " +
                    number(state.elapsed_s) + ",\n\"classes\": [\n";
  for (std::size_t c = 0; c < state.classes.size(); ++c) {
    auto const& s = state.classes[c];
    out += "  {\"name\": " + quoted(s.name) + ", \"description\": " + quoted(s.description) +
           ", \"distinct_references_float32\": " + std::to_string(s.distinct_refs) +
           ", \"largest_identical_group_float32\": " + std::to_string(s.largest_group) +
           ", \"references_in_identical_groups_float32\": " + std::to_string(s.refs_in_groups) +
           ", \"distinct_observations_float32\": " + std::to_string(s.distinct_obs) + ", \"generate_s\": " + number(s.generate_s) +
           ", \"cpu_reference_s\": " + number(s.reference_s) + "}" + (c + 1 < state.classes.size() ? ",\n" : "\n");
  }
  out += "],\n\"cases\": [\n";
  for (std::size_t c = 0; c < state.cases.size(); ++c) {
    out += "  " + state.cases[c].json() + (c + 1 < state.cases.size() ? ",\n" : "\n");
  }
  out += "],\n\"front_end_vs_best\": [\n";
  bool first = true;
  for (auto const& f : front_end_comparisons(state)) {
    out += std::string(first ? "" : ",\n") + "  {\"class\": " + quoted(f.klass) + ", \"precision\": " + quoted(f.precision) +
           ", \"k\": " + std::to_string(f.k) + ", \"picked\": " + quoted(f.picked) + ", \"front_end_ms\": " + number(f.front_ms) +
           ", \"tree_ms\": " + number(f.tree_ms) + ", \"brute_force_ms_scaled_to_n\": " + number(f.brute_scaled_ms) +
           ", \"brute_force_scaled\": " + (a.brute_n < a.n ? "true" : "false") + ", \"front_end_over_best\": " + number(f.over_best) + "}";
    first = false;
  }
  out += "\n]\n}\n";
  return out;
}

void write_json(run_state const& state)
{
  if (state.args.out.empty()) { return; }
  std::string const text = json_of(state);
  std::string const temporary = state.args.out + ".partial";
  {
    std::ofstream file(temporary);
    file << text;
    if (!file) { throw std::runtime_error(temporary + ": cannot write"); }
  }
  std::rename(temporary.c_str(), state.args.out.c_str());
}

void print_table(run_state const& state)
{
  // One line per class, engine and precision; per k: median ms and ratio to uniform ("*": capped, a
  // lower bound; "skip": not run), then the wrong rows of all its k over the rows checked, and the
  // front end's picks (t = tree, b = brute force) per k.
  std::vector<std::size_t> const& ks = state.args.ks;
  std::printf("\n%-20s %-17s %-5s %8s", "class", "engine", "prec", "n");
  for (std::size_t const k : ks) { std::printf(" %21s", ("k=" + std::to_string(k) + ": ms, x uniform").c_str()); }
  std::printf(" %11s %s\n", "wrong", "picked");
  std::vector<std::tuple<std::string, std::string, std::string>> order;
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<case_result const*>> rows;
  for (auto const& r : state.cases) {
    auto const key = std::make_tuple(r.klass, r.engine, r.precision);
    if (rows.find(key) == rows.end()) { order.push_back(key); }
    rows[key].push_back(&r);
  }
  for (auto const& key : order) {
    auto const& cases = rows[key];
    std::printf("%-20s %-17s %-5s %8zu", std::get<0>(key).c_str(), std::get<1>(key).c_str(), std::get<2>(key).c_str(), cases.front()->n);
    std::size_t wrong = 0, checked = 0;
    std::string picked;
    for (std::size_t const k : ks) {
      auto const found = std::find_if(cases.begin(), cases.end(), [&](case_result const* r) { return r->k == k; });
      char cell[64] = "";
      if (found == cases.end() || (*found)->total_ms.empty()) {
        std::snprintf(cell, sizeof cell, "%s", found == cases.end() ? "" : ((*found)->status == "error" ? "error" : "skip"));
      } else {
        case_result const& r = **found;
        std::snprintf(cell, sizeof cell, "%s%.3f %7.1fx", r.status == "capped" ? "*" : "", r.median_ms(), r.ratio);
        wrong += r.wrong;
        checked += r.checked;
        if (!r.picked.empty()) { picked += std::string(picked.empty() ? "" : "/") + (r.picked == "tree" ? "t" : "b"); }
      }
      std::printf(" %21s", cell);
    }
    std::printf(" %11s %s\n", (std::to_string(wrong) + "/" + std::to_string(checked)).c_str(), picked.c_str());
  }
  // The worst ratio per engine and precision, and every wrong answer.
  std::map<std::pair<std::string, std::string>, case_result const*> worst;
  std::size_t wrong_cases = 0;
  for (auto const& r : state.cases) {
    wrong_cases += r.wrong > 0 ? 1 : 0;
    if (!std::isfinite(r.ratio)) { continue; }
    auto& w = worst[{r.engine, r.precision}];
    if (w == nullptr || r.ratio > w->ratio) { w = &r; }
  }
  for (auto const& [key, r] : worst) {
    std::printf("worst ratio to uniform, %s %s: %.1fx (%s, k = %zu, %.3f ms%s)\n", key.first.c_str(), key.second.c_str(), r->ratio,
                r->klass.c_str(), r->k, r->median_ms(), r->status == "capped" ? ", capped: a lower bound" : "");
  }
  std::printf("cases with wrong rows: %zu of %zu\n", wrong_cases, state.cases.size());
  for (auto const& f : front_end_comparisons(state)) {
    if (f.over_best > 2.0) {
      std::printf("front end %.1fx slower than the faster engine: %s %s k = %zu (picked %s, %.3f ms; tree %.3f ms, brute force %.3f ms%s)\n",
                  f.over_best, f.klass.c_str(), f.precision.c_str(), f.k, f.picked.c_str(), f.front_ms, f.tree_ms, f.brute_scaled_ms,
                  state.args.brute_n < state.args.n ? " scaled from its N" : "");
    }
  }
}

template <class Engine>
void run_engine(Engine& engine, problem_on_host const& host, streamkit::points_ref<float> observations,
                streamkit::points_ref<float> references, streamkit::device_buffer<std::int32_t>& index,
                streamkit::device_buffer<float>& distance, streamkit::stream const& s, int repeat, double max_seconds, case_result& r)
{
  auto const result = streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), observations.count, r.k);
  time_case(engine, observations, references, result, s, repeat, max_seconds, r);
  if constexpr (std::is_same_v<Engine, streamkit::nearest_index<float>>) {  // the front end's pick, after the last update()
    r.picked = engine_name(engine.engine_for(observations.count, r.k));
  }
  // The sampled rows (evenly strided) of the last step.
  std::size_t const k = r.k;
  std::vector<std::int32_t> got_index(host.rows.size() * k);
  std::vector<float> got_distance(host.rows.size() * k);
  if (!host.rows.empty()) {
    STREAMKIT_CUDA_TRY(cudaMemcpy2DAsync(got_index.data(), k * sizeof(std::int32_t), index.data() + host.row_offset * k,
                                         host.row_stride * k * sizeof(std::int32_t), k * sizeof(std::int32_t), host.rows.size(),
                                         cudaMemcpyDeviceToHost, s.value()));
    STREAMKIT_CUDA_TRY(cudaMemcpy2DAsync(got_distance.data(), k * sizeof(float), distance.data() + host.row_offset * k,
                                         host.row_stride * k * sizeof(float), k * sizeof(float), host.rows.size(), cudaMemcpyDeviceToHost,
                                         s.value()));
    s.sync();
  }
  bool const float32_ranked = k == 1 && r.precision == "fast" && (r.engine == "brute_force_index" || r.picked == "brute_force");
  check(host, got_index, got_distance, k, float32_ranked, r);
}

int run(arguments const& a)
{
  auto const began = std::chrono::steady_clock::now();
  auto const seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  run_state state;
  state.args = a;
  state.gpu = streamkit::device(0).name();
  std::vector<hostile::input_class> classes;
  classes.push_back(hostile::find_class("uniform"));  // the baseline, always first
  for (auto const& c : hostile::input_classes()) {
    if (std::string(c.name) == "uniform") { continue; }
    if (a.classes.empty() || std::find(a.classes.begin(), a.classes.end(), c.name) != a.classes.end()) { classes.push_back(c); }
  }
  std::size_t const kmax = a.ks.back();
  streamkit::stream const s(0);
  streamkit::device_buffer<std::int32_t> index(a.n * kmax, s);
  streamkit::device_buffer<float> distance(a.n * kmax, s);
  std::map<std::tuple<std::string, std::string, std::size_t>, double> uniform_ms;  // engine, precision, k
  std::fprintf(stderr, "bench_hostile: %s, N = %zu, M = %zu, brute force N = %zu, %zu classes\n", state.gpu.c_str(), a.n, a.m, a.brute_n,
               classes.size());

  for (auto const& c : classes) {
    bool const out_of_budget = a.budget_seconds > 0 && seconds_since(began) > a.budget_seconds;
    class_summary summary{c.name, c.description};
    problem_on_host host;
    if (!out_of_budget) { host = prepare(hostile::generate(c, a.n, a.m, a.seed), std::min(a.n, a.brute_n), a.sample, kmax, summary); }
    state.classes.push_back(summary);
    streamkit::device_buffer<float> d_obs, d_refs;
    if (!out_of_budget) {
      d_obs = streamkit::device_buffer<float>(2 * a.n, s);
      d_refs = streamkit::device_buffer<float>(2 * a.m, s);
      d_obs.copy_from_host_async(cuda::std::span<float const>(host.obs.data(), host.obs.size()), s);
      d_refs.copy_from_host_async(cuda::std::span<float const>(host.refs.data(), host.refs.size()), s);
      s.sync();
    }
    for (std::string const& engine : a.engines) {
      bool const brute = engine == "brute_force_index";
      std::size_t const n_used = brute ? a.brute_n : a.n;
      for (std::string const& precision : a.precisions) {
        bool capped_smaller_k = false;
        for (std::size_t const k : a.ks) {
          case_result r;
          r.klass = c.name;
          r.engine = engine;
          r.precision = precision;
          r.k = k;
          r.n = n_used;
          r.m = a.m;
          if (a.budget_seconds > 0 && seconds_since(began) > a.budget_seconds) {
            r.status = "skipped_budget";
          } else if (capped_smaller_k) {
            r.status = "skipped_after_cap";
          } else if (k > a.m) {
            r.status = "skipped_k_above_m";
          } else {
            auto const observations = streamkit::points_ref<float>::interleaved(d_obs.data(), n_used, streamkit::angle_unit::degrees);
            auto const references = streamkit::points_ref<float>::interleaved(d_refs.data(), a.m, streamkit::angle_unit::degrees);
            streamkit::nearest_options options;
            options.precision = precision == "exact" ? streamkit::nn_precision::exact : streamkit::nn_precision::fast;
            options.on_invalid = streamkit::invalid_points::mark;
            int const repeat = brute ? a.brute_repeat : a.repeat;
            try {
              if (engine == "nearest_index") {
                streamkit::nearest_index<float> e(references, options, s);
                run_engine(e, host, observations, references, index, distance, s, repeat, a.max_seconds, r);
              } else if (engine == "tree_index") {
                streamkit::tree_index<float> e(references, options, s);
                run_engine(e, host, observations, references, index, distance, s, repeat, a.max_seconds, r);
              } else {
                streamkit::brute_force_index<float> e(references, options, s);
                run_engine(e, host, observations, references, index, distance, s, repeat, a.max_seconds, r);
              }
            } catch (std::exception const& e) {
              r.status = "error";
              r.error = e.what();
            }
            capped_smaller_k = r.status == "capped";
          }
          if (std::string(c.name) == "uniform" && !r.total_ms.empty()) { uniform_ms[{engine, precision, k}] = r.median_ms(); }
          if (auto const u = uniform_ms.find({engine, precision, k}); u != uniform_ms.end() && !r.total_ms.empty()) {
            r.ratio = r.median_ms() / u->second;
          }
          std::printf("%s\n", r.json().c_str());
          std::fflush(stdout);
          state.cases.push_back(r);
          state.elapsed_s = seconds_since(began);
          write_json(state);
          if (r.status == "error" && cudaPeekAtLastError() != cudaSuccess) {
            throw std::runtime_error("a CUDA error left the device unusable: " + r.error);
          }
        }
      }
    }
  }
  state.elapsed_s = seconds_since(began);
  write_json(state);
  print_table(state);
  if (!a.out.empty()) { std::printf("full results: %s\n", a.out.c_str()); }
  return 0;
}

void list_classes()
{
  std::printf("[\n");
  auto const& classes = hostile::input_classes();
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::printf("  {\"name\": %s, \"description\": %s}%s\n", quoted(classes[c].name).c_str(), quoted(classes[c].description).c_str(),
                c + 1 < classes.size() ? "," : "");
  }
  std::printf("]\n");
}

}  // namespace

int main(int argc, char** argv)
{
  try {
    arguments const a = parse(argc, argv);
    if (a.list) {
      list_classes();
      return 0;
    }
    if (streamkit::device_count() == 0) {
      std::fprintf(stderr, "bench_hostile: no CUDA device visible (streamkit::device_count() == 0)\n");
      return 77;
    }
    return run(a);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "bench_hostile: %s\n", e.what());
    return 1;
  }
}
