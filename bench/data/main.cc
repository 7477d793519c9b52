// bench_data: the mcx/data DataLoader reading, shuffling, batching and normalising Fashion-MNIST's 60,000
// training images (u8[28, 28] -> f32 (x/255 - mean)/std) and labels (u8) into global mcx::Arrays split over
// every CPU device of the job (block_until_ready on each batch), against PyTorch's DataLoader over the same
// decoded arrays (bench/peers/data_peer.py: shuffle=True, drop_last, per-example normalise in __getitem__).
// Both sides decompress the gzipped IDX files before the timed region (mcx's open_idx decompresses at open).
// One warm-up epoch, then --reps timed epochs (468 batches of 128); throughput = examples / epoch seconds,
// the best epoch reported (the median alongside). JSON lines:
//   load/<P>proc/<tag>       mcx_examples_per_s on P processes (P = 1: one process with --devices CPU devices;
//                            P = 2: mcx-run -n 2 --cpu-devices <devices>, the job's global examples per second)
//                            against one torch configuration; ratio = mcx / peer throughput. Tags:
//                              torch_nw0, torch_nw2: num_workers 0 / 2 (persistent_workers), the images
//                                normalised one by one in the Dataset's __getitem__ (the issue's peer)
//                              torch_nw0_collate, torch_nw2_collate: the same, normalised per batch in a
//                                collate_fn (same arithmetic, one vectorised op per batch: torch's fast way)
//                              torch_best: the fastest of those (the target: ratio >= 1)
//   Each load line also says where mcx's epoch went (the best epoch, on the consumer thread): wait_s (next()
//   blocked for the workers), place_s (next() placing the rows onto the devices), block_s
//   (block_until_ready); the 1-process lines add produce_1thread_examples_per_s (one thread doing a worker's
//   job, read_batch + normalize without placement) with its gather_s / normalize_s split.
//   train_epoch_data_wait/<P>proc  examples/train_fashion_mnist --epochs 1 (1 process with 2 devices, and
//                            mcx-run -n 2 --cpu-devices 2): wait_fraction = the time the step waited for data /
//                            the epoch (the largest over processes), target 0.02 (met: wait_fraction < target).
// --worker runs the mcx measurement in one process of the job (process 0 prints it as one JSON object).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "mcx/data/idx_source.h"
#include "mcx/data/loader.h"
#include "mcx/data/sampler.h"
#include "mcx/data/transform.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/mcx.h"
#include "mcx/multihost/multihost.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace data = mcx::data;

constexpr float kMean = 0.2860f, kStd = 0.3530f;  // as examples/train_fashion_mnist and the peer

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Options {
  std::string data = MCX_BENCH_DATA_DIR;
  int batch = 128;
  int reps = 5;
  int devices = 2;
  int workers = 0;   // 0: the loader's default (MCX_DATA_WORKERS)
  int prefetch = 0;  // 0: the loader's default (MCX_DATA_PREFETCH)
  bool no_peer = false, no_train = false;
};

std::string worker_args(const Options& o) {
  return absl::StrCat(" --worker --data '", o.data, "' --batch ", o.batch, " --reps ", o.reps, " --devices ", o.devices,
                      " --workers ", o.workers, " --prefetch ", o.prefetch);
}

// One thread doing what a loader worker does for one epoch (the shuffled rows gathered with read_batch, then
// normalize on each image), without placement: the host cost per example.
json produce_one_thread(const data::SourcePtr& images, const data::SourcePtr& labels, int batch) {
  const data::IndexSampler sampler(images->size(), {.global_batch = batch, .seed = 0});
  const data::TransformPtr norm = data::normalize(kMean, kStd);
  const data::ExampleSpec in = images->spec();
  const size_t in_row = in.nbytes(), out_row = in.num_elements() * sizeof(float);
  std::vector<std::byte> raw(batch * in_row), out(batch * out_row), lab(batch * labels->spec().nbytes());
  double gather = 0, normalize = 0;
  const auto t0 = Clock::now();
  for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
    const std::vector<int64_t> idx = sampler.batch(1, b * batch);
    const auto g0 = Clock::now();
    mcx::throw_if_error(images->read_batch(idx, raw));
    mcx::throw_if_error(labels->read_batch(idx, lab));
    const auto n0 = Clock::now();
    for (int r = 0; r < batch; ++r) {
      norm->apply(in, std::span<const std::byte>(raw).subspan(r * in_row, in_row),
                  std::span<std::byte>(out).subspan(r * out_row, out_row), 0);
    }
    gather += std::chrono::duration<double>(n0 - g0).count();
    normalize += seconds_since(n0);
  }
  const double total = seconds_since(t0);
  return json{{"examples_per_s", sampler.batches_per_epoch() * batch / total}, {"gather_s", gather},
              {"normalize_s", normalize}};
}

int worker(const Options& o) {
  const bool distributed = mcx::distributed::launched_as_job(mcx::distributed::process_env());
  if (distributed) {
    mcx::distributed::initialize();
  } else {
    mcx::set_cpu_device_count(o.devices);
  }
  auto sync = [&](const std::string& name) {
    if (distributed) mcx::multihost::sync_global_devices(name);
  };
  // Decompressed at open, outside the timed region (the peer decodes before timing too).
  const data::SourcePtr images = data::open_idx(o.data + "/train-images-idx3-ubyte.gz");
  const data::SourcePtr labels = data::open_idx(o.data + "/train-labels-idx1-ubyte.gz");
  const mcx::Mesh mesh = mcx::make_mesh({mcx::device_count()}, {"data"});
  data::LoaderOptions lo{.global_batch = o.batch, .seed = 0, .num_epochs = o.reps + 1, .name = "bench"};
  if (o.workers > 0) lo.workers = o.workers;
  if (o.prefetch > 0) lo.prefetch = o.prefetch;
  json reps = json::array();
  int64_t per_epoch = 0;
  {
    data::DataLoader loader(
        {{"image", images, mcx::NamedSharding(mesh, mcx::P("data", mcx::None, mcx::None)), {data::normalize(kMean, kStd)}},
         {"label", labels, mcx::NamedSharding(mesh, mcx::P("data"))}},
        lo);
    per_epoch = loader.sampler().batches_per_epoch();
    for (int epoch = 0; epoch <= o.reps; ++epoch) {  // epoch 0: warm-up
      sync("bench_data_start_" + std::to_string(epoch));
      const absl::Duration wait0 = loader.stats().wait;
      double next_s = 0, block_s = 0;
      const auto t0 = Clock::now();
      for (int64_t b = 0; b < per_epoch; ++b) {
        const auto a = Clock::now();
        std::optional<data::Batch> batch = loader.next();
        const auto c = Clock::now();
        if (!batch || batch->epoch != epoch) {
          std::fprintf(stderr, "bench_data: expected batch %lld of epoch %d, found %s\n", static_cast<long long>(b), epoch,
                       batch ? absl::StrCat("epoch ", batch->epoch).c_str() : "the end");
          return 1;
        }
        for (const mcx::Array& f : batch->fields) f.block_until_ready();
        next_s += std::chrono::duration<double>(c - a).count();
        block_s += seconds_since(c);
      }
      sync("bench_data_end_" + std::to_string(epoch));
      const double total = seconds_since(t0);
      const double wait_s = absl::ToDoubleSeconds(loader.stats().wait - wait0);
      if (epoch > 0) {
        reps.push_back(json{{"seconds", total}, {"wait_s", wait_s}, {"place_s", next_s - wait_s}, {"block_s", block_s}});
      }
    }
  }
  if (mcx::process_index() == 0) {
    json out{{"processes", mcx::process_count()}, {"devices", mcx::device_count()}, {"batches_per_epoch", per_epoch},
             {"examples_per_epoch", per_epoch * o.batch}, {"reps", reps}};
    if (!distributed) out["produce_1thread"] = produce_one_thread(images, labels, o.batch);
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  if (distributed) mcx::distributed::shutdown();
  return 0;
}

// Every line a command prints (its stderr passes through).
std::vector<std::string> run_lines(const std::string& cmd) {
  std::vector<std::string> lines;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return lines;
  std::string cur;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) {
    cur += buf;
    if (!cur.empty() && cur.back() == '\n') {
      cur.pop_back();
      lines.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  ::pclose(f);
  return lines;
}

// The first JSON object a command prints (mcx-run prefixes lines with "[p0] ").
json run_json(const std::string& cmd) {
  for (const std::string& line : run_lines(cmd)) {
    const size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    json j = json::parse(line.substr(brace), nullptr, false);
    if (!j.is_discarded() && j.is_object()) return j;
  }
  return json();
}

// The mcx measurement's summary: best and median epoch throughput, and the best epoch's breakdown.
json summarize(const json& m) {
  if (!m.is_object() || !m.contains("reps") || m["reps"].empty()) return json();
  const double examples = m["examples_per_epoch"].get<double>();
  std::vector<json> reps(m["reps"].begin(), m["reps"].end());
  std::sort(reps.begin(), reps.end(), [](const json& a, const json& b) { return a["seconds"] < b["seconds"]; });
  const json& best = reps.front();
  json out{{"mcx_examples_per_s", examples / best["seconds"].get<double>()},
           {"mcx_examples_per_s_median", examples / reps[reps.size() / 2]["seconds"].get<double>()},
           {"devices", m["devices"]},
           {"epoch_s", best["seconds"]},
           {"wait_s", best["wait_s"]},
           {"place_s", best["place_s"]},
           {"block_s", best["block_s"]}};
  if (m.contains("produce_1thread")) {
    out["produce_1thread_examples_per_s"] = m["produce_1thread"]["examples_per_s"];
    out["produce_1thread_gather_s"] = m["produce_1thread"]["gather_s"];
    out["produce_1thread_normalize_s"] = m["produce_1thread"]["normalize_s"];
  }
  return out;
}

// examples/train_fashion_mnist's epoch line: "... 5400 examples/s  waited for data 0.012 s (0.1%)  11.10 s".
json train_wait(const std::string& cmd) {
  static const std::regex re(R"(^(?:\[p(\d+)\] )?.*epoch 1\b.*?([0-9.]+) examples/s\s+waited for data ([0-9.]+) s \([0-9.]+%\)\s+([0-9.]+) s)");
  json per_process = json::array();
  double worst = -1, waited = 0, epoch = 0, eps = 0;
  for (const std::string& line : run_lines(cmd)) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    const double w = std::stod(m[3]), s = std::stod(m[4]);
    const double frac = s > 0 ? w / s : 0;
    per_process.push_back(json{{"process", m[1].matched ? std::stoi(m[1]) : 0}, {"waited_s", w}, {"epoch_s", s},
                               {"wait_fraction", frac}, {"examples_per_s", std::stod(m[2])}});
    if (frac > worst) {
      worst = frac;
      waited = w;
      epoch = s;
      eps = std::stod(m[2]);
    }
  }
  if (per_process.empty()) return json();
  return json{{"wait_fraction", worst}, {"target", 0.02}, {"met", worst < 0.02}, {"waited_s", waited}, {"epoch_s", epoch},
              {"examples_per_s", eps}, {"per_process", per_process}, {"peer", nullptr}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool is_worker = false;
  CLI::App app{"bench_data"};
  app.add_option("--data", o.data, "directory of the gzipped Fashion-MNIST IDX files");
  app.add_option("--batch", o.batch, "global batch size (mcx and torch)")->check(CLI::PositiveNumber);
  app.add_option("--reps", o.reps, "timed epochs after one warm-up epoch (the best is reported)")->check(CLI::PositiveNumber);
  app.add_option("--devices", o.devices, "CPU devices per process")->check(CLI::PositiveNumber);
  app.add_option("--workers", o.workers, "mcx loader worker threads (0: MCX_DATA_WORKERS, default 2)");
  app.add_option("--prefetch", o.prefetch, "mcx loader prefetch depth in batches (0: MCX_DATA_PREFETCH, default 2)");
  app.add_flag("--worker", is_worker, "run the mcx measurement in one process of the job");
  app.add_flag("--no-peer", o.no_peer, "skip PyTorch");
  app.add_flag("--no-train", o.no_train, "skip the training epochs (train_epoch_data_wait)");
  CLI11_PARSE(app, argc, argv);
  if (!std::filesystem::exists(o.data + "/train-images-idx3-ubyte.gz")) {
    std::fprintf(stderr, "bench_data: %s/train-images-idx3-ubyte.gz not found (bash scripts/fetch-fashion-mnist.sh)\n",
                 o.data.c_str());
    return 2;
  }
  o.data = std::filesystem::absolute(o.data).string();  // the workers may start elsewhere
  if (is_worker) {
    try {
      return worker(o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_data worker: %s\n", e.what());
      return 2;
    }
  }
  int status = 0;
  const json one = summarize(run_json(absl::StrCat(argv[0], worker_args(o))));
  const json two = summarize(run_json(absl::StrCat(MCX_BENCH_MCX_RUN, " -n 2 --cpu-devices ", o.devices,
                                                   " --timeout 900 -- ", argv[0], worker_args(o))));
  json peer;
  if (!o.no_peer) {
    peer = run_json(absl::StrCat(  // the first python3 with torch and numpy (Debian's python3-torch is /usr/bin's)
        "for py in /usr/bin/python3 python3; do if $py -c 'import torch, numpy' 2>/dev/null; then exec $py ",
        MCX_BENCH_DATA_PEER, " --data '", o.data, "' --batch ", o.batch, " --reps ", o.reps, "; fi; done"));
  }
  std::vector<json> configs;
  if (peer.is_object() && peer.contains("configs")) configs.assign(peer["configs"].begin(), peer["configs"].end());
  if (!o.no_peer && configs.empty()) {
    std::fprintf(stderr, "bench_data: the PyTorch peer printed no result\n");
    status = 1;
  }
  auto report = [&](int procs, const json& m) {
    if (m.is_null()) {
      std::fprintf(stderr, "bench_data: the %d-process mcx run printed no result\n", procs);
      status = 1;
      return;
    }
    const double mine = m["mcx_examples_per_s"];
    auto line = [&](const std::string& tag, const json* c, const std::string& peer_name) {
      json out{{"name", absl::StrCat("load/", procs, "proc/", tag)}};
      out.update(m);
      out["processes"] = procs;
      out["batch"] = o.batch;
      out["peer"] = peer_name;
      out["peer_examples_per_s"] = c ? (*c)["examples_per_s"] : json(nullptr);
      out["peer_examples_per_s_median"] = c ? (*c)["examples_per_s_median"] : json(nullptr);
      out["ratio"] = c ? json(mine / (*c)["examples_per_s"].get<double>()) : json(nullptr);
      std::printf("%s\n", out.dump().c_str());
    };
    if (configs.empty()) line("no_peer", nullptr, "none");
    const json* best = nullptr;
    for (const json& c : configs) {
      line(c["tag"].get<std::string>(), &c, c["name"].get<std::string>());
      if (best == nullptr || c["examples_per_s"].get<double>() > (*best)["examples_per_s"].get<double>()) best = &c;
    }
    if (best != nullptr) line("torch_best", best, "best torch: " + (*best)["name"].get<std::string>());
    std::fflush(stdout);
  };
  report(1, one);
  report(2, two);
#ifdef MCX_BENCH_TRAIN_FASHION_MNIST
  if (!o.no_train) {
    const std::string train = absl::StrCat(MCX_BENCH_TRAIN_FASHION_MNIST, " --data '", o.data,
                                           "' --epochs 1 --min-accuracy 0 --batch ", o.batch);
    const std::pair<std::string, std::string> runs[] = {
        {"1proc", absl::StrCat(train, " --devices 2")},
        {"2proc", absl::StrCat(MCX_BENCH_MCX_RUN, " -n 2 --cpu-devices 2 --timeout 900 -- ", train)}};
    for (const auto& [tag, cmd] : runs) {
      json w = train_wait(cmd);
      if (w.is_null()) {
        std::fprintf(stderr, "bench_data: train_fashion_mnist (%s) printed no epoch line\n", tag.c_str());
        status = 1;
        continue;
      }
      json out{{"name", "train_epoch_data_wait/" + tag}};
      out.update(w);
      std::printf("%s\n", out.dump().c_str());
      std::fflush(stdout);
    }
  }
#endif
  return status;
}
