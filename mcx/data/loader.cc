#include "mcx/data/loader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/core/profiler.h"
#include "mcx/data/verify.h"
#include "mcx/runtime/box_copy.h"
#include "mcx/runtime/stream.h"
#include "mcx/trace/placement.h"

namespace mcx::data {
namespace {

const Flag<int64_t> kWorkers("MCX_DATA_WORKERS", 2, "worker threads per data loader (reading, transforms)",
                             int_in_range(1, 64));
const Flag<int64_t> kPrefetch("MCX_DATA_PREFETCH", 8, "batches a data loader prepares ahead of the consumer",
                              int_in_range(1, 1024));
const Flag<int64_t> kPrefetchMb("MCX_DATA_PREFETCH_MB", 256,
                                "host memory bound (MiB) of the batches a data loader holds ahead (at least one batch)",
                                int_in_range(1, 1 << 20));

absl::Status field_error(const std::string& loader, const Field& f, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("[data] loader '", loader, "' field '", f.name, "': ", what));
}

std::vector<int64_t> batch_dims(int64_t b, const ExampleSpec& s) {
  std::vector<int64_t> d{b};
  d.insert(d.end(), s.dims.begin(), s.dims.end());
  return d;
}

// Reads rows (global example indices, -1: padding) of field f and runs its transforms: [rows, out dims].
absl::StatusOr<Buffer> read_field(const Field& f, const ExampleSpec& out_spec, int field, uint64_t seed, int64_t epoch,
                                  const std::vector<int64_t>& indices) {
  const ExampleSpec in_spec = f.source->spec();
  const size_t in_row = in_spec.nbytes(), out_row = out_spec.nbytes();
  const int64_t rows = static_cast<int64_t>(indices.size());
  std::vector<int64_t> real;
  for (int64_t i : indices) if (i >= 0) real.push_back(i);
  Buffer out = Buffer::zeros(out_spec.dtype, batch_dims(rows, out_spec));
  auto* dst = static_cast<std::byte*>(out.mutable_data());
  // Without transforms or padding the rows are read straight into the batch; otherwise into `raw`, and the
  // last transform writes each row into the batch.
  if (f.transforms.empty() && real.size() == indices.size()) {
    MCX_RETURN_IF_ERROR(f.source->read_batch(real, std::span<std::byte>(dst, out.nbytes())));
    return out;
  }
  std::vector<std::byte> raw(real.size() * in_row);
  MCX_RETURN_IF_ERROR(f.source->read_batch(real, raw));
  std::vector<std::byte> a, b;
  size_t k = 0;  // index into real / raw
  for (int64_t r = 0; r < rows; ++r) {
    if (indices[r] < 0) continue;  // padding stays zero
    std::span<const std::byte> cur(raw.data() + k * in_row, in_row);
    const std::span<std::byte> row(dst + r * out_row, out_row);
    ExampleSpec spec = in_spec;
    for (size_t t = 0; t < f.transforms.size(); ++t) {
      const ExampleSpec next = f.transforms[t]->output_spec(spec).value();  // checked at construction
      std::vector<std::byte>& buf = (t % 2 == 0) ? a : b;
      const bool last = t + 1 == f.transforms.size();
      if (!last) buf.resize(next.nbytes());
      const std::span<std::byte> into = last ? row : std::span<std::byte>(buf);
      f.transforms[t]->apply(spec, cur, into, example_key(seed, epoch, indices[r], field, static_cast<int>(t)));
      cur = into;
      spec = next;
    }
    if (f.transforms.empty()) std::memcpy(row.data(), cur.data(), out_row);
    ++k;
  }
  return out;
}

}  // namespace

DataLoader::DataLoader(std::vector<Field> fields, LoaderOptions options)
    : fields_(std::move(fields)), options_(std::move(options)),
      sampler_(fields_.empty() ? 0 : fields_[0].source->size(),
               SamplerOptions{options_.global_batch, options_.seed, options_.shuffle, options_.remainder}) {
  const std::string& name = options_.name;
  if (fields_.empty()) throw InvalidArgument(absl::StrCat("[data] loader '", name, "': expected at least one field, found none"));
  for (size_t f = 0; f < fields_.size(); ++f) {
    const Field& field = fields_[f];
    if (field.source->size() != fields_[0].source->size()) {
      throw_if_error(field_error(name, field, absl::StrCat("expected ", fields_[0].source->size(), " examples (as field '",
                                                           fields_[0].name, "'), found ", field.source->size())));
    }
    ExampleSpec spec = field.source->spec();
    for (const TransformPtr& t : field.transforms) {
      absl::StatusOr<ExampleSpec> next = t->output_spec(spec);
      if (!next.ok()) throw_if_error(field_error(name, field, std::string(next.status().message())));
      spec = *next;
    }
    out_specs_.push_back(spec);
    const std::vector<int64_t> dims = batch_dims(options_.global_batch, spec);
    throw_if_error(field.sharding.validate(dims, "data"));
    ShardPlan plan = make_shard_plan(field.sharding, dims);
    if (f == 0) {
      plan_ = std::move(plan);
    } else if (plan.local != plan_.local) {
      throw_if_error(field_error(name, field, absl::StrCat("expected dimension 0 split as field '", fields_[0].name,
                                                           "' (", fields_[0].sharding.to_string(), "), found ",
                                                           field.sharding.to_string())));
    }
    batch_bytes_ += static_cast<size_t>(plan_.local_rows) * spec.nbytes();
    hand_over_.push_back(field.sharding.addressable_devices_indices_map(dims).size() == 1 && plan_.local.size() == 1);
  }
  workers_ = static_cast<int>(options_.workers.value_or(static_cast<int>(kWorkers.value())));
  prefetch_ = static_cast<int>(options_.prefetch.value_or(static_cast<int>(kPrefetch.value())));
  max_bytes_ = options_.max_prefetch_bytes.value_or(kPrefetchMb.value() << 20);
  if (workers_ < 1 || prefetch_ < 1 || max_bytes_ < 1) {
    throw InvalidArgument(absl::StrCat("[data] loader '", name, "': expected workers, prefetch and max_prefetch_bytes >= 1, found ",
                                       workers_, ", ", prefetch_, ", ", max_bytes_));
  }
  timeout_ = options_.timeout.value_or(default_device_deadline() - absl::Now());
  start_workers();
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::start_workers() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = false;
    next_claim_ = consumed_ = 0;
    bytes_in_flight_ = 0;
    ready_.clear();
  }
  for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { worker_loop(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  workers_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void DataLoader::worker_loop() {
  profiler::set_thread_name(absl::StrCat("data loader '", options_.name, "' worker"));
  while (true) {
    int64_t step;
    {
      std::unique_lock<std::mutex> l(mu_);
      // Bounded: at most prefetch_ batches ahead and max_bytes_ held (the consumer's next batch always goes).
      workers_cv_.wait(l, [&] {
        if (stop_) return true;
        if (next_claim_ - consumed_ >= prefetch_) return false;
        return next_claim_ == consumed_ || bytes_in_flight_ + batch_bytes_ <= static_cast<size_t>(max_bytes_);
      });
      if (stop_) return;
      step = next_claim_++;
      bytes_in_flight_ += batch_bytes_;
    }
    absl::StatusOr<std::optional<Batch>> batch;
    {
      profiler::Scope traced("data", "prefetch batch");
      traced.arg("step", step);
      batch = produce(step);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      const bool end = !batch.ok() || !batch->has_value();
      ready_[step] = Slot{std::move(batch), batch_bytes_};
      if (end) {
        // Nothing after an error or the end is needed: stop claiming (stop_workers still joins).
        next_claim_ = std::max(next_claim_, step + 1);
      }
    }
    consumer_cv_.notify_all();
  }
}

absl::StatusOr<std::optional<Batch>> DataLoader::produce(int64_t step) const {
  const IndexSampler::Cursor at = sampler_.advance(start_, step);
  if (options_.num_epochs && at.epoch >= *options_.num_epochs) return std::optional<Batch>();
  const std::vector<int64_t> global = sampler_.batch(at.epoch, at.position);
  Batch batch;
  batch.epoch = at.epoch;
  batch.position = at.position;
  batch.real_examples = std::count_if(global.begin(), global.end(), [](int64_t i) { return i >= 0; });
  batch.local_rows = plan_.local;
  HostBatch host;
  host.epoch = at.epoch;
  for (const RowRange& r : plan_.local) {
    for (int64_t row = r.start; row < r.limit; ++row) {
      host.indices.push_back(global[row]);
      host.positions.push_back(row);
    }
  }
  for (size_t f = 0; f < fields_.size(); ++f) {
    MCX_ASSIGN_OR_RETURN(Buffer b, read_field(fields_[f], out_specs_[f], static_cast<int>(f), options_.seed, at.epoch, host.indices));
    host.names.push_back(fields_[f].name);
    host.fields.push_back(std::move(b));
  }
  if (options_.batch_fn) {
    std::vector<std::vector<int64_t>> dims;
    for (const Buffer& b : host.fields) dims.push_back(b.dims());
    MCX_RETURN_IF_ERROR(options_.batch_fn(host));
    for (size_t f = 0; f < fields_.size(); ++f) {
      if (f >= host.fields.size() || host.fields[f].dims() != dims[f] || host.fields[f].dtype() != out_specs_[f].dtype) {
        return field_error(options_.name, fields_[f], "the batch function changed the field's shape or dtype (it may change values only)");
      }
    }
  }
  if (verify_enabled()) {
    for (const auto& [rows, holders] : plan_.replicas) {
      if (holders.size() < 2) continue;
      Sha256 h;
      int64_t base = 0;  // local row of rows.start
      for (const RowRange& r : plan_.local) {
        if (rows.start >= r.start && rows.start < r.limit) { base += rows.start - r.start; break; }
        base += r.limit - r.start;
      }
      for (const Buffer& b : host.fields) {
        const size_t row = b.nbytes() / std::max<int64_t>(plan_.local_rows, 1);
        h.update(std::span<const uint8_t>(static_cast<const uint8_t*>(b.data()) + base * row, (rows.limit - rows.start) * row));
      }
      MCX_RETURN_IF_ERROR(verify_replicas(options_.name, at.epoch, at.position, rows, holders, h.digest(), absl::Now() + timeout_));
    }
  }
  batch.host = std::move(host.fields);
  batch.local_indices = std::move(host.indices);
  return std::optional<Batch>(std::move(batch));
}

void DataLoader::place(Batch& batch) const {
  const std::vector<int64_t> global = sampler_.batch(batch.epoch, batch.position);
  // Placement: every addressable device's box is copied out of the rows this process read (or takes them).
  for (size_t f = 0; f < fields_.size(); ++f) {
    Buffer local = std::move(batch.host[f]);
    const std::vector<int64_t> dims = batch_dims(options_.global_batch, out_specs_[f]);
    const size_t row = out_specs_[f].nbytes();
    auto callback = [&](const IndexBox& box) {
      if (hand_over_[f] && box.start[0] == plan_.local[0].start && box.limit[0] == plan_.local[0].limit &&
          box.shape() == local.dims()) {
        return std::exchange(local, Buffer());
      }
      Buffer out = Buffer::uninitialized(local.dtype(), box.shape());
      int64_t base = 0;
      for (const RowRange& r : plan_.local) {
        if (box.start[0] >= r.start && box.limit[0] <= r.limit) {
          std::vector<int64_t> origin(dims.size(), 0), src_dims = dims;
          origin[0] = r.start;
          src_dims[0] = r.limit - r.start;
          copy_box(static_cast<const std::byte*>(local.data()) + base * row, origin, src_dims, out.mutable_data(), box.start,
                   box.shape(), box, dtype_size(local.dtype()));
          break;
        }
        base += r.limit - r.start;
      }
      return out;
    };
    try {
      batch.fields.push_back(make_array_from_callback(dims, local.dtype(), fields_[f].sharding, callback));
    } catch (const Error& e) {
      throw_if_error(absl::InternalError(absl::StrCat("[data] loader '", options_.name, "' field '", fields_[f].name, "': placement: ", e.what())));
    }
  }
  if (options_.remainder == Remainder::kPad) {
    Buffer mask = Buffer::zeros(DType::kFloat32, {options_.global_batch});
    for (size_t i = 0; i < global.size(); ++i) mask.mutable_data<float>()[i] = global[i] >= 0 ? 1.0f : 0.0f;
    const Sharding& s0 = fields_[0].sharding;
    const Sharding ms = NamedSharding(s0.mesh(), PartitionSpec({s0.spec().dim(0)}));
    batch.mask = device_put(mask, ms);
  }
  batch.host.clear();
}

std::optional<Batch> DataLoader::next() {
  std::unique_lock<std::mutex> l(mu_);
  const absl::Time t0 = absl::Now();
  bool arrived;
  {
    profiler::Scope traced("data", "wait for batch");
    traced.arg("step", consumed_);
    arrived = consumer_cv_.wait_for(l, absl::ToChronoNanoseconds(timeout_), [&] { return ready_.count(consumed_) > 0; });
  }
  stats_.wait += absl::Now() - t0;
  if (!arrived) {
    throw DeadlineExceeded(absl::StrCat("[data] loader '", options_.name, "': expected batch ", consumed_, " within ",
                                        absl::FormatDuration(timeout_), ", found none (workers still reading)"));
  }
  auto it = ready_.find(consumed_);
  // An error or the end stays in place: calling next() again repeats it.
  throw_if_error(it->second.batch.status());
  if (!it->second.batch->has_value()) return std::nullopt;
  Slot slot = std::move(it->second);
  ready_.erase(it);
  ++consumed_;
  bytes_in_flight_ -= slot.bytes;
  ++stats_.batches;
  l.unlock();
  workers_cv_.notify_all();
  // Placement on the consumer's thread: device work is enqueued in the order the training loop issues it
  // (placing from the workers raced with the step's launches on the device streams).
  Batch batch = std::move(**slot.batch);
  {
    profiler::Scope traced("data", "place batch");
    place(batch);
  }
  return batch;
}

LoaderState DataLoader::state() const {
  std::lock_guard<std::mutex> l(mu_);
  const IndexSampler::Cursor at = sampler_.advance(start_, consumed_);
  return LoaderState{options_.seed, at.epoch, at.position, sampler_.num_examples()};
}

void DataLoader::restore(const LoaderState& state) {
  if (state.seed != options_.seed || state.num_examples != sampler_.num_examples()) {
    throw InvalidArgument(absl::StrCat("[data] loader '", options_.name, "' restore: expected a state of seed ", options_.seed,
                                       " over ", sampler_.num_examples(), " examples, found seed ", state.seed, " over ",
                                       state.num_examples));
  }
  stop_workers();
  start_ = {state.epoch, state.position};
  start_workers();
}

LoaderStats DataLoader::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace mcx::data
