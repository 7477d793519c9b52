#include "mcx/core/logging.h"

#include <memory>
#include <mutex>

#include <optional>

#include "mcx/core/config.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace mcx {
namespace {

constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e] [%l] %v";

std::optional<spdlog::level::level_enum> parse_level(std::string_view name) {
  const std::string n(name);
  if (n == "warning") return spdlog::level::warn;
  const auto lvl = spdlog::level::from_str(n);
  // from_str maps unknown names to "off"; accept "off" only when it was asked for.
  if (lvl == spdlog::level::off && n != "off") return std::nullopt;
  return lvl;
}

std::string escape_percent(std::string_view s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

spdlog::logger* create_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto* lg = new spdlog::logger("mcx", std::move(sink));
  lg->set_pattern(kPattern);
  lg->flush_on(spdlog::level::warn);
  auto level = kLogLevelFlag.get();
  if (level.ok()) {
    lg->set_level(*parse_level(*level));
  } else {
    lg->set_level(spdlog::level::info);
    lg->warn("{}; using log level info", std::string(level.status().message()));
  }
  return lg;
}

}  // namespace

spdlog::logger& logger() {
  static spdlog::logger* lg = create_logger();  // never destroyed: usable from exit paths
  return *lg;
}

void set_log_prefix(std::string_view prefix) {
  logger().set_pattern(escape_percent(prefix) + kPattern);
}

bool set_log_level(std::string_view level) {
  auto lvl = parse_level(level);
  if (!lvl) return false;
  logger().set_level(*lvl);
  return true;
}

std::string log_level() {
  const auto sv = spdlog::level::to_string_view(logger().level());
  return std::string(sv.data(), sv.size());
}

}  // namespace mcx
