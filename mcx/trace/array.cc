#include "mcx/trace/array.h"

#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/runtime/stream.h"
#include "mcx/runtime/transfer.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/trace_state.h"

namespace mcx {
namespace detail {

std::shared_ptr<const ArrayImpl> make_concrete(ArrayValue value, bool weak) {
  auto impl = std::make_shared<ArrayImpl>();
  impl->aval = value.aval;
  impl->weak = weak;
  impl->value = std::move(value);
  return impl;
}

void throw_size_mismatch(const char* api, size_t n, const std::vector<int64_t>& dims) {
  throw InvalidArgument(absl::StrCat("[", api, "] ", n, " values do not fill dims [", absl::StrJoin(dims, ","),
                                     "]"));
}

}  // namespace detail

namespace {

const detail::ArrayImpl& checked(const std::shared_ptr<const detail::ArrayImpl>& impl, const char* api) {
  if (!impl) throw InvalidArgument(absl::StrCat("[", api, "] the Array is empty (default-constructed)"));
  return *impl;
}

// The ConcretizationError (or escaped-tracer error) for reading a tracer's value.
[[noreturn]] void throw_concretization(const detail::ArrayImpl& impl, const char* api) {
  if (!impl.trace->active()) detail::throw_escaped(impl, api);
  throw ConcretizationError(absl::StrCat(
      "[", api, "] abstract tracer value encountered where a concrete value is expected: ",
      impl.aval.to_string(), " traced in ", impl.trace->what(),
      ". The value depends on the function's traced arguments, so it is unknown while tracing; use "
      "mcx::where instead of if/?: on traced values, pass the value as a static (non-Array) argument, or "
      "compute it outside the traced function"));
}

}  // namespace

namespace {
ArrayValue host_value(Buffer buffer) {
  ArrayValue v = ArrayValue::single(std::move(buffer));
  v.host_data = true;
  return v;
}
}  // namespace

Array::Array(Buffer buffer) : impl_(detail::make_concrete(host_value(std::move(buffer)))) {}
Array::Array(ArrayValue value) : impl_(detail::make_concrete(std::move(value))) {}

Array Array::make_weak_scalar(double value, DType dtype) {
  Buffer b = dispatch_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      return Buffer::scalar<T>(T(static_cast<float>(value)));
    } else {
      return Buffer::scalar<T>(static_cast<T>(value));
    }
  });
  auto impl = std::make_shared<detail::ArrayImpl>();
  impl->aval = b.abstract_value();
  impl->weak = true;
  impl->literal = value;
  impl->value = ArrayValue::single(std::move(b));
  return Array(std::shared_ptr<const detail::ArrayImpl>(std::move(impl)));
}

bool Array::is_tracer() const { return checked(impl_, "is_tracer").is_tracer(); }
bool Array::weak_type() const { return checked(impl_, "weak_type").weak; }
const AbstractValue& Array::aval() const { return checked(impl_, "aval").aval; }

std::vector<int64_t> Array::dims() const {
  auto dims = to_concrete(shape());
  if (!dims.ok()) throw InvalidArgument(absl::StrCat("[dims] ", dims.status().message()));
  return *std::move(dims);
}

int64_t Array::dim(int axis) const {
  int r = ndim();
  int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) {
    throw InvalidArgument(absl::StrCat("[dim] axis ", axis, " is out of range for ", aval().to_string()));
  }
  auto v = shape()[a].to_int();
  if (!v.ok()) throw InvalidArgument(absl::StrCat("[dim] ", v.status().message()));
  return *v;
}

int64_t Array::size() const {
  auto n = num_elements(shape()).to_int();
  if (!n.ok()) throw InvalidArgument(absl::StrCat("[size] ", n.status().message()));
  return *n;
}

const ArrayValue& Array::value() const {
  const detail::ArrayImpl& impl = checked(impl_, "value");
  if (impl.is_tracer()) throw_concretization(impl, "value");
  return *impl.value;
}

Buffer Array::fetch(const char* api, bool is_explicit) const {
  const detail::ArrayImpl& impl = checked(impl_, api);
  if (impl.is_tracer()) throw_concretization(impl, api);
  const ArrayValue& v = *impl.value;
  if (v.host_data || impl.literal) return value_or_throw(v.to_buffer());
  return value_or_throw(fetch_to_host(v, is_explicit, api));
}

Buffer Array::to_host() const { return fetch("to_host", /*is_explicit=*/true); }

std::vector<double> Array::to_doubles(const char* api) const { return fetch(api, false).to_doubles(); }

const Sharding& Array::sharding() const { return value().sharding; }
bool Array::committed() const { return value().committed; }
bool Array::is_fully_addressable() const { return sharding().is_fully_addressable(); }
bool Array::is_fully_replicated() const { return sharding().is_fully_replicated(); }

std::vector<ArrayShard> Array::addressable_shards() const {
  const ArrayValue& v = value();
  std::vector<ArrayShard> out;
  out.reserve(v.shards.size());
  for (const Shard& s : v.shards) {
    ArrayValue one;
    one.aval = AbstractValue{v.aval.dtype, concrete_shape(s.index.shape())};
    one.sharding = SingleDeviceSharding(s.device);
    one.shards.push_back(Shard{s.device, full_box(s.index.shape()), s.data});
    one.committed = true;
    out.push_back(ArrayShard{s.device, s.index, Array(std::move(one))});
  }
  return out;
}

const Array& Array::block_until_ready() const {
  throw_if_error(value().block_until_ready(default_device_deadline()));
  return *this;
}

Array::operator bool() const {
  const detail::ArrayImpl& impl = checked(impl_, "bool");
  if (impl.is_tracer()) throw_concretization(impl, "bool");
  const Buffer b = fetch("bool", false);
  if (b.num_elements() != 1) {
    throw InvalidArgument(absl::StrCat("[bool] the truth value of an array with more than one element is "
                                       "ambiguous; found ", impl.aval.to_string(), "; use all()/any() reductions"));
  }
  return b.element_as_double(0) != 0.0;
}

std::string Array::to_string() const {
  if (!impl_) return "Array(empty)";
  if (impl_->is_tracer()) {
    return absl::StrCat("Traced<", impl_->aval.to_string(), impl_->weak ? " weak" : "", "> in ",
                        impl_->trace->what(), impl_->trace->active() ? "" : " (escaped)");
  }
  return fetch("print", false).to_string();
}

std::ostream& operator<<(std::ostream& os, const Array& a) { return os << a.to_string(); }

Array& Array::operator+=(const Array& other) { return *this = *this + other; }
Array& Array::operator-=(const Array& other) { return *this = *this - other; }
Array& Array::operator*=(const Array& other) { return *this = *this * other; }
Array& Array::operator/=(const Array& other) { return *this = *this / other; }

}  // namespace mcx
