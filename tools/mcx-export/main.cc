// mcx-export: inspect and run export artifacts (docs/compatibility.md, mcx/trace/export.h).
//
//   mcx-export inspect FILE
//       prints the signature (input names, dtypes, symbolic shapes, shardings), dimension variables,
//       constraints, platforms, device count, versions, producer, creation time, the artifact's size and
//       SHA-256, the program fingerprint and whether a VJP is included.
//   mcx-export run FILE --in a.npy [--in b.npy ...] --out-dir DIR
//       calls the artifact on the .npy inputs (one per flat input, in signature order) and writes one
//       .npy per flat output, DIR/out_0.npy, DIR/out_1.npy, ...; prints each output's type. An artifact
//       exported for N > 1 devices runs sharded on N CPU devices (MCX_CPU_DEVICE_COUNT, when set, decides).
//       --platform NAME runs it on that platform ("cpu", "cuda"; as MCX_PLATFORMS=NAME): the artifact must
//       have been exported for it, and the platform must be usable here (else its reason, e.g. no driver).
//
// Exit codes: 0 ok, 1 the artifact or a call failed (message on stderr), 2 usage error.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "mcx/core/hash.h"
#include "mcx/core/npy.h"
#include "mcx/export/artifact.h"
#include "mcx/runtime/device.h"
#include "mcx/trace/export.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw mcx::NotFound("[mcx-export] cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int inspect(const std::string& file) {
  std::string bytes = read_file(file);
  mcx::exporting::Artifact a = mcx::value_or_throw(mcx::exporting::deserialize(bytes));
  std::cout << "file: " << file << "\n";
  std::cout << "size: " << bytes.size() << " bytes   sha256: " << mcx::to_hex(mcx::sha256(bytes)) << "\n";
  std::cout << mcx::exporting::describe(a);
  return 0;
}

int run(const std::string& file, const std::vector<std::string>& inputs, const std::string& out_dir,
        const std::string& platform) {
  // The platform is chosen before anything creates the devices.
  if (!platform.empty()) setenv("MCX_PLATFORMS", platform.c_str(), 1);
  mcx::Exported e = mcx::Exported::deserialize(read_file(file));
  // A sharded artifact needs its device count: unless MCX_CPU_DEVICE_COUNT says otherwise, this process
  // gets nr_devices CPU devices (before anything creates the devices).
  const uint32_t nr_devices = e.artifact().nr_devices;
  if (nr_devices > 1 && std::getenv("MCX_CPU_DEVICE_COUNT") == nullptr) {
    mcx::set_cpu_device_count(static_cast<int>(nr_devices));
  }
  std::vector<mcx::Array> args;
  for (const std::string& path : inputs) args.emplace_back(mcx::value_or_throw(mcx::read_npy(path)));
  if (!platform.empty() && mcx::default_platform() != platform) {
    throw mcx::InvalidArgument("[mcx-export] --platform " + platform + ": the devices are " + mcx::default_platform() + "'s");
  }
  std::vector<mcx::Array> outs = e.call_flat(args);
  std::filesystem::create_directories(out_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string path = (std::filesystem::path(out_dir) / ("out_" + std::to_string(i) + ".npy")).string();
    mcx::throw_if_error(mcx::write_npy(path, outs[i].to_host()));
    std::cout << path << ": " << outs[i].aval().to_string();
    if (nr_devices > 1) std::cout << " " << outs[i].sharding().to_string();
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcx-export: inspect and run mcx export artifacts"};
  app.require_subcommand(1);
  std::string file, out_dir, platform;
  std::vector<std::string> inputs;
  CLI::App* insp = app.add_subcommand("inspect", "print an artifact's signature, versions and fingerprint");
  insp->add_option("FILE", file, "artifact (.mcx)")->required();
  CLI::App* runc = app.add_subcommand("run", "call an artifact on .npy inputs, write .npy outputs");
  runc->add_option("FILE", file, "artifact (.mcx)")->required();
  runc->add_option("--in", inputs, "input .npy, one per flat input in signature order");
  runc->add_option("--out-dir", out_dir, "directory for out_<i>.npy")->required();
  runc->add_option("--platform", platform, "run on this platform (cpu, cuda; as MCX_PLATFORMS)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (insp->parsed()) return inspect(file);
    return run(file, inputs, out_dir, platform);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mcx-export: %s\n", e.what());
    return 1;
  }
}
