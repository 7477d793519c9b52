// Metrics in the Prometheus text exposition format (version 0.0.4), for the coordination service's
// `/metrics` endpoint (mcx-coordinator --metrics-address; docs/profiling.md lists them).
//
// A Registry holds metric families: counters (only go up), gauges, histograms (cumulative buckets, sum and
// count), each family with fixed label names; family.with({values...}) gives the child of those label values,
// made on first use and kept. Gauges whose value is read at scrape time (tasks by state) are callbacks.
// text() renders every family, sorted by name, children sorted by label values.
//
// Errors: a malformed metric or label name, a family registered twice with other help or labels, or a child
// asked with the wrong number of label values are programming errors: std::invalid_argument.
// Thread-safety: everything is thread-safe; counters and gauges are lock-free, a histogram locks per observation.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace mcx::metrics {

class Counter {
 public:
  void add(double v = 1.0);  // v >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending, finite; +Inf is implied
  void observe(double v);
  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last for +Inf; guarded by mu_
  double sum_ = 0;                // guarded by mu_
};

// Bucket bounds for latencies in seconds: 1 ms to about 33 s, doubling.
std::vector<double> latency_buckets_seconds();

template <typename M>
class Family {
 public:
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<M>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}
  // The child with these label values (one per label name), made on first use.
  M& with(const std::vector<std::string>& label_values);
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Every child, by label values.
  std::vector<std::pair<std::vector<std::string>, const M*>> children() const;

 private:
  std::vector<std::string> label_names_;
  std::function<std::unique_ptr<M>()> make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;  // guarded by mu_
};

class Registry {
 public:
  using Samples = std::vector<std::pair<std::vector<std::string>, double>>;  // label values -> value

  Family<Counter>& counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                               std::vector<double> upper_bounds);
  // A gauge family whose samples `read` returns at each scrape (called from text(), without the registry's lock).
  void gauge_callback(const std::string& name, const std::string& help, std::vector<std::string> labels,
                      std::function<Samples()> read);

  // The exposition text of every family.
  std::string text() const;

 private:
  struct Entry {
    std::string help, type;
    std::vector<std::string> labels;
    std::unique_ptr<Family<Counter>> counters;
    std::unique_ptr<Family<Gauge>> gauges;
    std::unique_ptr<Family<Histogram>> histograms;
    std::function<Samples()> read;
  };
  Entry& entry(const std::string& name, const std::string& help, const std::string& type,
               const std::vector<std::string>& labels);

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;  // guarded by mu_ (entries are never removed: references stay valid)
};

// The exposition format's escaping of a label value (backslash, double quote, newline) and of help text
// (backslash, newline), and the rendering of a sample value (integers without an exponent, +Inf, -Inf, NaN).
std::string escape_label_value(const std::string& v);
std::string escape_help(const std::string& v);
std::string format_value(double v);

}  // namespace mcx::metrics
