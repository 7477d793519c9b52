// mcx-cache: inspect and maintain a persistent compilation cache directory (docs/compilation_cache.md).
//
//   mcx-cache ls DIR                     entries, most recently used first: key, size, last use, compile time
//   mcx-cache stats DIR                  entry count, bytes, bad entries, temp files
//   mcx-cache verify DIR                 checks every entry fully (checksums, decompression); exit 1 if any is bad
//   mcx-cache prune DIR --max-bytes N    evicts least recently used entries down to N bytes, removes stale temps
//   mcx-cache clear DIR                  removes every entry and temp file
//   mcx-cache inspect DIR KEY            one entry's header and key components (KEY: hex, or a unique prefix)
// --json prints one JSON document instead of text. Exit codes: 0 ok, 1 a failure (or bad entries for verify),
// 2 usage error. The tool opens the directory with MCX_COMPILATION_CACHE_ALLOW_SHARED_WRITERS semantics on
// (it only inspects and removes).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "mcx/cache/compilation_cache.h"
#include "mcx/core/error.h"

namespace {

using json = nlohmann::json;
using mcx::cache::EntryInfo;

std::unique_ptr<mcx::cache::CompilationCache> open_dir(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw mcx::NotFound("[mcx-cache] '" + dir + "' is not a directory");
  mcx::cache::CacheOptions o;
  o.directory = dir;
  o.allow_shared_writers = true;
  return mcx::value_or_throw(mcx::cache::CompilationCache::open(o));
}

std::string time_text(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }

json entry_json(const EntryInfo& e) {
  json j = {{"key", e.key_hex}, {"bytes", e.file_bytes}, {"last_used", time_text(e.last_used)},
            {"ok", e.status.ok()}};
  if (e.header) j["kind"] = std::string(mcx::cache::kind_name(e.header->components));
  if (!e.status.ok()) j["error"] = std::string(e.status.message());
  if (e.header) {
    j["compile_time_ms"] = absl::ToDoubleMilliseconds(e.header->compile_time);
    j["payload_bytes"] = e.header->payload_size;
    j["created"] = time_text(absl::FromUnixMillis(e.header->created_unix_ms));
    json comps = json::object();
    for (const auto& c : e.header->components) comps[c.name] = mcx::to_hex(c.digest);
    j["components"] = comps;
  }
  return j;
}

int ls(const std::string& dir, bool as_json) {
  auto entries = mcx::value_or_throw(open_dir(dir)->list());
  if (as_json) {
    json arr = json::array();
    for (const EntryInfo& e : entries) arr.push_back(entry_json(e));
    std::cout << arr.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-16s %-15s %12s %-20s %12s  %s\n", "key", "kind", "bytes", "last used", "compile ms",
                               "status");
  for (const EntryInfo& e : entries) {
    std::cout << absl::StrFormat("%-16s %-15s %12d %-20s %12.1f  %s\n", e.key_hex.substr(0, 16),
                                 e.header ? std::string(mcx::cache::kind_name(e.header->components)) : "?",
                                 e.file_bytes, time_text(e.last_used),
                                 e.header ? absl::ToDoubleMilliseconds(e.header->compile_time) : 0.0,
                                 e.status.ok() ? "ok" : std::string(e.status.message()));
  }
  return 0;
}

int stats(const std::string& dir, bool as_json) {
  auto entries = mcx::value_or_throw(open_dir(dir)->list());
  int64_t bytes = 0, bad = 0;
  double compile_ms = 0;
  for (const EntryInfo& e : entries) {
    bytes += e.file_bytes;
    bad += !e.status.ok();
    if (e.header) compile_ms += absl::ToDoubleMilliseconds(e.header->compile_time);
  }
  int64_t temps = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) temps += f.path().filename().string().rfind(".tmp-", 0) == 0;
  const json j = {{"directory", dir}, {"entries", entries.size()}, {"bytes", bytes}, {"bad_headers", bad},
                  {"temp_files", temps}, {"compile_time_ms", compile_ms}};
  if (as_json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << absl::StrFormat("%s: %d entries, %d bytes, %d with bad headers, %d temp files, %.1f ms of compiles\n",
                                 dir, entries.size(), bytes, bad, temps, compile_ms);
  }
  return 0;
}

int verify(const std::string& dir, bool as_json) {
  auto entries = mcx::value_or_throw(open_dir(dir)->verify());
  int bad = 0;
  json arr = json::array();
  for (const EntryInfo& e : entries) {
    bad += !e.status.ok();
    if (as_json) {
      arr.push_back(entry_json(e));
    } else if (!e.status.ok()) {
      std::cout << e.key_hex << ": " << e.status.message() << "\n";
    }
  }
  if (as_json) {
    std::cout << json{{"entries", entries.size()}, {"bad", bad}, {"details", arr}}.dump(2) << "\n";
  } else {
    std::cout << entries.size() << " entries, " << bad << " bad\n";
  }
  return bad == 0 ? 0 : 1;
}

int inspect(const std::string& dir, const std::string& key, bool as_json) {
  auto entries = mcx::value_or_throw(open_dir(dir)->list());
  const EntryInfo* found = nullptr;
  for (const EntryInfo& e : entries) {
    if (e.key_hex.rfind(key, 0) != 0) continue;
    if (found != nullptr) throw mcx::InvalidArgument("[mcx-cache] key prefix '" + key + "' matches several entries");
    found = &e;
  }
  if (found == nullptr) throw mcx::NotFound("[mcx-cache] no entry with key '" + key + "' in '" + dir + "'");
  const json j = entry_json(*found);
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  for (const auto& [name, value] : j.items()) {
    if (name == "components") {
      std::cout << "components:\n";
      for (const auto& [c, d] : value.items()) std::cout << "  " << c << ": " << d.get<std::string>() << "\n";
    } else {
      std::cout << name << ": " << (value.is_string() ? value.get<std::string>() : value.dump()) << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcx-cache: inspect and maintain a persistent compilation cache directory"};
  app.require_subcommand(1);
  std::string dir, key;
  int64_t max_bytes = 0;
  bool as_json = false;
  app.add_flag("--json", as_json, "print JSON");
  auto sub = [&](const char* name, const char* help) {
    CLI::App* c = app.add_subcommand(name, help);
    c->add_option("DIR", dir, "cache directory")->required();
    c->add_flag("--json", as_json, "print JSON");
    return c;
  };
  CLI::App* c_ls = sub("ls", "list entries, most recently used first");
  CLI::App* c_stats = sub("stats", "entry count, bytes, bad entries");
  CLI::App* c_verify = sub("verify", "check every entry fully; exit 1 if any is bad");
  CLI::App* c_prune = sub("prune", "evict least recently used entries down to --max-bytes");
  c_prune->add_option("--max-bytes", max_bytes, "bytes to keep")->required()->check(CLI::NonNegativeNumber);
  CLI::App* c_clear = sub("clear", "remove every entry and temp file");
  CLI::App* c_inspect = sub("inspect", "one entry's header and key components");
  c_inspect->add_option("KEY", key, "key (hex) or a unique prefix")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (c_ls->parsed()) return ls(dir, as_json);
    if (c_stats->parsed()) return stats(dir, as_json);
    if (c_verify->parsed()) return verify(dir, as_json);
    if (c_inspect->parsed()) return inspect(dir, key, as_json);
    auto cache = open_dir(dir);
    const int64_t removed = mcx::value_or_throw(c_prune->parsed() ? cache->prune(max_bytes) : cache->clear());
    if (as_json) {
      std::cout << json{{"removed", removed}}.dump() << "\n";
    } else {
      std::cout << "removed " << removed << " files\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mcx-cache: %s\n", e.what());
    return 1;
  }
}
