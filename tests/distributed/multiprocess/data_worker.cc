// data_worker REMAINDER(drop|pad) GLOBAL_BATCH EPOCHS, under mcx-run: an mcx/data loader over a synthetic source of
// 103 examples (example i holds the int32 i) feeding a mesh over every device of the job, batch split over the
// "data" axis. For each batch it checks that this process's shards hold the examples it says it read (padding
// rows hold 0), then prints "BATCH <epoch> <position> <index> ..." with the global example indices it read (-1:
// padding). data_mp_test.cc checks exactly-once per epoch and the same global batches for 1-4 processes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "mcx/data/loader.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"

namespace {

class Ints final : public mcx::data::Source {
 public:
  int64_t size() const override { return 103; }
  mcx::data::ExampleSpec spec() const override { return {mcx::DType::kInt32, {}}; }
  std::string name() const override { return "ints"; }
  absl::Status read(int64_t index, std::span<std::byte> out) const override {
    if (absl::Status s = check_index(index); !s.ok()) return s;
    const int32_t v = static_cast<int32_t>(index);
    std::memcpy(out.data(), &v, sizeof v);
    return absl::OkStatus();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: data_worker drop|pad GLOBAL_BATCH EPOCHS\n");
    return 2;
  }
  try {
    mcx::distributed::initialize();
    const mcx::Mesh mesh = mcx::make_mesh({mcx::device_count()}, {"data"});
    mcx::data::LoaderOptions options;
    options.global_batch = std::atoi(argv[2]);
    options.seed = 5;
    options.remainder = std::string(argv[1]) == "pad" ? mcx::data::Remainder::kPad : mcx::data::Remainder::kDrop;
    options.num_epochs = std::atoi(argv[3]);
    options.name = "mp";
    mcx::data::DataLoader loader({{"x", std::make_shared<Ints>(), mcx::NamedSharding(mesh, mcx::P("data"))}}, options);
    while (auto batch = loader.next()) {
      // The shards this process holds carry the examples it read, in row order.
      std::vector<int32_t> held;
      for (const mcx::ArrayShard& s : batch->fields[0].addressable_shards()) {
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
        if (held[k] != (idx < 0 ? 0 : idx)) {
          std::printf("ERROR row %zu holds %d, expected example %lld\n", k, held[k], static_cast<long long>(idx));
          return 1;
        }
        line += " " + std::to_string(idx);
      }
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
    mcx::distributed::shutdown();
  } catch (const std::exception& e) {
    std::printf("ERROR %s\n", e.what());
    return 1;
  }
  return 0;
}
