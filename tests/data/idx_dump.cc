// idx_dump IDX_FILE OUT_NPY [COUNT]: reads examples 0, 7, 14, ... (COUNT of them, default 200, spread over the
// file) with mcx's IDX source and writes them as one .npy (plus their indices in OUT_NPY.idx.npy), for
// idx_numpy_check.py to compare with numpy's own reading of the same file. Exit 2 on an error (printed).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/core/npy.h"
#include "mcx/data/idx_source.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: idx_dump IDX_FILE OUT_NPY [COUNT]\n");
    return 2;
  }
  absl::StatusOr<mcx::data::SourcePtr> source = mcx::data::load_idx(argv[1]);
  if (!source.ok()) {
    std::fprintf(stderr, "idx_dump: %s\n", std::string(source.status().message()).c_str());
    return 2;
  }
  const int64_t n = (*source)->size();
  const int64_t count = std::min<int64_t>(n, argc > 3 ? std::atoll(argv[3]) : 200);
  const int64_t stride = std::max<int64_t>(1, n / std::max<int64_t>(count, 1));
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < count; ++i) indices.push_back((i * stride) % n);
  const mcx::data::ExampleSpec spec = (*source)->spec();
  std::vector<int64_t> dims = {count};
  dims.insert(dims.end(), spec.dims.begin(), spec.dims.end());
  mcx::Buffer out = mcx::Buffer::uninitialized(spec.dtype, dims);
  absl::Status s = (*source)->read_batch(indices, std::span<std::byte>(static_cast<std::byte*>(out.mutable_data()),
                                                                       static_cast<size_t>(out.nbytes())));
  mcx::Buffer idx = mcx::Buffer::uninitialized(mcx::DType::kInt64, {count});
  for (int64_t i = 0; i < count; ++i) idx.mutable_data<int64_t>()[i] = indices[static_cast<size_t>(i)];
  if (s.ok()) s = mcx::write_npy(argv[2], out);
  if (s.ok()) s = mcx::write_npy(std::string(argv[2]) + ".idx.npy", idx);
  if (!s.ok()) {
    std::fprintf(stderr, "idx_dump: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::printf("idx_dump: %lld of %lld examples of %s\n", static_cast<long long>(count), static_cast<long long>(n), argv[1]);
  return 0;
}
