// data_worker [OPTIONS] REMAINDER(drop|pad) GLOBAL_BATCH EPOCHS, under mcx-run: an mcx/data loader over a synthetic
// source of 103 examples (example i holds the int32 i) feeding a mesh over every device of the job. For each batch
// it checks that this process's shards hold the examples it says it read (padding rows hold 0), then prints
// "BATCH <epoch> <position> <index> ..." with the global example indices it read (-1: padding). data_mp_test.cc
// checks exactly-once per epoch, the same global batches for 1-4 processes, replicas and elastic restores.
//
// Options (before the positional arguments):
//   --layout=data       (default) the batch split over every device of the job (mesh {devices}, P("data"))
//   --layout=replicas   mesh {2, devices/2} ("replica", "data"), batch split over "data" only: device d and
//                       d + devices/2 (on different processes) hold the same rows
//   --stop-after=K      stop after K batches and print "STATE <loader state>" (the next batch's position)
//   --restore=STATE     restore the loader to STATE before reading
//   --corrupt-process=P process P's source returns other values (example i holds i + 1000), so its replicas
//                       differ from the other holders' (MCX_DATA_VERIFY=1 must catch it)
// Exit 1 with "ERROR <message>" on any failure.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mcx/data/loader.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"

namespace {

class Ints final : public mcx::data::Source {
 public:
  explicit Ints(int32_t offset) : offset_(offset) {}
  int64_t size() const override { return 103; }
  mcx::data::ExampleSpec spec() const override { return {mcx::DType::kInt32, {}}; }
  std::string name() const override { return "ints"; }
  absl::Status read(int64_t index, std::span<std::byte> out) const override {
    if (absl::Status s = check_index(index); !s.ok()) return s;
    const int32_t v = static_cast<int32_t>(index) + offset_;
    std::memcpy(out.data(), &v, sizeof v);
    return absl::OkStatus();
  }

 private:
  int32_t offset_;
};

struct Args {
  std::string layout = "data";
  int stop_after = -1;
  std::string restore;
  int corrupt_process = -1;
  std::vector<std::string> positional;
};

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&](const std::string& flag) -> const char* {
      return s.rfind(flag + "=", 0) == 0 ? argv[i] + flag.size() + 1 : nullptr;
    };
    if (const char* v = value("--layout")) {
      a->layout = v;
    } else if (const char* v = value("--stop-after")) {
      a->stop_after = std::atoi(v);
    } else if (const char* v = value("--restore")) {
      a->restore = v;
    } else if (const char* v = value("--corrupt-process")) {
      a->corrupt_process = std::atoi(v);
    } else if (s.rfind("--", 0) == 0) {
      return false;
    } else {
      a->positional.push_back(s);
    }
  }
  return a->positional.size() == 3 && (a->layout == "data" || a->layout == "replicas");
}

mcx::Sharding batch_sharding(const std::string& layout) {
  const int n = mcx::device_count();
  if (layout == "data") return mcx::NamedSharding(mcx::make_mesh({n}, {"data"}), mcx::P("data"));
  if (n % 2 != 0) throw std::runtime_error("--layout=replicas needs an even number of devices, found " + std::to_string(n));
  return mcx::NamedSharding(mcx::make_mesh({2, n / 2}, {"replica", "data"}), mcx::P("data"));
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: data_worker [--layout=data|replicas] [--stop-after=K] [--restore=STATE] "
                 "[--corrupt-process=P] drop|pad GLOBAL_BATCH EPOCHS\n");
    return 2;
  }
  try {
    mcx::distributed::initialize();
    mcx::data::LoaderOptions options;
    options.global_batch = std::atoi(args.positional[1].c_str());
    options.seed = 5;
    options.remainder = args.positional[0] == "pad" ? mcx::data::Remainder::kPad : mcx::data::Remainder::kDrop;
    options.num_epochs = std::atoi(args.positional[2].c_str());
    options.name = "mp";
    const int32_t offset = mcx::process_index() == args.corrupt_process ? 1000 : 0;
    mcx::data::DataLoader loader({{"x", std::make_shared<Ints>(offset), batch_sharding(args.layout)}}, options);
    if (!args.restore.empty()) loader.restore(mcx::value_or_throw(mcx::data::parse_loader_state(args.restore)));
    for (int count = 0; args.stop_after < 0 || count < args.stop_after; ++count) {
      std::optional<mcx::data::Batch> batch = loader.next();
      if (!batch) break;
      // The shards this process holds carry the examples it read, in row order (replicated shards once).
      std::vector<int32_t> held;
      int64_t last_row = -1;
      for (const mcx::ArrayShard& s : batch->fields[0].addressable_shards()) {
        if (s.index.start[0] <= last_row) continue;
        last_row = s.index.start[0];
        const mcx::Buffer b = s.data.to_host();
        for (int64_t i = 0; i < b.num_elements(); ++i) held.push_back(b.data<int32_t>()[i]);
      }
      std::string line = "BATCH " + std::to_string(batch->epoch) + " " + std::to_string(batch->position);
      if (held.size() != batch->local_indices.size()) {
        std::printf("ERROR holds %zu rows but read %zu\n", held.size(), batch->local_indices.size());
        return 1;
      }
      for (size_t k = 0; k < held.size(); ++k) {
        const int64_t idx = batch->local_indices[k];
        if (held[k] != (idx < 0 ? 0 : idx + offset)) {
          std::printf("ERROR row %zu holds %d, expected example %lld\n", k, held[k], static_cast<long long>(idx));
          return 1;
        }
        line += " " + std::to_string(idx);
      }
      std::printf("%s\n", line.c_str());
    }
    if (args.stop_after >= 0) std::printf("STATE %s\n", loader.state().to_string().c_str());
    std::fflush(stdout);
    mcx::distributed::shutdown();
  } catch (const std::exception& e) {
    std::printf("ERROR %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
