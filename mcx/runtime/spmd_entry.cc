#include "mcx/runtime/spmd_entry.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/byte_io.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

constexpr std::string_view kMagic = "MCXSPMD1";

}  // namespace

std::string spmd_device_assignment(const MeshAxes& axes, const std::vector<PartitionSpec>& in_specs,
                                   const std::vector<std::optional<PartitionSpec>>& out_specs) {
  std::string s = absl::StrCat("mesh ", axes.to_string(), "; in");
  for (size_t i = 0; i < in_specs.size(); ++i) absl::StrAppend(&s, i ? ", " : " ", in_specs[i].to_string());
  absl::StrAppend(&s, "; out");
  if (out_specs.empty()) absl::StrAppend(&s, " auto");
  for (size_t i = 0; i < out_specs.size(); ++i) {
    absl::StrAppend(&s, i ? ", " : " ", out_specs[i] ? out_specs[i]->to_string() : "auto");
  }
  return s;
}

absl::StatusOr<std::string> encode_spmd_entry(const SpmdEntry& entry) {
  std::string out;
  ByteWriter w(out);
  w.bytes(kMagic.data(), kMagic.size());
  w.u64(entry.out_specs.size());
  for (const PartitionSpec& spec : entry.out_specs) {
    w.u64(spec.dims().size());
    for (const DimSpec& d : spec.dims()) {
      w.u64(d.unconstrained ? 1 : 0);
      w.u64(d.axes.size());
      for (const std::string& a : d.axes) w.str(a);
    }
  }
  const spmd::PartitionStats& st = entry.stats;
  for (int n : {st.all_reduces, st.all_gathers, st.all_to_alls, st.local_slices, st.fallback_gathers}) w.i64(n);
  w.u64(st.notes.size());
  for (const std::string& note : st.notes) w.str(note);
  w.u64(entry.fingerprint);
  MCX_ASSIGN_OR_RETURN(std::string exe, entry.executable->serialize());
  w.str(exe);
  return out;
}

absl::StatusOr<SpmdEntry> decode_spmd_entry(std::string_view bytes, const Platform& platform) {
  ByteReader r(bytes, "load_spmd_executable");
  MCX_ASSIGN_OR_RETURN(std::string_view magic, r.bytes(kMagic.size()));
  if (magic != kMagic) return r.error("a partitioned executable (magic \"MCXSPMD1\")");
  SpmdEntry e;
  MCX_ASSIGN_OR_RETURN(uint64_t num_specs, r.count(8));
  for (uint64_t i = 0; i < num_specs; ++i) {
    MCX_ASSIGN_OR_RETURN(uint64_t rank, r.count(16));
    std::vector<DimSpec> dims(rank);
    for (DimSpec& d : dims) {
      MCX_ASSIGN_OR_RETURN(uint64_t unconstrained, r.u64());
      d.unconstrained = unconstrained != 0;
      MCX_ASSIGN_OR_RETURN(uint64_t num_axes, r.count(8));
      for (uint64_t k = 0; k < num_axes; ++k) {
        MCX_ASSIGN_OR_RETURN(std::string_view a, r.str());
        d.axes.emplace_back(a);
      }
    }
    e.out_specs.emplace_back(std::move(dims));
  }
  spmd::PartitionStats& st = e.stats;
  for (int* n : {&st.all_reduces, &st.all_gathers, &st.all_to_alls, &st.local_slices, &st.fallback_gathers}) {
    MCX_ASSIGN_OR_RETURN(int64_t v, r.i64());
    if (v < 0 || v > INT32_MAX) return r.error(absl::StrCat("a count, found ", v));
    *n = static_cast<int>(v);
  }
  MCX_ASSIGN_OR_RETURN(uint64_t num_notes, r.count(8));
  for (uint64_t i = 0; i < num_notes; ++i) {
    MCX_ASSIGN_OR_RETURN(std::string_view note, r.str());
    st.notes.emplace_back(note);
  }
  MCX_ASSIGN_OR_RETURN(e.fingerprint, r.u64());
  MCX_ASSIGN_OR_RETURN(std::string_view exe, r.str());
  if (!r.at_end()) return r.error("the end of the entry");
  MCX_ASSIGN_OR_RETURN(e.executable, platform.deserialize(exe));
  return e;
}

}  // namespace mcx
