// Helpers every handler shares: the call's deadline and cancellation as a runtime Waiter.
#pragma once

#include <grpcpp/server_context.h>

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/runtime/device_scheduler.h"

namespace matserve::server {

// The call's deadline as absl::Time (InfiniteFuture when the client set none).
inline absl::Time deadline_of(const grpc::ServerContext& context) {
  const auto d = context.deadline();
  if (d >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

// Stops waiting at the deadline or when the client cancels.
inline Waiter waiter_of(grpc::ServerContext& context) {
  return Waiter{deadline_of(context), [&context] { return context.IsCancelled(); }};
}

// Before a request starts: only its deadline. Cancellation is checked where a request waits (the
// scheduler's queue, through waiter_of): on the sync API IsCancelled() polls the call's
// completion queue, tens of microseconds that every small request would pay.
inline absl::Status cancelled_or_expired(const grpc::ServerContext& context) {
  if (context.deadline() <= std::chrono::system_clock::now()) {
    return absl::DeadlineExceededError("the request's deadline passed before it started");
  }
  return absl::OkStatus();
}

// Before a result is published as a resident matrix: a call the client cancelled, or whose
// deadline passed while it ran, gets no reply, so a handle made now would be known to nobody and
// its memory held until the idle TTL, against the owner's quota. Such a result is dropped instead
// (its memory returns at once). The deadline is checked always (a clock read); cancellation only
// for calls that ran at least kCancelCheckAfter since `received`, because IsCancelled() polls the
// call's completion queue (see cancelled_or_expired) and a short call is rarely cancelled while it
// runs. What slips through (a cancel during a short call, or a reply sent just before the client's
// own deadline) is listed by ListResident for its owner and expires with the TTL.
inline constexpr absl::Duration kCancelCheckAfter = absl::Milliseconds(2);

// DEADLINE_EXCEEDED or CANCELLED, with `consequence` after the reason, when the call's client gave
// up on it while it ran (checked as described above); OK otherwise.
inline absl::Status given_up(grpc::ServerContext& context, absl::Time received,
                             absl::string_view consequence) {
  if (context.deadline() <= std::chrono::system_clock::now()) {
    return absl::DeadlineExceededError(
        absl::StrCat("the request's deadline passed while it ran; ", consequence));
  }
  if (absl::Now() - received >= kCancelCheckAfter && context.IsCancelled()) {
    return absl::CancelledError(absl::StrCat("the client cancelled the call; ", consequence));
  }
  return absl::OkStatus();
}

inline absl::Status abandoned(grpc::ServerContext& context, const char* what, absl::Time received) {
  return given_up(context, received, absl::StrCat(what, " was released, not kept"));
}

}  // namespace matserve::server
