// Array: the one value type users hold.
//
// An Array is a cheap-to-copy handle (a shared_ptr to an immutable implementation, like
// mlx::core::array). It is either
//  - concrete: an abstract value plus runtime data (ArrayValue: shards, each a Buffer on a Device), or
//  - a tracer: a symbolic value inside a jit/grad/trace; ops on it are recorded into that trace
//    (dispatch.h) instead of being computed.
// Arrays are immutable; "updating" an array (x += y) rebinds the handle to a new array.
//
// Weak types (as in JAX): a scalar made implicitly from a C++ number (`x * 2.0`, `maximum(x, 0)`) is
// weakly typed and takes the dtype of the strongly typed operand it meets, so `x * 2.0` keeps x's f32 and
// `i * 2` keeps i's u8. Alone, a weak float scalar is f32 and a weak integer is i32. Explicit
// constructors (mcx::array(2.0) is f64, Array(Buffer)) are strongly typed.
//
// Thread-safety: an Array may be copied and read from many threads. A tracer belongs to the trace (and
// thread) that created it; using it after that trace ended throws an "escaped tracer" error.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/core/error.h"
#include "mcx/core/shape.h"
#include "mcx/runtime/array_value.h"

namespace mcx {

// Thrown where a concrete value is needed but the Array is an abstract tracer (to_host/item/operator bool
// inside jit or grad, e.g. `if (x > 0)` in a jitted function). The message names the tracer's type, the
// trace and what to do instead, like JAX's ConcretizationTypeError.
class ConcretizationError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

namespace detail {
struct ArrayImpl;
class TraceContext;
}  // namespace detail

// The C++ scalar types an Array can be made from implicitly (weakly typed).
template <typename T>
concept ArrayScalar = std::is_arithmetic_v<T>;

class Array {
 public:
  // An empty handle (valid() is false); only useful as a placeholder in containers.
  Array() = default;
  // A concrete array holding buffer (shared, not copied) on the default device.
  explicit Array(Buffer buffer);
  explicit Array(ArrayValue value);
  // A weakly typed scalar: floating -> f32, integral -> i32, bool -> bool (see above).
  template <ArrayScalar T>
  Array(T value)  // NOLINT: implicit on purpose, like Python scalars in JAX
      : Array(make_weak_scalar(static_cast<double>(value),
                               std::is_same_v<T, bool>        ? DType::kBool
                               : std::is_floating_point_v<T> ? DType::kFloat32
                                                              : DType::kInt32)) {}

  bool valid() const { return impl_ != nullptr; }
  bool is_tracer() const;
  bool weak_type() const;

  const AbstractValue& aval() const;
  DType dtype() const { return aval().dtype; }
  const Shape& shape() const { return aval().shape; }
  int ndim() const { return aval().rank(); }
  // Concrete dims / element count; InvalidArgument naming the symbolic dimension when the shape is not
  // static (only tracers of mcx::trace with symbolic shapes have symbolic dims).
  std::vector<int64_t> dims() const;
  int64_t dim(int axis) const;  // negative axes count from the end
  int64_t size() const;

  // Concrete data. Throw ConcretizationError for tracers and an "escaped tracer" error for tracers whose
  // trace ended. to_host shares storage (no copy); to_vector converts elements to T.
  Buffer to_host() const;
  const ArrayValue& value() const;
  template <typename T>
  std::vector<T> to_vector() const;
  // The only element of a size-1 array converted to T; InvalidArgument for other sizes.
  template <typename T>
  T item() const;
  // Truth value of a size-1 array (so `if (x > 0)` works eagerly and fails clearly under jit).
  explicit operator bool() const;

  // Placement (concrete arrays only; tracers throw ConcretizationError). See placement.h.
  const Sharding& sharding() const;
  // One entry per shard this process holds, in the sharding's device order.
  std::vector<struct ArrayShard> addressable_shards() const;
  // Placed explicitly (device_put, jit with shardings, computations on committed arrays): computations
  // run where it is instead of moving it (jax.Array.committed).
  bool committed() const;
  bool is_fully_addressable() const;
  bool is_fully_replicated() const;
  // Blocks until every addressable shard is computed (default_device_deadline()); throws the first
  // error raised on a device stream, which names the failing op and device. Returns *this.
  const Array& block_until_ready() const;

  // "f32[2,3]{1, 2, 3, 4, 5, 6}" for concrete arrays; "Traced<f32[b,3]> in jit of 'loss'" for tracers.
  std::string to_string() const;

  // Compound assignment rebinds this handle to the result (ops.h).
  Array& operator+=(const Array& other);
  Array& operator-=(const Array& other);
  Array& operator*=(const Array& other);
  Array& operator/=(const Array& other);

  // Internal: the implementation shared by copies. Used by dispatch and tracing.
  const std::shared_ptr<const detail::ArrayImpl>& impl() const { return impl_; }
  explicit Array(std::shared_ptr<const detail::ArrayImpl> impl) : impl_(std::move(impl)) {}

 private:
  static Array make_weak_scalar(double value, DType dtype);
  std::vector<double> to_doubles(const char* api) const;
  // The whole value on the host; a device-to-host transfer (explicit or implicit) for the transfer guard
  // unless the array is still host data.
  Buffer fetch(const char* api, bool is_explicit) const;
  std::shared_ptr<const detail::ArrayImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Array& a);

// One addressable shard of a concrete array: its device, the box of global indices it holds and its data
// as a single-device array on that device.
struct ArrayShard {
  Device device;
  IndexBox index;
  Array data;
};

// Strongly typed constructors: the dtype is the C++ type's (double -> f64, int -> i32, int64_t -> i64).
template <ArrayScalar T>
Array array(T value) {
  return Array(Buffer::scalar<T>(value));
}
// 1-d array from a list: mcx::array({1, 2, 3}) is i32[3].
template <ArrayScalar T>
Array array(std::initializer_list<T> values) {
  return Array(Buffer::from_vector<T>(std::vector<T>(values), {static_cast<int64_t>(values.size())}));
}
// values.size() must equal the product of dims (InvalidArgument naming both otherwise).
template <typename T>
Array array(const std::vector<T>& values, std::vector<int64_t> dims);
template <typename T>
Array array(const std::vector<T>& values) {
  return array(values, {static_cast<int64_t>(values.size())});
}

// ---- template definitions -------------------------------------------------------------------------

namespace detail {
[[noreturn]] void throw_size_mismatch(const char* api, size_t n, const std::vector<int64_t>& dims);
}

template <typename T>
Array array(const std::vector<T>& values, std::vector<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (n != static_cast<int64_t>(values.size())) detail::throw_size_mismatch("array", values.size(), dims);
  return Array(Buffer::from_vector<T>(values, std::move(dims)));
}

template <typename T>
std::vector<T> Array::to_vector() const {
  if constexpr (requires { dtype_of<T>::value; }) {
    if (valid() && !is_tracer() && dtype() == dtype_v<T>) {  // exact copy, no detour through double
      Buffer b = fetch("to_vector", /*is_explicit=*/false);
      return std::vector<T>(b.data<T>(), b.data<T>() + b.num_elements());
    }
  }
  std::vector<double> d = to_doubles("to_vector");
  std::vector<T> out;
  out.reserve(d.size());
  for (double v : d) out.push_back(static_cast<T>(v));
  return out;
}

template <typename T>
T Array::item() const {
  std::vector<double> d = to_doubles("item");
  if (d.size() != 1) {
    throw InvalidArgument("[item] expected an array with exactly one element; found " + aval().to_string());
  }
  return static_cast<T>(d[0]);
}

}  // namespace mcx
