/*
 * nx_hal.hpp -- a header-only C++17 API over the nx_hal C ABI and its loader.
 *
 *   nxhal::Plugin plugin = nxhal::Plugin::open_by_name("npu");
 *   nxhal::Client client = plugin.create_client();
 *   nxhal::Device device = client.device(0);
 *   nxhal::Executable exe = device.compile("onnx", model_bytes);
 *   nxhal::Buffer input = device.from_host(values, {1, 64});
 *   std::vector<float> out = exe.execute({&input})[0].to_host<float>();
 *
 * Rules this header follows:
 *  - Owners (Plugin, Client, Buffer, Executable, Event, DlpackTensor) are
 *    move-only RAII types; a moved-from owner is empty and safe to destroy or
 *    assign to. Destructors never throw.
 *  - Device is a non-owning view of a handle the client owns. Buffers,
 *    executables and events keep their client alive, so the plugin client is
 *    destroyed only after the Client and everything made from it are gone:
 *    the C ABI's "destroy the client last" holds whatever order C++ objects
 *    die in.
 *  - Every failure is an nxhal::Error carrying the status code; the C status
 *    is freed by the library that made it (the table's status_free for plugin
 *    statuses, nxhal_loader_status_free for the loader's).
 *  - Every struct handed to the C side has struct_size set from sizeof.
 *  - Thread safety is the C ABI's: const member functions map to calls the
 *    header declares thread-safe; destroying or moving an object is not
 *    thread-safe with its other uses.
 */
#ifndef NX_HAL_NX_HAL_HPP_
#define NX_HAL_NX_HAL_HPP_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "nx_hal/nx_hal.h"
#include "nx_hal/nx_hal_loader.h"

namespace nxhal {

using StatusCode = nxhal_status_code_t;
using Dtype = nxhal_dtype_t;
using DeviceKind = nxhal_device_kind_t;
/* A tensor shape: one extent per dimension, -1 for a dynamic one. */
using Shape = std::vector<int64_t>;

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" outside the enum. Static string. */
inline const char* code_name(StatusCode code) noexcept {
  return nxhal_status_code_name(code);
}

/* A failed nx_hal call: what() is "<context>: <CODE>: <message>". Thread-safe to read. */
class Error : public std::runtime_error {
 public:
  /* An error with `code` (not NXHAL_OK) and the status's `message`. */
  Error(StatusCode code, const std::string& message, const std::string& context = std::string())
      : std::runtime_error((context.empty() ? std::string() : context + ": ") + code_name(code) +
                           ": " + message),
        code_(code),
        message_(message) {}

  /* The status code. */
  StatusCode code() const noexcept { return code_; }
  /* The status message alone, without context or code name. */
  const std::string& message() const noexcept { return message_; }

 private:
  StatusCode code_;
  std::string message_;
};

namespace detail {

/* Frees a status with the function that matches its origin, even if building
 * the exception throws. */
struct StatusGuard {
  nxhal_status_t* status;
  void (*free_fn)(nxhal_status_t*);
  ~StatusGuard() { free_fn(status); }
};

/* Throws the plugin status `status` (non-NULL) as an Error; frees it with the
 * table's status_free. */
[[noreturn]] inline void throw_plugin_status(const nxhal_api_t* api, nxhal_status_t* status,
                                             const char* context) {
  StatusGuard guard{status, api->status_free};
  const char* message = api->status_message(status);
  throw Error(api->status_code(status), message != nullptr ? message : "", context);
}

/* Throws if a plugin call failed. */
inline void check(const nxhal_api_t* api, nxhal_status_t* status, const char* context) {
  if (status != nullptr) throw_plugin_status(api, status, context);
}

/* Throws if a loader call failed; frees with nxhal_loader_status_free. */
inline void check_loader(nxhal_status_t* status, const char* context) {
  if (status == nullptr) return;
  StatusGuard guard{status, nxhal_loader_status_free};
  const char* message = nxhal_loader_status_message(status);
  throw Error(nxhal_loader_status_code(status), message != nullptr ? message : "", context);
}

/* A zero-filled C struct with struct_size = sizeof(T). */
template <typename T>
T sized() noexcept {
  T value;
  std::memset(&value, 0, sizeof(value));
  value.struct_size = sizeof(T);
  return value;
}

/* `text`, or "" for a string a plugin left NULL. */
inline std::string text(const char* value) {
  return value != nullptr ? value : "";
}

/* A borrowed dims array as a Shape; empty for rank <= 0. */
inline Shape shape_of(int64_t rank, const int64_t* dims) {
  if (rank <= 0 || dims == nullptr) return Shape();
  return Shape(dims, dims + rank);
}

/* Owns the plugin's client handle; shared by Client and what it makes. */
struct ClientHandle {
  const nxhal_api_t* api;
  nxhal_client_t* client;
  ClientHandle(const nxhal_api_t* a, nxhal_client_t* c) noexcept : api(a), client(c) {}
  ClientHandle(const ClientHandle&) = delete;
  ClientHandle& operator=(const ClientHandle&) = delete;
  ~ClientHandle() { api->client_destroy(client); }
};

/* Move-only owner of one handle freed through a table entry; keeps the
 * client alive. Base of Buffer, Executable and Event. */
template <typename Handle, void (*nxhal_api_t::*Destroy)(Handle*)>
class Owner {
 public:
  /* An empty owner. */
  Owner() noexcept = default;
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  /* Takes `other`'s handle; `other` becomes empty. */
  Owner(Owner&& other) noexcept
      : api_(other.api_),
        handle_(std::exchange(other.handle_, nullptr)),
        client_(std::move(other.client_)) {}
  /* Frees the current handle, then takes `other`'s. */
  Owner& operator=(Owner&& other) noexcept {
    if (this != &other) {
      reset();
      api_ = other.api_;
      handle_ = std::exchange(other.handle_, nullptr);
      client_ = std::move(other.client_);
    }
    return *this;
  }
  ~Owner() { reset(); }

  /* The C handle, still owned by this object; NULL when empty. */
  Handle* get() const noexcept { return handle_; }
  /* The plugin's function table; NULL when never set. */
  const nxhal_api_t* api() const noexcept { return api_; }
  /* True when it holds a handle. */
  explicit operator bool() const noexcept { return handle_ != nullptr; }
  /* Gives up ownership: the caller frees the handle through api(), before the
   * client is destroyed. */
  Handle* release() noexcept {
    client_.reset();
    return std::exchange(handle_, nullptr);
  }
  /* Frees the handle (if any) and becomes empty. */
  void reset() noexcept {
    if (handle_ != nullptr) (api_->*Destroy)(std::exchange(handle_, nullptr));
    client_.reset();
  }

 protected:
  Owner(const nxhal_api_t* api, Handle* handle, std::shared_ptr<ClientHandle> client) noexcept
      : api_(api), handle_(handle), client_(std::move(client)) {}
  /* The handle, or INVALID_ARGUMENT naming `what` when the owner is empty. */
  Handle* checked(const char* what) const {
    if (handle_ == nullptr) {
      throw Error(NXHAL_INVALID_ARGUMENT, std::string("empty nxhal::") + what + " (moved from?)");
    }
    return handle_;
  }
  const std::shared_ptr<ClientHandle>& client() const noexcept { return client_; }

 private:
  const nxhal_api_t* api_ = nullptr;
  Handle* handle_ = nullptr;
  std::shared_ptr<ClientHandle> client_;
};

}  // namespace detail

/* ------------------------------------------------------------------------ */
/* Spans and element types                                                  */
/* ------------------------------------------------------------------------ */

/* A non-owning view of `size` contiguous T (C++17 has no std::span). The
 * viewed memory must outlive every use of the span. */
template <typename T>
class Span {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  /* An empty span. */
  constexpr Span() noexcept = default;
  /* `size` elements starting at `data`. */
  constexpr Span(T* data, size_t size) noexcept : data_(data), size_(size) {}
  /* A whole array. */
  template <size_t N>
  constexpr Span(T (&array)[N]) noexcept : data_(array), size_(N) {}  // NOLINT: implicit
  /* A whole std::array (const T views a const array too). */
  template <typename U, size_t N,
            typename = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  constexpr Span(std::array<U, N>& array) noexcept : data_(array.data()), size_(N) {}  // NOLINT
  template <typename U, size_t N,
            typename = std::enable_if_t<std::is_convertible_v<const U (*)[], T (*)[]>>>
  constexpr Span(const std::array<U, N>& array) noexcept  // NOLINT: implicit
      : data_(array.data()), size_(N) {}
  /* A whole vector; the vector must not reallocate while the span is used. */
  template <typename U, typename A,
            typename = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  Span(std::vector<U, A>& vector) noexcept  // NOLINT: implicit
      : data_(vector.data()), size_(vector.size()) {}
  template <typename U, typename A,
            typename = std::enable_if_t<std::is_convertible_v<const U (*)[], T (*)[]>>>
  Span(const std::vector<U, A>& vector) noexcept  // NOLINT: implicit
      : data_(vector.data()), size_(vector.size()) {}
  /* Span<T> converts to Span<const T>. */
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  constexpr Span(const Span<U>& other) noexcept  // NOLINT: implicit
      : data_(other.data()), size_(other.size()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  /* Element `index` (< size(), unchecked). */
  constexpr T& operator[](size_t index) const noexcept { return data_[index]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

/* A non-owning view of bytes: any Span, vector or string of trivially
 * copyable values, or a pointer and a size. */
class Bytes {
 public:
  /* No bytes. */
  constexpr Bytes() noexcept = default;
  /* `size` bytes at `data`. */
  constexpr Bytes(const void* data, size_t size) noexcept : data_(data), size_(size) {}
  /* The bytes a span of trivially copyable values occupies. */
  template <typename T, typename = std::enable_if_t<std::is_trivially_copyable_v<T>>>
  constexpr Bytes(Span<T> span) noexcept  // NOLINT: implicit
      : data_(span.data()), size_(span.size_bytes()) {}
  template <typename T, typename A, typename = std::enable_if_t<std::is_trivially_copyable_v<T>>>
  Bytes(const std::vector<T, A>& vector) noexcept  // NOLINT: implicit
      : data_(vector.data()), size_(vector.size() * sizeof(T)) {}
  /* The characters of a string (no terminating NUL). */
  Bytes(const std::string& string) noexcept  // NOLINT: implicit
      : data_(string.data()), size_(string.size()) {}
  constexpr Bytes(std::string_view string) noexcept  // NOLINT: implicit
      : data_(string.data()), size_(string.size()) {}

  constexpr const void* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
};

/* A tag: the bytes come from a source the caller trusts, so
 * Device::deserialize(data, nxhal::trusted) loads a serialized executable
 * this user's key did not seal (Python's trusted=True). A serialized
 * executable is native code: pass it only for bytes you would run. */
struct Trusted {
  explicit constexpr Trusted(int) noexcept {}
};
inline constexpr Trusted trusted{0};

/* The dtype of a C++ element type: float, double, bool and the fixed-width
 * integers. No default: using another type is a compile error. f16 and bf16
 * have no C++17 type; pass their bits with an explicit dtype. */
template <typename T>
struct dtype_traits;
template <>
struct dtype_traits<float> {
  static constexpr Dtype value = NXHAL_DTYPE_F32;
};
template <>
struct dtype_traits<double> {
  static constexpr Dtype value = NXHAL_DTYPE_F64;
};
template <>
struct dtype_traits<int8_t> {
  static constexpr Dtype value = NXHAL_DTYPE_I8;
};
template <>
struct dtype_traits<int16_t> {
  static constexpr Dtype value = NXHAL_DTYPE_I16;
};
template <>
struct dtype_traits<int32_t> {
  static constexpr Dtype value = NXHAL_DTYPE_I32;
};
template <>
struct dtype_traits<int64_t> {
  static constexpr Dtype value = NXHAL_DTYPE_I64;
};
template <>
struct dtype_traits<uint8_t> {
  static constexpr Dtype value = NXHAL_DTYPE_U8;
};
template <>
struct dtype_traits<uint16_t> {
  static constexpr Dtype value = NXHAL_DTYPE_U16;
};
template <>
struct dtype_traits<uint32_t> {
  static constexpr Dtype value = NXHAL_DTYPE_U32;
};
template <>
struct dtype_traits<uint64_t> {
  static constexpr Dtype value = NXHAL_DTYPE_U64;
};
template <>
struct dtype_traits<bool> {
  static constexpr Dtype value = NXHAL_DTYPE_BOOL;
};

/* The dtype of T (see dtype_traits). */
template <typename T>
inline constexpr Dtype dtype_of = dtype_traits<std::remove_cv_t<T>>::value;

/* "f32", "bf16", "bool", ...; "invalid" for an unknown dtype. Static string. */
inline const char* dtype_name(Dtype dtype) noexcept {
  switch (dtype) {
    case NXHAL_DTYPE_F16: return "f16";
    case NXHAL_DTYPE_BF16: return "bf16";
    case NXHAL_DTYPE_F32: return "f32";
    case NXHAL_DTYPE_F64: return "f64";
    case NXHAL_DTYPE_I8: return "i8";
    case NXHAL_DTYPE_I16: return "i16";
    case NXHAL_DTYPE_I32: return "i32";
    case NXHAL_DTYPE_I64: return "i64";
    case NXHAL_DTYPE_U8: return "u8";
    case NXHAL_DTYPE_BOOL: return "bool";
    case NXHAL_DTYPE_U16: return "u16";
    case NXHAL_DTYPE_U32: return "u32";
    case NXHAL_DTYPE_U64: return "u64";
    case NXHAL_DTYPE_INVALID: break;
  }
  return "invalid";
}

/* "cpu", "gpu", "tpu", "npu", "ipu", "other"; static string. */
inline const char* kind_name(DeviceKind kind) noexcept {
  switch (kind) {
    case NXHAL_DEVICE_CPU: return "cpu";
    case NXHAL_DEVICE_GPU: return "gpu";
    case NXHAL_DEVICE_TPU: return "tpu";
    case NXHAL_DEVICE_NPU: return "npu";
    case NXHAL_DEVICE_IPU: return "ipu";
    case NXHAL_DEVICE_OTHER: break;
  }
  return "other";
}

/* ------------------------------------------------------------------------ */
/* Typed values: options in, attributes out                                 */
/* ------------------------------------------------------------------------ */

/* One typed value; the alternatives follow nxhal_value_type_t's order. */
using Value = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;
static_assert(
    std::variant_size_v<Value> == NXHAL_VALUE_INT64_LIST + 1 &&
        std::is_same_v<std::variant_alternative_t<NXHAL_VALUE_STRING, Value>, std::string>,
    "Value's alternatives follow nxhal_value_type_t");

/* A name and a typed value, built from a C++ value: any integer (int64),
 * floating point (double), bool, string, or list of int64. */
class Option {
 public:
  /* An integer option; INVALID_ARGUMENT when it does not fit in int64. */
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Option(std::string name, T value) : name_(std::move(name)), value_(to_int64(name_, value)) {}
  /* A floating-point option. */
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Option(std::string name, T value) : name_(std::move(name)), value_(static_cast<double>(value)) {}
  /* A bool option. */
  Option(std::string name, bool value) : name_(std::move(name)), value_(value) {}
  /* A string option. */
  Option(std::string name, std::string value) : name_(std::move(name)), value_(std::move(value)) {}
  Option(std::string name, const char* value)
      : name_(std::move(name)), value_(std::string(value)) {}
  /* An int64 list option. */
  Option(std::string name, std::vector<int64_t> value)
      : name_(std::move(name)), value_(std::move(value)) {}
  Option(std::string name, std::initializer_list<int64_t> value)
      : name_(std::move(name)), value_(std::vector<int64_t>(value)) {}

  const std::string& name() const noexcept { return name_; }
  const Value& value() const noexcept { return value_; }

  /* The C form; its strings and list point into this Option, valid while it
   * lives unchanged. */
  nxhal_option_t to_c() const noexcept {
    nxhal_option_t option = detail::sized<nxhal_option_t>();
    option.name = name_.c_str();
    option.type = static_cast<nxhal_value_type_t>(value_.index());
    if (const auto* i = std::get_if<int64_t>(&value_)) option.int64_value = *i;
    if (const auto* d = std::get_if<double>(&value_)) option.double_value = *d;
    if (const auto* b = std::get_if<bool>(&value_)) option.bool_value = *b ? 1 : 0;
    if (const auto* s = std::get_if<std::string>(&value_)) option.string_value = s->c_str();
    if (const auto* l = std::get_if<std::vector<int64_t>>(&value_)) {
      option.int64_list = l->data();
      option.int64_list_size = l->size();
    }
    return option;
  }

 private:
  template <typename T>
  static int64_t to_int64(const std::string& name, T value) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (value > static_cast<T>(std::numeric_limits<int64_t>::max())) {
        throw Error(NXHAL_INVALID_ARGUMENT,
                    "option '" + name + "': " + std::to_string(value) + " does not fit in int64");
      }
    }
    return static_cast<int64_t>(value);
  }

  std::string name_;
  Value value_;
};

/* An ordered list of options: Options{{"streams", 2}, {"target", "CPU"}}.
 * Not thread-safe to change while a call reads it. */
class Options {
 public:
  Options() = default;
  Options(std::initializer_list<Option> options) : options_(options) {}

  /* Appends an option; returns *this for chaining. */
  template <typename T>
  Options& set(std::string name, T&& value) {
    options_.emplace_back(std::move(name), std::forward<T>(value));
    return *this;
  }
  const std::vector<Option>& items() const noexcept { return options_; }
  size_t size() const noexcept { return options_.size(); }
  bool empty() const noexcept { return options_.empty(); }

  /* The C array; valid while this Options lives unchanged. */
  std::vector<nxhal_option_t> to_c() const {
    std::vector<nxhal_option_t> result;
    result.reserve(options_.size());
    for (const Option& option : options_) result.push_back(option.to_c());
    return result;
  }

 private:
  std::vector<Option> options_;
};

/* A device's free-form attribute, copied out of the device. */
struct Attribute {
  std::string name;
  Value value;
};

/* ------------------------------------------------------------------------ */
/* Descriptions                                                             */
/* ------------------------------------------------------------------------ */

/* What a plugin says about itself (copied out). */
struct PluginInfo {
  std::string name;
  std::string vendor;
  std::string plugin_version;
  std::string sdk_version;
  uint32_t abi_major = 0;
  uint32_t abi_minor = 0;
};

/* A device's attributes (copied out). */
struct DeviceInfo {
  DeviceKind kind = NXHAL_DEVICE_OTHER;
  std::string vendor;
  std::string name;
  uint64_t memory_bytes = 0;
  int64_t compute_units = 0;
  std::vector<std::string> formats;
  std::string compat_key;

  /* True when compile() takes programs in `format`. */
  bool accepts(std::string_view format) const noexcept {
    for (const std::string& f : formats) {
      if (f == format) return true;
    }
    return false;
  }
};

/* A device's memory accounting. */
struct MemoryStats {
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;
  uint64_t bytes_limit = 0; /* 0: no limit */
};

/* A buffer's dtype, shape and size (copied out). */
struct BufferInfo {
  Dtype dtype = NXHAL_DTYPE_INVALID;
  Shape shape;
  uint64_t size_bytes = 0;
  bool is_zero_copy = false;
};

/* One input or output of an executable (copied out). */
struct IoInfo {
  std::string name;
  Dtype dtype = NXHAL_DTYPE_INVALID;
  int64_t rank = -1;         /* -1: unknown */
  Shape shape;               /* -1 for a dynamic dimension */
  int64_t device_index = -1; /* -1: the executable's own device */
};

/* A program to compile: a format name and its bytes (borrowed until compile
 * returns); `extra` holds the second file of a two-file format (an
 * openvino-ir's weights), empty for the others. */
struct Program {
  std::string format;
  Bytes data;
  Bytes extra;
};

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

/* Owns an nxhal event (completion of an asynchronous transfer or run).
 * Thread-safe: ready, await and on_ready; destroying is not. */
class Event : public detail::Owner<nxhal_event_t, &nxhal_api_t::event_destroy> {
 public:
  Event() noexcept = default;
  /* Adopts `event` (caller gives up ownership); `client` is kept alive. */
  Event(const nxhal_api_t* api, nxhal_event_t* event,
        std::shared_ptr<detail::ClientHandle> client = nullptr) noexcept
      : Owner(api, event, std::move(client)) {}

  /* True once the event has completed, either way. */
  bool ready() const {
    int32_t value = 0;
    auto* handle = checked("Event");
    detail::check(api(), api()->event_is_ready(handle, &value), "event_is_ready");
    return value != 0;
  }
  /* Waits until completion; throws the event's error if it failed. */
  void await() const {
    auto* handle = checked("Event");
    detail::check(api(), api()->event_await(handle, NXHAL_WAIT_FOREVER), "event_await");
  }
  /* Waits up to `timeout`; false if still pending, throws the event's error
   * if it failed. */
  bool await_for(std::chrono::nanoseconds timeout) const {
    int64_t ns = timeout.count() < 0 ? 0 : static_cast<int64_t>(timeout.count());
    auto* handle = checked("Event");
    nxhal_status_t* status = api()->event_await(handle, ns);
    if (status != nullptr && api()->status_code(status) == NXHAL_DEADLINE_EXCEEDED) {
      api()->status_free(status);
      return false;
    }
    detail::check(api(), status, "event_await");
    return true;
  }
  /* Calls `callback` once on completion, on any thread (at once if already
   * complete), with nullptr on success or the error. One per event. The
   * callback must not throw: an exception escaping it calls std::terminate. */
  void on_ready(std::function<void(const Error*)> callback) const {
    auto owned = std::make_unique<Callback>(Callback{api(), std::move(callback)});
    auto* handle = checked("Event");
    nxhal_status_t* status = api()->event_on_ready(handle, &trampoline, owned.get());
    detail::check(api(), status, "event_on_ready");
    owned.release();  // the trampoline deletes it
  }

 private:
  struct Callback {
    const nxhal_api_t* api;
    std::function<void(const Error*)> function;
  };
  static void trampoline(nxhal_status_t* status, void* user_data) noexcept {
    std::unique_ptr<Callback> callback(static_cast<Callback*>(user_data));
    if (status == nullptr) {
      callback->function(nullptr);
      return;
    }
    detail::StatusGuard guard{status, callback->api->status_free};
    const char* message = callback->api->status_message(status);
    Error error(callback->api->status_code(status), message != nullptr ? message : "", "event");
    callback->function(&error);
  }
};

/* ------------------------------------------------------------------------ */
/* Buffers                                                                  */
/* ------------------------------------------------------------------------ */

/* Owns a DLPack tensor; destruction calls its deleter. Move-only. */
class DlpackTensor {
 public:
  DlpackTensor() noexcept = default;
  /* Adopts `tensor` (caller gives up ownership). */
  explicit DlpackTensor(nxhal_dlpack_managed_tensor_t* tensor) noexcept : tensor_(tensor) {}
  DlpackTensor(const DlpackTensor&) = delete;
  DlpackTensor& operator=(const DlpackTensor&) = delete;
  DlpackTensor(DlpackTensor&& other) noexcept : tensor_(std::exchange(other.tensor_, nullptr)) {}
  DlpackTensor& operator=(DlpackTensor&& other) noexcept {
    if (this != &other) {
      reset();
      tensor_ = std::exchange(other.tensor_, nullptr);
    }
    return *this;
  }
  ~DlpackTensor() { reset(); }

  /* The tensor, still owned by this object. */
  nxhal_dlpack_managed_tensor_t* get() const noexcept { return tensor_; }
  explicit operator bool() const noexcept { return tensor_ != nullptr; }
  /* Gives up ownership: the caller calls the deleter. */
  nxhal_dlpack_managed_tensor_t* release() noexcept { return std::exchange(tensor_, nullptr); }
  /* Calls the deleter (if any) and becomes empty. */
  void reset() noexcept {
    nxhal_dlpack_managed_tensor_t* tensor = std::exchange(tensor_, nullptr);
    if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
  }

 private:
  nxhal_dlpack_managed_tensor_t* tensor_ = nullptr;
};

/* Owns a device buffer. Thread-safe: every const member; destroying is not. */
class Buffer : public detail::Owner<nxhal_buffer_t, &nxhal_api_t::buffer_destroy> {
 public:
  Buffer() noexcept = default;
  /* Adopts `buffer` (caller gives up ownership); `client` is kept alive. */
  Buffer(const nxhal_api_t* api, nxhal_buffer_t* buffer,
         std::shared_ptr<detail::ClientHandle> client = nullptr) noexcept
      : Owner(api, buffer, std::move(client)) {}

  /* Dtype, shape, size and whether it aliases host memory. */
  BufferInfo info() const {
    nxhal_buffer_info_t c = detail::sized<nxhal_buffer_info_t>();
    auto* handle = checked("Buffer");
    detail::check(api(), api()->buffer_info(handle, &c), "buffer_info");
    BufferInfo info;
    info.dtype = c.dtype;
    info.shape = detail::shape_of(c.rank, c.dims);
    info.size_bytes = c.size_bytes;
    info.is_zero_copy = c.is_zero_copy != 0;
    return info;
  }
  /* Copies the whole buffer into `dst` (its size must equal the buffer's);
   * returns when done. */
  void to_host(void* dst, size_t size_bytes) const {
    auto* handle = checked("Buffer");
    detail::check(api(), api()->buffer_to_host(handle, dst, size_bytes, nullptr), "buffer_to_host");
  }
  /* Copies the buffer into `dst`; returns when done. */
  template <typename T>
  void to_host(Span<T> dst) const {
    static_assert(!std::is_const_v<T>, "to_host writes into dst");
    check_dtype(dtype_of<T>);
    to_host(static_cast<void*>(dst.data()), dst.size_bytes());
  }
  /* The buffer's elements as T (INVALID_ARGUMENT unless T is its dtype). */
  template <typename T>
  std::vector<T> to_host() const {
    static_assert(!std::is_same_v<T, bool>,
                  "std::vector<bool> is packed: use to_host(void*, size)");
    BufferInfo info = this->info();
    check_dtype(dtype_of<T>, info.dtype);
    std::vector<T> result(static_cast<size_t>(info.size_bytes / sizeof(T)));
    to_host(static_cast<void*>(result.data()), result.size() * sizeof(T));
    return result;
  }
  /* Starts a copy into `dst`, which must stay valid until the event completes. */
  Event to_host_async(void* dst, size_t size_bytes) const {
    nxhal_event_t* event = nullptr;
    auto* handle = checked("Buffer");
    detail::check(api(), api()->buffer_to_host(handle, dst, size_bytes, &event), "buffer_to_host");
    return Event(api(), event, client());
  }
  /* Exports the buffer as DLPack; the tensor outlives the buffer.
   * UNIMPLEMENTED where device memory is not host-addressable. */
  DlpackTensor to_dlpack() const {
    nxhal_dlpack_managed_tensor_t* tensor = nullptr;
    auto* handle = checked("Buffer");
    detail::check(api(), api()->buffer_to_dlpack(handle, &tensor), "buffer_to_dlpack");
    return DlpackTensor(tensor);
  }

 private:
  void check_dtype(Dtype wanted) const { check_dtype(wanted, info().dtype); }
  static void check_dtype(Dtype wanted, Dtype actual) {
    if (wanted != actual) {
      throw Error(NXHAL_INVALID_ARGUMENT,
                  std::string("buffer holds ") + dtype_name(actual) + ", not " + dtype_name(wanted),
                  "to_host");
    }
  }
};

/* ------------------------------------------------------------------------ */
/* Executables                                                              */
/* ------------------------------------------------------------------------ */

/* Output buffers of an asynchronous run and the event that says they are ready. */
struct AsyncOutputs;

/* Owns a compiled executable. Thread-safe: every const member (several
 * threads may execute one executable at once); destroying is not. */
class Executable : public detail::Owner<nxhal_executable_t, &nxhal_api_t::executable_destroy> {
 public:
  Executable() noexcept = default;
  /* Adopts `executable` (caller gives up ownership); `client` is kept alive. */
  Executable(const nxhal_api_t* api, nxhal_executable_t* executable,
             std::shared_ptr<detail::ClientHandle> client = nullptr) noexcept
      : Owner(api, executable, std::move(client)) {}

  /* The inputs' names, dtypes and shapes. */
  std::vector<IoInfo> inputs() const { return io(NXHAL_IO_INPUT); }
  /* The outputs' names, dtypes and shapes. */
  std::vector<IoInfo> outputs() const { return io(NXHAL_IO_OUTPUT); }

  /* Runs on the device it was compiled for; returns when done. Inputs are
   * borrowed and must match count, dtypes and shapes (else INVALID_ARGUMENT). */
  std::vector<Buffer> execute(const std::vector<const Buffer*>& inputs) const {
    return run(inputs, nullptr);
  }
  /* The same, for contiguous buffers (a std::vector<Buffer>, say). */
  std::vector<Buffer> execute(Span<const Buffer> inputs) const {
    return run(pointers(inputs), nullptr);
  }
  /* Starts a run; outputs are ready, and inputs may be freed, once the
   * returned event completes. */
  inline AsyncOutputs execute_async(const std::vector<const Buffer*>& inputs) const;

  /* The serialized executable, with its device's compat_key embedded,
   * sealed with this user's key (nxhal_executable_seal): Device::deserialize
   * here, and Device.load_executable in Python, load it without `trusted`.
   * A key that cannot be read or made is FAILED_PRECONDITION. */
  std::vector<uint8_t> serialize() const {
    nxhal_blob_t* blob = nullptr;
    auto* handle = checked("Executable");
    detail::check(api(), api()->executable_serialize(handle, &blob), "executable_serialize");
    std::unique_ptr<nxhal_blob_t, void (*)(nxhal_blob_t*)> owned(blob, api()->blob_free);
    void* sealed = nullptr;
    size_t size = 0;
    detail::check_loader(nxhal_executable_seal(blob->data, blob->size, &sealed, &size),
                         "nxhal_executable_seal");
    std::unique_ptr<void, void (*)(void*)> owned_sealed(sealed, nxhal_loader_free);
    const auto* bytes = static_cast<const uint8_t*>(sealed);
    return std::vector<uint8_t>(bytes, bytes + size);
  }

 private:
  std::vector<IoInfo> io(nxhal_io_kind_t kind) const {
    nxhal_executable_t* handle = checked("Executable");
    size_t count = 0;
    detail::check(api(), api()->executable_io_count(handle, kind, &count), "executable_io_count");
    std::vector<IoInfo> result;
    result.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      nxhal_io_info_t c = detail::sized<nxhal_io_info_t>();
      c.desc.struct_size = sizeof(c.desc);
      c.device_index = -1;  // a 1.0 plugin leaves it there
      detail::check(api(), api()->executable_io_info(handle, kind, i, &c), "executable_io_info");
      IoInfo info;
      info.name = detail::text(c.name);
      info.dtype = c.desc.dtype;
      info.rank = c.desc.rank;
      info.shape = detail::shape_of(c.desc.rank, c.desc.dims);
      info.device_index = c.device_index;
      result.push_back(std::move(info));
    }
    return result;
  }
  static std::vector<const Buffer*> pointers(Span<const Buffer> buffers) {
    std::vector<const Buffer*> result;
    result.reserve(buffers.size());
    for (const Buffer& buffer : buffers) result.push_back(&buffer);
    return result;
  }
  std::vector<Buffer> run(const std::vector<const Buffer*>& inputs, Event* out_event) const {
    nxhal_executable_t* handle = checked("Executable");
    std::vector<nxhal_buffer_t*> raw_inputs;
    raw_inputs.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i] == nullptr || !*inputs[i]) {
        throw Error(NXHAL_INVALID_ARGUMENT,
                    "input " + std::to_string(i) + " is a null or empty buffer", "execute");
      }
      raw_inputs.push_back(inputs[i]->get());
    }
    size_t num_outputs = 0;
    detail::check(api(), api()->executable_io_count(handle, NXHAL_IO_OUTPUT, &num_outputs),
                  "executable_io_count");
    std::vector<nxhal_buffer_t*> raw_outputs(num_outputs, nullptr);
    std::vector<Buffer> outputs;
    outputs.reserve(num_outputs);  // no allocation after the call: nothing can leak
    nxhal_event_t* event = nullptr;
    detail::check(
        api(),
        api()->executable_execute(handle, raw_inputs.data(), raw_inputs.size(), raw_outputs.data(),
                                  raw_outputs.size(), out_event != nullptr ? &event : nullptr),
        "executable_execute");
    if (out_event != nullptr) *out_event = Event(api(), event, client());
    for (nxhal_buffer_t* output : raw_outputs) outputs.emplace_back(api(), output, client());
    return outputs;
  }
};

/* Output buffers of an asynchronous run and the event that says they are ready. */
struct AsyncOutputs {
  std::vector<Buffer> outputs;
  Event ready;
};

inline AsyncOutputs Executable::execute_async(const std::vector<const Buffer*>& inputs) const {
  AsyncOutputs result;
  result.outputs = run(inputs, &result.ready);
  return result;
}

/* ------------------------------------------------------------------------ */
/* Devices                                                                  */
/* ------------------------------------------------------------------------ */

/* A non-owning view of a device owned by its client: copyable, cheap. Using
 * it after the Client and everything made from it are gone is
 * FAILED_PRECONDITION. Thread-safe. */
class Device {
 public:
  Device() noexcept = default;
  /* A view of `device`, owned by the client `client`. */
  Device(nxhal_device_t* device, const std::shared_ptr<detail::ClientHandle>& client) noexcept
      : device_(device), client_(client) {}

  /* The C handle (owned by the client). */
  nxhal_device_t* get() const noexcept { return device_; }
  /* Kind, vendor, name, memory, compute units, accepted formats, compat key. */
  DeviceInfo info() const {
    auto client = lock();
    nxhal_device_info_t c = detail::sized<nxhal_device_info_t>();
    detail::check(client->api, client->api->device_info(device_, &c), "device_info");
    DeviceInfo info;
    info.kind = c.kind;
    info.vendor = detail::text(c.vendor);
    info.name = detail::text(c.name);
    info.memory_bytes = c.memory_bytes;
    info.compute_units = c.compute_units;
    for (size_t i = 0; c.formats != nullptr && i < c.num_formats; ++i) {
      info.formats.push_back(detail::text(c.formats[i]));
    }
    info.compat_key = detail::text(c.compat_key);
    return info;
  }
  /* The free-form typed attributes, copied out. */
  std::vector<Attribute> attributes() const {
    auto client = lock();
    const nxhal_api_t* api = client->api;
    size_t count = 0;
    detail::check(api, api->device_attribute_count(device_, &count), "device_attribute_count");
    std::vector<Attribute> result;
    for (size_t i = 0; i < count; ++i) {
      nxhal_attribute_t c = detail::sized<nxhal_attribute_t>();
      detail::check(api, api->device_attribute(device_, i, &c), "device_attribute");
      Attribute attribute{detail::text(c.name), Value()};
      switch (c.type) {
        case NXHAL_VALUE_INT64: attribute.value = c.int64_value; break;
        case NXHAL_VALUE_DOUBLE: attribute.value = c.double_value; break;
        case NXHAL_VALUE_BOOL: attribute.value = c.bool_value != 0; break;
        case NXHAL_VALUE_STRING: attribute.value = detail::text(c.string_value); break;
        case NXHAL_VALUE_INT64_LIST:
          attribute.value =
              c.int64_list != nullptr
                  ? std::vector<int64_t>(c.int64_list, c.int64_list + c.int64_list_size)
                  : std::vector<int64_t>();
          break;
        default: continue;  // a type newer than this header: skipped
      }
      result.push_back(std::move(attribute));
    }
    return result;
  }
  /* Bytes in use, peak and limit of this device's buffers. */
  MemoryStats memory_stats() const {
    auto client = lock();
    nxhal_memory_stats_t c = detail::sized<nxhal_memory_stats_t>();
    detail::check(client->api, client->api->device_memory_stats(device_, &c),
                  "device_memory_stats");
    return MemoryStats{c.bytes_in_use, c.peak_bytes_in_use, c.bytes_limit};
  }
  /* Caps the bytes this device may hold (0: no cap). */
  void set_memory_limit(uint64_t limit_bytes) const {
    auto client = lock();
    detail::check(client->api, client->api->device_set_memory_limit(device_, limit_bytes),
                  "device_set_memory_limit");
  }

  /* An uninitialised buffer of `dtype` and `shape`. */
  Buffer create_buffer(Dtype dtype, const Shape& shape) const {
    auto client = lock();
    nxhal_tensor_desc_t desc = describe(dtype, shape);
    nxhal_buffer_t* buffer = nullptr;
    detail::check(client->api, client->api->buffer_create(device_, &desc, &buffer),
                  "buffer_create");
    return Buffer(client->api, buffer, client);
  }
  /* A buffer holding a copy of `data`, laid out row-major as `dtype` and
   * `shape` (the sizes must match, else INVALID_ARGUMENT). With
   * NXHAL_HOST_ZERO_COPY in `flags` it may alias `data` instead, which must
   * then stay alive and unchanged until the buffer is destroyed. */
  Buffer from_host(Dtype dtype, const Shape& shape, Bytes data,
                   uint32_t flags = NXHAL_HOST_COPY) const {
    auto client = lock();
    nxhal_tensor_desc_t desc = describe(dtype, shape);
    nxhal_buffer_t* buffer = nullptr;
    detail::check(
        client->api,
        client->api->buffer_from_host(device_, &desc, data.data(), data.size(), flags, &buffer),
        "buffer_from_host");
    return Buffer(client->api, buffer, client);
  }
  /* A buffer holding a copy of `data`, its dtype taken from T. */
  template <typename T>
  Buffer from_host(Span<T> data, const Shape& shape) const {
    return from_host(dtype_of<T>, shape, Bytes(data));
  }
  template <typename T, typename A>
  Buffer from_host(const std::vector<T, A>& data, const Shape& shape) const {
    static_assert(!std::is_same_v<T, bool>, "std::vector<bool> is packed: use Span<const bool>");
    return from_host(dtype_of<T>, shape, Bytes(data));
  }
  /* Imports a DLPack tensor: on success the buffer owns it (`tensor` becomes
   * empty); on failure `tensor` still owns it. */
  Buffer from_dlpack(DlpackTensor& tensor) const {
    auto client = lock();
    nxhal_buffer_t* buffer = nullptr;
    detail::check(client->api, client->api->buffer_from_dlpack(device_, tensor.get(), &buffer),
                  "buffer_from_dlpack");
    tensor.release();
    return Buffer(client->api, buffer, client);
  }

  /* Compiles `program` (borrowed for the call). Unknown formats and malformed
   * programs are INVALID_ARGUMENT; unknown options name the option. */
  Executable compile(const Program& program, const Options& options = Options()) const {
    auto client = lock();
    nxhal_program_t c = detail::sized<nxhal_program_t>();
    c.format = program.format.c_str();
    c.data = program.data.data();
    c.size = program.data.size();
    c.extra_data = program.extra.data();
    c.extra_size = program.extra.size();
    std::vector<nxhal_option_t> c_options = options.to_c();
    nxhal_executable_t* executable = nullptr;
    detail::check(client->api,
                  client->api->executable_compile(device_, &c, c_options.data(), c_options.size(),
                                                  &executable),
                  "executable_compile");
    return Executable(client->api, executable, client);
  }
  /* Compiles one-file `program` bytes of `format`. */
  Executable compile(std::string format, Bytes program, const Options& options = Options()) const {
    return compile(Program{std::move(format), program, Bytes()}, options);
  }
  /* Loads serialize() output of this user (here or in Python). Bytes whose
   * seal does not check with this user's key, or that carry none, are
   * INVALID_ARGUMENT ("refusing to load a serialized executable: ...")
   * before the plugin sees a byte: a serialized executable is native code.
   * A compat_key mismatch is FAILED_PRECONDITION, foreign bytes
   * INVALID_ARGUMENT. */
  Executable deserialize(Bytes data, const Options& options = Options()) const {
    return load(data, 0, options);
  }
  /* The same for bytes from a source the caller trusts (pass nxhal::trusted):
   * sealed or not, and sealed by any key; the plugin's own checks remain. */
  Executable deserialize(Bytes data, Trusted, const Options& options = Options()) const {
    return load(data, 1, options);
  }

 private:
  Executable load(Bytes data, int trust, const Options& options) const {
    const void* payload = nullptr;
    size_t size = 0;
    detail::check_loader(nxhal_executable_unseal(data.data(), data.size(), trust, &payload, &size),
                         "nxhal_executable_unseal");
    auto client = lock();
    std::vector<nxhal_option_t> c_options = options.to_c();
    nxhal_executable_t* executable = nullptr;
    detail::check(client->api,
                  client->api->executable_deserialize(device_, payload, size, c_options.data(),
                                                      c_options.size(), &executable),
                  "executable_deserialize");
    return Executable(client->api, executable, client);
  }
  std::shared_ptr<detail::ClientHandle> lock() const {
    std::shared_ptr<detail::ClientHandle> client = client_.lock();
    if (client == nullptr || device_ == nullptr) {
      throw Error(NXHAL_FAILED_PRECONDITION,
                  "device used after its client was destroyed (or never set)", "nxhal::Device");
    }
    return client;
  }
  static nxhal_tensor_desc_t describe(Dtype dtype, const Shape& shape) noexcept {
    nxhal_tensor_desc_t desc = detail::sized<nxhal_tensor_desc_t>();
    desc.dtype = dtype;
    desc.rank = static_cast<int64_t>(shape.size());
    desc.dims = shape.data();
    return desc;
  }

  nxhal_device_t* device_ = nullptr;
  std::weak_ptr<detail::ClientHandle> client_;
};

/* ------------------------------------------------------------------------ */
/* Clients and plugins                                                      */
/* ------------------------------------------------------------------------ */

/* Owns a plugin client (one SDK instance and its devices). Move-only. The
 * plugin client is destroyed once this and every Buffer, Executable and
 * Event made from it are gone. Thread-safe: every const member. */
class Client {
 public:
  Client() noexcept = default;
  /* Creates a client through `api` with `options`: UNAVAILABLE (with the
   * reason) when the SDK or a usable device is missing. */
  explicit Client(const nxhal_api_t* api, const Options& options = Options()) {
    std::vector<nxhal_option_t> c_options = options.to_c();
    nxhal_client_t* client = nullptr;
    detail::check(api, api->client_create(c_options.data(), c_options.size(), &client),
                  "client_create");
    try {
      handle_ = std::make_shared<detail::ClientHandle>(api, client);
    } catch (...) {
      api->client_destroy(client);
      throw;
    }
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) noexcept = default;
  Client& operator=(Client&&) noexcept = default;
  ~Client() = default;

  /* The C handle, still owned; NULL when empty. */
  nxhal_client_t* get() const noexcept { return handle_ ? handle_->client : nullptr; }
  /* The plugin's function table; NULL when empty. */
  const nxhal_api_t* api() const noexcept { return handle_ ? handle_->api : nullptr; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /* What the probe found and skipped; "" if nothing. */
  std::string diagnostics() const {
    const char* text = nullptr;
    auto* handle = checked();
    detail::check(api(), api()->client_diagnostics(handle, &text), "client_diagnostics");
    return detail::text(text);
  }
  /* Number of devices. */
  size_t device_count() const {
    size_t count = 0;
    auto* handle = checked();
    detail::check(api(), api()->client_device_count(handle, &count), "client_device_count");
    return count;
  }
  /* Device `index` (< device_count(), else INVALID_ARGUMENT). */
  Device device(size_t index) const {
    nxhal_device_t* device = nullptr;
    auto* handle = checked();
    detail::check(api(), api()->client_device(handle, index, &device), "client_device");
    return Device(device, handle_);
  }
  /* Every device, in the plugin's order. */
  std::vector<Device> devices() const {
    std::vector<Device> result;
    size_t count = device_count();
    result.reserve(count);
    for (size_t i = 0; i < count; ++i) result.push_back(device(i));
    return result;
  }

 private:
  nxhal_client_t* checked() const {
    if (!handle_) throw Error(NXHAL_INVALID_ARGUMENT, "empty nxhal::Client (moved from?)");
    return handle_->client;
  }

  std::shared_ptr<detail::ClientHandle> handle_;
};

/* One plugin library the loader found, not yet loaded. */
struct PluginEntry {
  std::string name; /* "npu" for libnxhal_npu.so */
  std::string path;
};

/* Owns a loaded, negotiated plugin handle. Move-only. Closing it does not
 * unload the library, so clients made from it may outlive it. Thread-safe:
 * every const member. */
class Plugin {
 public:
  Plugin() noexcept = default;
  /* Adopts `plugin` (caller gives up ownership). */
  explicit Plugin(nxhal_plugin_t* plugin) noexcept : plugin_(plugin) {}
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;
  Plugin(Plugin&& other) noexcept : plugin_(std::exchange(other.plugin_, nullptr)) {}
  Plugin& operator=(Plugin&& other) noexcept {
    if (this != &other) {
      reset();
      plugin_ = std::exchange(other.plugin_, nullptr);
    }
    return *this;
  }
  ~Plugin() { reset(); }

  /* Opens the library at `path`: UNAVAILABLE when it cannot be loaded (with
   * the dlerror text), NOT_FOUND when it is no nx_hal plugin, ABI_MISMATCH
   * for an incompatible version. */
  static Plugin open(const std::string& path) {
    nxhal_plugin_t* plugin = nullptr;
    detail::check_loader(nxhal_plugin_open(path.c_str(), &plugin), "nxhal_plugin_open");
    return Plugin(plugin);
  }
  /* Opens the first plugin called `name` the loader finds (libnxhal_<name>.so
   * in NX_HAL_PLUGIN_PATH first); NOT_FOUND listing where it searched. */
  static Plugin open_by_name(const std::string& name) {
    nxhal_plugin_t* plugin = nullptr;
    detail::check_loader(nxhal_plugin_open_by_name(name.c_str(), &plugin),
                         "nxhal_plugin_open_by_name");
    return Plugin(plugin);
  }

  /* The C handle, still owned; NULL when empty. */
  nxhal_plugin_t* get() const noexcept { return plugin_; }
  explicit operator bool() const noexcept { return plugin_ != nullptr; }
  /* Gives up ownership: the caller closes it with nxhal_plugin_close. */
  nxhal_plugin_t* release() noexcept { return std::exchange(plugin_, nullptr); }
  /* Closes the handle (if any) and becomes empty. */
  void reset() noexcept { nxhal_plugin_close(std::exchange(plugin_, nullptr)); }

  /* The negotiated function table, static in the library. */
  const nxhal_api_t* api() const { return nxhal_plugin_api(checked()); }
  /* The path it was opened from. */
  std::string path() const { return detail::text(nxhal_plugin_path(checked())); }
  /* The negotiated ABI version. */
  uint32_t abi_major() const { return nxhal_plugin_abi_major(checked()); }
  uint32_t abi_minor() const { return nxhal_plugin_abi_minor(checked()); }
  /* Name, vendor, versions the plugin reports. */
  PluginInfo info() const {
    const nxhal_api_t* table = api();
    nxhal_plugin_info_t c = detail::sized<nxhal_plugin_info_t>();
    detail::check(table, table->plugin_info(&c), "plugin_info");
    return PluginInfo{detail::text(c.name),
                      detail::text(c.vendor),
                      detail::text(c.plugin_version),
                      detail::text(c.sdk_version),
                      c.abi_major,
                      c.abi_minor};
  }
  /* A new client of this plugin (see Client's constructor). */
  Client create_client(const Options& options = Options()) const { return Client(api(), options); }

 private:
  nxhal_plugin_t* checked() const {
    if (plugin_ == nullptr)
      throw Error(NXHAL_INVALID_ARGUMENT, "empty nxhal::Plugin (moved from?)");
    return plugin_;
  }

  nxhal_plugin_t* plugin_ = nullptr;
};

/* Every plugin the loader finds (see nxhal_plugin_enumerate: NX_HAL_PLUGIN_PATH
 * first), one per name, in search order, without loading them. Thread-safe. */
inline std::vector<PluginEntry> enumerate_plugins() {
  struct State {
    std::vector<PluginEntry> entries;
    std::exception_ptr error;
  } state;
  auto visit = [](const char* name, const char* path, void* user_data) noexcept -> int {
    State* s = static_cast<State*>(user_data);
    try {
      s->entries.push_back(PluginEntry{detail::text(name), detail::text(path)});
      return 0;
    } catch (...) {  // nothing may unwind through the C loader
      s->error = std::current_exception();
      return 1;
    }
  };
  detail::check_loader(nxhal_plugin_enumerate(visit, &state), "nxhal_plugin_enumerate");
  if (state.error) std::rethrow_exception(state.error);
  return std::move(state.entries);
}

}  // namespace nxhal

#endif  // NX_HAL_NX_HAL_HPP_
