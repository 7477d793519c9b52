// Where debug_print output goes (trace/debug_print.h): one line per print, from the device that runs it.
//
// The default sink writes the line and a newline to stdout and flushes, so lines from several devices or
// threads never interleave within a line. Tests and services install their own sink (a log, a buffer).
// Thread-safety: set_debug_print_sink and write_debug_print may be called from any thread; the sink is
// called with a lock held, one line at a time, so it needs no locking of its own (and must not print).
#pragma once

#include <functional>
#include <string_view>

namespace mcx {

using DebugPrintSink = std::function<void(std::string_view line)>;

// Installs `sink` (an empty function restores the stdout sink); returns the previous sink.
DebugPrintSink set_debug_print_sink(DebugPrintSink sink);

// Hands one line (without its newline) to the sink.
void write_debug_print(std::string_view line);

}  // namespace mcx
