#include "tools/common/trace_check.h"

#include "absl/strings/str_cat.h"

namespace mcx::tools {
namespace {

bool is_integer(const nlohmann::json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

absl::Status check_event(const nlohmann::json& e, size_t i) {
  auto bad = [&](std::string_view what) {
    const std::string shown = e.dump();
    return absl::InvalidArgumentError(absl::StrCat("trace event ", i, ": ", std::string(what), " in ", shown));
  };
  if (!e.is_object()) return bad("not an object");
  if (!e.contains("ph") || !e["ph"].is_string()) return bad("no string \"ph\"");
  const std::string ph = e["ph"];
  if (ph != "X" && ph != "i" && ph != "C" && ph != "M") return bad("a phase other than X, i, C, M");
  if (!e.contains("name") || !e["name"].is_string()) return bad("no string \"name\"");
  if (!e.contains("pid") || !is_integer(e["pid"])) return bad("no integer \"pid\"");
  if (!e.contains("tid") || !is_integer(e["tid"])) return bad("no integer \"tid\"");
  if (e.contains("cat") && !e["cat"].is_string()) return bad("a \"cat\" that is not a string");
  if (e.contains("args") && !e["args"].is_object()) return bad("\"args\" that is not an object");
  if (ph == "M") {
    const std::string name = e["name"];
    if (name != "process_name" && name != "thread_name") return bad("metadata other than process_name/thread_name");
    if (!e.contains("args") || !e["args"].contains("name") || !e["args"]["name"].is_string()) {
      return bad("metadata without a string args.name");
    }
    return absl::OkStatus();
  }
  if (!e.contains("ts") || !e["ts"].is_number() || e["ts"].get<double>() < 0) return bad("no number \"ts\" >= 0");
  if (ph == "X" && (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0)) {
    return bad("a complete event without a number \"dur\" >= 0");
  }
  if (ph == "i" && e.contains("s")) {
    const nlohmann::json& s = e["s"];
    if (!s.is_string() || (s != "g" && s != "p" && s != "t")) return bad("an instant scope other than g, p, t");
  }
  if (ph == "C") {
    if (!e.contains("args") || e["args"].empty()) return bad("a counter without args");
    for (const auto& [k, v] : e["args"].items()) {
      if (!v.is_number()) return bad("a counter value that is not a number");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> parse_trace_events(std::string_view text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("trace: not JSON");
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return absl::InvalidArgumentError("trace: not an object with a \"traceEvents\" array");
  }
  const nlohmann::json& events = doc["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    if (absl::Status s = check_event(events[i], i); !s.ok()) return s;
  }
  return doc;
}

}  // namespace mcx::tools
