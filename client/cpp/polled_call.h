// matserve::client::call_polling: one unary call whose caller waits for the reply by polling its
// completion queue instead of sleeping in it. A thread that sleeps through a call needs its CPU
// woken when the reply lands, which costs tens of microseconds on a virtual machine whose idle
// CPUs halt; a polling thread keeps its CPU busy for the call's length and reads the reply at
// once. For latency-bound clients and for measuring the server without the caller's wake-up
// (ClientOptions::poll_replies).
#pragma once

#include <grpc/support/time.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/status.h>

#include <memory>

namespace matserve::client {

// `prepare(cq)` returns the not yet started call (a stub's PrepareAsync<Method> bound to its
// context and request); the reply is written to `reply`. The call's context deadline holds as
// for a blocking call.
template <typename Reply, typename Prepare>
grpc::Status call_polling(const Prepare& prepare, Reply* reply) {
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::ClientAsyncResponseReaderInterface<Reply>> call = prepare(&cq);
  grpc::Status status;
  call->StartCall();
  int finished_tag = 0;
  call->Finish(reply, &status, &finished_tag);
  const gpr_timespec now = gpr_time_0(GPR_CLOCK_MONOTONIC);  // poll: never sleep
  void* tag = nullptr;
  bool ok = false;
  for (;;) {
    const grpc::CompletionQueue::NextStatus next = cq.AsyncNext(&tag, &ok, now);
    if (next == grpc::CompletionQueue::GOT_EVENT && tag == &finished_tag) break;
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// One unary call, waited for as the client's options say: `blocking()` (the stub's synchronous
// call) when `poll` is false, else `prepare` polled as above.
template <typename Reply, typename Blocking, typename Prepare>
grpc::Status call_unary(bool poll, const Blocking& blocking, const Prepare& prepare, Reply* reply) {
  return poll ? call_polling(prepare, reply) : blocking();
}

}  // namespace matserve::client
