#include "mcx/trace/placement.h"

#include "absl/strings/str_cat.h"
#include "mcx/runtime/transfer.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/trace_state.h"

namespace mcx {
namespace {

std::vector<int64_t> dims_of(const AbstractValue& a) { return value_or_throw(to_concrete(a.shape)); }

Array committed_array(ArrayValue v) {
  v.committed = true;
  v.host_data = false;
  return Array(std::move(v));
}

}  // namespace

Array device_put(const Array& x, const Sharding& sharding) {
  if (!x.valid()) throw InvalidArgument("[device_put] the Array is empty (default-constructed)");
  if (x.is_tracer()) return with_sharding_constraint(x, sharding);
  const ArrayValue& v = x.value();
  throw_if_error(sharding.validate(dims_of(v.aval), "device_put"));
  if (v.host_data) {
    Buffer host = value_or_throw(v.to_buffer());
    return committed_array(value_or_throw(put_host(host, sharding, /*is_explicit=*/true, "device_put")));
  }
  return committed_array(value_or_throw(reshard(v, sharding, /*is_explicit=*/true, /*committed=*/true, "device_put")));
}

Array device_put(const Array& x, const Device& device) { return device_put(x, SingleDeviceSharding(device)); }

Array device_put(const Buffer& host, const Sharding& sharding) {
  throw_if_error(sharding.validate(host.dims(), "device_put"));
  return committed_array(value_or_throw(put_host(host, sharding, /*is_explicit=*/true, "device_put")));
}

Array device_put(const Buffer& host, const Device& device) { return device_put(host, SingleDeviceSharding(device)); }

Buffer device_get(const Array& x) {
  if (!x.valid()) throw InvalidArgument("[device_get] the Array is empty (default-constructed)");
  if (x.is_tracer()) x.value();  // throws the concretization error
  return value_or_throw(fetch_to_host(x.value(), /*is_explicit=*/true, "device_get"));
}

Array make_array_from_callback(const std::vector<int64_t>& dims, DType dtype, const Sharding& sharding,
                               const std::function<Buffer(const IndexBox&)>& callback) {
  AbstractValue aval{dtype, concrete_shape(dims)};
  return committed_array(value_or_throw(from_callback(aval, sharding, callback)));
}

Array make_array_from_single_device_arrays(const std::vector<int64_t>& dims, const Sharding& sharding,
                                           const std::vector<Array>& arrays, std::optional<DType> dtype) {
  if (arrays.empty() && !dtype) {
    throw InvalidArgument("[make_array_from_single_device_arrays] expected a dtype with an empty list of arrays "
                          "(a process that holds no device of the sharding), found none");
  }
  std::vector<ArrayValue> values;
  values.reserve(arrays.size());
  for (const Array& a : arrays) values.push_back(a.value());
  AbstractValue aval{dtype ? *dtype : arrays.front().dtype(), concrete_shape(dims)};
  return committed_array(value_or_throw(from_single_device_arrays(aval, sharding, values)));
}

Array make_array_from_process_local_data(const Sharding& sharding, const Buffer& local_data,
                                         const std::vector<int64_t>& global_dims) {
  return committed_array(value_or_throw(from_process_local_data(sharding, local_data, global_dims)));
}

Array with_sharding_constraint(const Array& x, const Sharding& sharding) {
  if (!x.valid()) throw InvalidArgument("[with_sharding_constraint] the Array is empty (default-constructed)");
  if (!in_trace()) {
    if (sharding.spec().has_unconstrained()) {
      throw InvalidArgument(absl::StrCat("[with_sharding_constraint] outside jit the sharding must be fully "
                                         "specified; found ", sharding.spec().to_string()));
    }
    return device_put(x, sharding);
  }
  if (sharding.is_single_device()) {
    throw InvalidArgument(absl::StrCat("[with_sharding_constraint] inside jit the sharding must be a "
                                       "NamedSharding; found ", sharding.to_string()));
  }
  const MeshAxes& axes = sharding.mesh().axes();
  std::vector<int64_t> dims;
  for (const DimExpr& d : x.shape()) {
    auto v = d.to_int();
    dims.push_back(v.ok() ? *v : 0);
  }
  if (is_static(x.shape())) {
    throw_if_error(validate_spec(sharding.spec(), axes, dims, "with_sharding_constraint", /*allow_unconstrained=*/true));
  }
  detail::note_trace_mesh(sharding.mesh(), "with_sharding_constraint");
  ir::Attrs attrs;
  attrs.set("sharding", encode_spec(sharding.spec(), axes));
  attrs.set("mesh_shape", axes.sizes);
  return bind(ir::OpKind::kShardingConstraint, {x}, std::move(attrs));
}

std::string visualize_array_sharding(const Array& x) {
  if (x.is_tracer()) {
    throw InvalidArgument("[visualize_array_sharding] expected a concrete array, found a tracer (call it outside jit)");
  }
  const std::vector<int64_t> dims = x.dims();
  return visualize_sharding(dims, x.sharding());
}

}  // namespace mcx
