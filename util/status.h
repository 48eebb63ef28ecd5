// Status and Result: how every internal hmr function reports failure.
//
// A failure carries a positive HMR_E* code and a human reason.  It is created once, where
// the error is classified (make_error logs it there); callers pass it on unchanged.  The C
// ABI turns it into a negative return code plus the thread's last-error text.
#pragma once

#include <hmr/hmr.h>

#include <cstdarg>
#include <optional>
#include <string>
#include <utility>

namespace hmr {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(int code, std::string reason) : code_(code), reason_(std::move(reason)) {}

  bool ok() const { return code_ == HMR_SUCCESS; }
  int code() const { return code_; }
  const std::string& reason() const { return reason_; }
  // The reason itself, for a failure that is handed on and not kept (no copy to allocate).
  std::string take_reason() && { return std::move(reason_); }

  // Marks a NIC's refusal for resources (out of keys, of pinnable memory), where the NIC was
  // called: a caller choosing among ways to register (device memory's export paths) stops
  // there instead of taking a worse way for a moment's want.  A driver's failure with the
  // same code is not marked.  The mark travels with the Status, unchanged, as the code does.
  Status& mark_nic_refusal() {
    nic_refusal_ = true;
    return *this;
  }
  bool nic_refusal() const { return nic_refusal_; }
  // Marks a dma-buf export that found the descriptor table full with nothing idle left to give
  // back: a caller choosing among export paths may still take one that needs no descriptor
  // (peer-direct), but not a host shadow, a copy that would stay cached for a moment's want.
  Status& mark_descriptor_shortage() {
    descriptor_shortage_ = true;
    return *this;
  }
  bool descriptor_shortage() const { return descriptor_shortage_; }

 private:
  int code_ = HMR_SUCCESS;
  bool nic_refusal_ = false;
  bool descriptor_shortage_ = false;
  std::string reason_;
};

inline Status ok_status() { return Status(); }

// Builds a failure with a printf-style reason and logs it at debug level: this is the one
// place an error is classified.
// The failure for a std::bad_alloc caught where no exception may pass (hmr's own threads, a
// call that must give back what it took).  Building it allocates nothing: the reason fits the
// string's own room.
inline Status out_of_memory() { return Status(HMR_ENOMEM, "out of memory"); }

Status make_error(int code, const char* format, ...) __attribute__((format(printf, 2, 3)));
Status make_error_v(int code, const char* format, va_list args) __attribute__((format(printf, 2, 0)));

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  // By reference, so that returning a large value (a registration request) moves it once.
  Result(T&& value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(const T& value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace hmr

// Returns early with the failure of an expression yielding Status.
#define HMR_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::hmr::Status hmr_status_ = (expr);    \
    if (!hmr_status_.ok()) return hmr_status_; \
  } while (0)
