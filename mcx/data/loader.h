// DataLoader: deterministic, sharded, prefetched global batches as mcx::Arrays.
//
//   auto train = mcx::data::open_idx(dir + "/train-images-idx3-ubyte.gz");   // u8[60000, 28, 28]
//   mcx::Mesh mesh = mcx::make_mesh({mcx::device_count()}, {"data"});
//   mcx::data::DataLoader loader(
//       {{"image", images, mcx::NamedSharding(mesh, mcx::P("data", mcx::None, mcx::None)), {mcx::data::normalize(0.286f, 0.353f)}},
//        {"label", labels, mcx::NamedSharding(mesh, mcx::P("data"))}},
//       {.global_batch = 128, .seed = 0, .num_epochs = 10});
//   while (auto batch = loader.next()) step(batch->fields[0], batch->fields[1]);
//   std::string saved = loader.state().to_string();   // ... later, on any number of processes:
//   loader.restore(mcx::value_or_throw(mcx::data::parse_loader_state(saved)));
//
// Every process of a job builds the same loader (same sources, options, shardings); the global batch order
// comes from the sampler (sampler.h) and never depends on the job's size. Each process reads only the rows
// its addressable devices hold (shard_plan.h) and places them on its devices: batch->fields[f] is a global
// array with field f's sharding (dims [global_batch, example dims after transforms...]), assembled without
// any communication. With Remainder::kPad, batch->mask is f32[global_batch] (1 real row, 0 padding) sharded
// like dimension 0 of field 0. All fields must split dimension 0 the same way.
//
// Prefetch: `workers` threads read and transform batches ahead of the consumer (next() places them: an
// asynchronous enqueue of host-to-device copies on the calling thread), at most `prefetch`
// batches and `max_prefetch_bytes` of host data in flight (at least one batch always proceeds). Batches are
// returned in order whatever worker made them. stats() says how long next() waited for data.
//
// Errors: the constructor throws InvalidArgument (fields of different sizes, a sharding that does not fit,
// a transform that cannot take its field). next() throws the first error of the batch it returns (bad data:
// the source's error naming the file and record; MCX_DATA_VERIFY mismatches), DeadlineExceeded after
// `timeout` without a batch. restore() throws InvalidArgument for a state of another data set or seed.
// Threads: the workers are joined by restore() and the destructor (which stops them within one batch);
// destroy loaders before main returns (never hold one in a static: docs/architecture.md, process exit).
// Thread-safety: next/state/restore/stats are called by one thread (the training loop).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/data/loader_state.h"
#include "mcx/data/sampler.h"
#include "mcx/data/shard_plan.h"
#include "mcx/data/source.h"
#include "mcx/data/transform.h"
#include "mcx/runtime/sharding.h"
#include "mcx/trace/array.h"

namespace mcx::data {

struct Field {
  std::string name;
  SourcePtr source;
  Sharding sharding;
  std::vector<TransformPtr> transforms = {};
};

struct LoaderOptions {
  int64_t global_batch = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  Remainder remainder = Remainder::kDrop;
  std::optional<int64_t> num_epochs = std::nullopt;    // nullopt: endless
  std::optional<int> workers = std::nullopt;    // default MCX_DATA_WORKERS
  std::optional<int> prefetch = std::nullopt;    // batches; default MCX_DATA_PREFETCH
  std::optional<int64_t> max_prefetch_bytes = std::nullopt;  // default MCX_DATA_PREFETCH_MB MiB
  std::optional<absl::Duration> timeout = std::nullopt;  // next()'s deadline; default MCX_DEVICE_TIMEOUT_S
  BatchFn batch_fn = nullptr;    // optional, after the per-example transforms
  std::string name = "loader";            // in errors and MCX_DATA_VERIFY keys
};

struct Batch {
  std::vector<Array> fields;
  std::optional<Array> mask;        // Remainder::kPad only
  int64_t epoch = 0, position = 0;  // where the batch starts in the global order
  int64_t real_examples = 0;        // global_batch, or fewer in a padded last batch
  std::vector<int64_t> local_indices;  // the global example index of each row this process read (-1: padding)
  std::vector<RowRange> local_rows;    // the rows of the global batch they fill, in order
  std::vector<Buffer> host;            // (internal) the rows read, until placed
};

struct LoaderStats {
  int64_t batches = 0;
  absl::Duration wait;  // total time next() blocked waiting for a batch
};

class DataLoader {
 public:
  DataLoader(std::vector<Field> fields, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next global batch; std::nullopt after num_epochs epochs.
  std::optional<Batch> next();
  // The position of the batch next() returns next.
  LoaderState state() const;
  void restore(const LoaderState& state);
  LoaderStats stats() const;
  const IndexSampler& sampler() const { return sampler_; }
  const ShardPlan& plan() const { return plan_; }

 private:
  struct Slot {
    absl::StatusOr<std::optional<Batch>> batch = std::optional<Batch>();
    size_t bytes = 0;
  };
  void start_workers();
  void stop_workers();
  void worker_loop();
  absl::StatusOr<std::optional<Batch>> produce(int64_t step) const;
  void place(Batch& batch) const;

  std::vector<Field> fields_;
  std::vector<ExampleSpec> out_specs_;  // per field, after transforms
  LoaderOptions options_;
  IndexSampler sampler_;
  ShardPlan plan_;
  int workers_ = 1, prefetch_ = 1;
  int64_t max_bytes_ = 0;
  size_t batch_bytes_ = 0;  // host bytes of one batch of this process
  // Per field: this process has one device of the field's sharding and its box is all the rows the process
  // reads (the batch split over processes), so place() hands it the batch itself instead of a copy.
  std::vector<bool> hand_over_;
  absl::Duration timeout_;
  IndexSampler::Cursor start_;  // the state the step numbers count from

  mutable std::mutex mu_;
  std::condition_variable workers_cv_, consumer_cv_;
  bool stop_ = false;
  int64_t next_claim_ = 0, consumed_ = 0;
  size_t bytes_in_flight_ = 0;
  std::map<int64_t, Slot> ready_;
  LoaderStats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace mcx::data
