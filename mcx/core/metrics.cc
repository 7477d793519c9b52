#include "mcx/core/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace mcx::metrics {
namespace {

bool valid_name(const std::string& n, bool colon_allowed) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_allowed && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return n.rfind("__", 0) != 0 || colon_allowed;  // label names starting with __ are reserved
}

std::string labels_text(const std::vector<std::string>& names, const std::vector<std::string>& values,
                        const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"", escape_label_value(values[i]), "\"");
  }
  if (!extra_name.empty()) absl::StrAppend(&out, out.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  return out.empty() ? out : "{" + out + "}";
}

}  // namespace

void Counter::add(double v) {
  if (!(v >= 0)) throw std::invalid_argument("[metrics] a counter only goes up: add(" + format_value(v) + ")");
  value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw std::invalid_argument("[metrics] histogram bounds must be finite and ascending");
    }
  }
}

void Histogram::observe(double v) {
  size_t b = 0;
  while (b < bounds_.size() && v > bounds_[b]) ++b;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[b];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> latency_buckets_seconds() {
  std::vector<double> b;
  for (double s = 0.001; s < 40; s *= 2) b.push_back(s);
  return b;
}

template <typename M>
M& Family<M>::with(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    throw std::invalid_argument(absl::StrCat("[metrics] expected ", label_names_.size(), " label values, found ",
                                             label_values.size()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<M>& child = children_[label_values];
  if (!child) child = make_();
  return *child;
}

template <typename M>
std::vector<std::pair<std::vector<std::string>, const M*>> Family<M>::children() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::vector<std::string>, const M*>> r;
  for (const auto& [values, child] : children_) r.emplace_back(values, child.get());
  return r;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Registry::Entry& Registry::entry(const std::string& name, const std::string& help, const std::string& type,
                                 const std::vector<std::string>& labels) {
  if (!valid_name(name, /*colon_allowed=*/true)) throw std::invalid_argument("[metrics] bad metric name '" + name + "'");
  for (const std::string& l : labels) {
    if (!valid_name(l, /*colon_allowed=*/false) || l == "le") {
      throw std::invalid_argument("[metrics] bad label name '" + l + "' of " + name);
    }
  }
  auto [it, inserted] = entries_.try_emplace(name);
  Entry& e = it->second;
  if (!inserted && (e.help != help || e.type != type || e.labels != labels)) {
    throw std::invalid_argument("[metrics] " + name + " registered twice with different help, type or labels");
  }
  e.help = help;
  e.type = type;
  e.labels = labels;
  return e;
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(name, help, "counter", labels);
  if (!e.counters) e.counters = std::make_unique<Family<Counter>>(labels, [] { return std::make_unique<Counter>(); });
  return *e.counters;
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(name, help, "gauge", labels);
  if (!e.gauges) e.gauges = std::make_unique<Family<Gauge>>(labels, [] { return std::make_unique<Gauge>(); });
  return *e.gauges;
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                                       std::vector<double> upper_bounds) {
  Histogram check(upper_bounds);  // validates the bounds before anything is registered
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(name, help, "histogram", labels);
  if (!e.histograms) {
    e.histograms = std::make_unique<Family<Histogram>>(
        labels, [upper_bounds] { return std::make_unique<Histogram>(upper_bounds); });
  }
  return *e.histograms;
}

void Registry::gauge_callback(const std::string& name, const std::string& help, std::vector<std::string> labels,
                              std::function<Samples()> read) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(name, help, "gauge", labels);
  e.read = std::move(read);
}

std::string Registry::text() const {
  // What each entry holds, copied under the lock (a family registered meanwhile is not half-seen); the families
  // themselves are never freed, and the callbacks run outside the lock (they may take their own locks).
  struct View {
    std::string name, help, type;
    std::vector<std::string> labels;
    const Family<Counter>* counters;
    const Family<Gauge>* gauges;
    const Family<Histogram>* histograms;
    std::function<Samples()> read;
  };
  std::vector<View> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, e] : entries_) {
      entries.push_back({name, e.help, e.type, e.labels, e.counters.get(), e.gauges.get(), e.histograms.get(), e.read});
    }
  }
  std::string out;
  for (const View& view : entries) {
    const std::string& name = view.name;
    const View* e = &view;
    absl::StrAppend(&out, "# HELP ", name, " ", escape_help(e->help), "\n# TYPE ", name, " ", e->type, "\n");
    if (e->counters) {
      for (const auto& [values, c] : e->counters->children()) {
        absl::StrAppend(&out, name, labels_text(e->labels, values), " ", format_value(c->value()), "\n");
      }
    }
    if (e->gauges) {
      for (const auto& [values, g] : e->gauges->children()) {
        absl::StrAppend(&out, name, labels_text(e->labels, values), " ", format_value(g->value()), "\n");
      }
    }
    if (e->read) {
      Samples samples = e->read();
      std::sort(samples.begin(), samples.end());
      for (const auto& [values, v] : samples) {
        if (values.size() != e->labels.size()) continue;  // a callback that broke its promise: skipped, not fatal
        absl::StrAppend(&out, name, labels_text(e->labels, values), " ", format_value(v), "\n");
      }
    }
    if (e->histograms) {
      for (const auto& [values, h] : e->histograms->children()) {
        const Histogram::Snapshot s = h->snapshot();
        for (size_t i = 0; i <= s.upper_bounds.size(); ++i) {
          const std::string le = i < s.upper_bounds.size() ? format_value(s.upper_bounds[i]) : "+Inf";
          absl::StrAppend(&out, name, "_bucket", labels_text(e->labels, values, "le", le), " ",
                          format_value(static_cast<double>(s.cumulative[i])), "\n");
        }
        absl::StrAppend(&out, name, "_sum", labels_text(e->labels, values), " ", format_value(s.sum), "\n");
        absl::StrAppend(&out, name, "_count", labels_text(e->labels, values), " ",
                        format_value(static_cast<double>(s.count)), "\n");
      }
    }
  }
  return out;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  // The shortest of 15..17 significant digits that reads back as v.
  char buf[32];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace mcx::metrics
