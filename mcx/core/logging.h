// The mcx logger: one spdlog logger ("mcx") writing to stderr, level from MCX_LOG_LEVEL (read when
// the logger is first used; an invalid value logs a warning naming it and falls back to "info").
// Multi-process programs call set_log_prefix("[p3] ") so interleaved output says which process wrote
// each line. Messages use fmt syntax:
//   log_info("compiled {} in {:.1f} ms", name, ms);
// Thread-safety: all functions are thread-safe (the sink is the _mt variant). Do not log during static
// initialisation.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace mcx {

// The logger; created on first use.
spdlog::logger& logger();

// Prefix written before every line ("" for none); '%' in the prefix is printed literally.
void set_log_prefix(std::string_view prefix);
// Overrides the level from MCX_LOG_LEVEL ("trace", "debug", "info", "warn", "error", "critical",
// "off"); returns false and changes nothing for an unknown name.
bool set_log_level(std::string_view level);
// The current level's name ("info", ...).
std::string log_level();

template <typename... Args>
void log_trace(fmt::format_string<Args...> f, Args&&... args) {
  logger().trace(f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  logger().debug(f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  logger().info(f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  logger().warn(f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  logger().error(f, std::forward<Args>(args)...);
}

}  // namespace mcx
