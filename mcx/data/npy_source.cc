#include "mcx/data/npy_source.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/npy.h"
#include "mcx/data/file_bytes.h"

namespace mcx::data {
namespace {

// Shards concatenated along the first dimension; offsets_[k] is the first global index of shard k.
class ConcatSource final : public Source {
 public:
  ConcatSource(std::string name, std::vector<SourcePtr> shards) : name_(std::move(name)), shards_(std::move(shards)) {
    int64_t total = 0;
    for (const SourcePtr& s : shards_) {
      offsets_.push_back(total);
      total += s->size();
    }
    size_ = total;
  }
  int64_t size() const override { return size_; }
  ExampleSpec spec() const override { return shards_.front()->spec(); }
  std::string name() const override { return name_; }
  absl::Status read(int64_t index, std::span<std::byte> out) const override {
    MCX_RETURN_IF_ERROR(check_index(index));
    const size_t k = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), index) - offsets_.begin()) - 1;
    return shards_[k]->read(index - offsets_[k], out);
  }

 private:
  std::string name_;
  std::vector<SourcePtr> shards_;
  std::vector<int64_t> offsets_;
  int64_t size_ = 0;
};

}  // namespace

absl::StatusOr<SourcePtr> load_npy(const std::string& path) {
  MCX_ASSIGN_OR_RETURN(FileBytes f, read_maybe_gzip(path));
  const auto* u8 = reinterpret_cast<const uint8_t*>(f.bytes.data());
  MCX_ASSIGN_OR_RETURN(NpyLayout layout, parse_npy_layout(std::span<const uint8_t>(u8, f.bytes.size()), f.bytes.size(), path));
  if (layout.dims.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("[data] ", path,
                                                   ": expected an array whose first dimension numbers the examples, found a 0-d array"));
  }
  ExampleSpec spec{layout.dtype, std::vector<int64_t>(layout.dims.begin() + 1, layout.dims.end())};
  const int64_t n = layout.dims[0];
  return make_memory_source(path, std::move(spec), n, f.bytes.subspan(layout.data_offset), std::move(f.keep));
}

SourcePtr open_npy(const std::string& path) { return value_or_throw(load_npy(path)); }

absl::StatusOr<SourcePtr> load_npy_dir(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string p = entry.path().string();
    if (entry.is_regular_file() && (p.ends_with(".npy") || p.ends_with(".npy.gz"))) files.push_back(p);
  }
  if (ec) return absl::NotFoundError(absl::StrCat("[data] cannot list '", dir, "': ", ec.message()));
  if (files.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("[data] ", dir, ": expected .npy shards in the directory, found none"));
  }
  std::sort(files.begin(), files.end());
  std::vector<SourcePtr> shards;
  for (const std::string& f : files) {
    MCX_ASSIGN_OR_RETURN(SourcePtr s, load_npy(f));
    if (!shards.empty() && !(s->spec() == shards.front()->spec())) {
      return absl::InvalidArgumentError(absl::StrCat("[data] ", f, ": expected ", shards.front()->spec().to_string(),
                                                     " examples like ", files.front(), ", found ", s->spec().to_string()));
    }
    shards.push_back(std::move(s));
  }
  return SourcePtr(std::make_shared<ConcatSource>(dir, std::move(shards)));
}

SourcePtr open_npy_dir(const std::string& dir) { return value_or_throw(load_npy_dir(dir)); }

}  // namespace mcx::data
