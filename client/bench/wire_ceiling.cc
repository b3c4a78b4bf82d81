// grpc-wire-ceiling: what gRPC itself can move per unary call on this host, with no matrix service
// behind it. A generic (ByteBuffer) server answers every request with a reply of a fixed size; the
// client sends requests of a fixed size over one channel, one call at a time, and reports the
// median round trip and the bytes per second. Payloads are static slices, so neither end copies a
// byte outside gRPC and the kernel; --copy adds the one copy each end of a real service makes (the
// server reads the request out of gRPC's slices, the client reads the reply out of them).
// The round trip of an inline request to matserve, minus its server's own time, is measured
// against this floor (scripts/bench/run-inline-wire.sh, docs/benchmarks.md).
//
// Usage: grpc-wire-ceiling [--request-mib 128] [--reply-mib 64] [--reps 20] [--warmup 3] [--copy]
//                          [--callback-api] [--channel-arg name=value ...]
// --callback-api calls through the callback API (gRPC's threads poll) instead of a completion
// queue the calling thread polls (as a generated stub's blocking call does).
// The server runs in the same process, on 127.0.0.1 and on a Unix socket; both are measured.
// absl's lock-order detector is off, as in matserve and its clients (the distribution's absl
// builds it in, and gRPC's locks are absl's).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/cpp/process_settings.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace {

constexpr char kMethod[] = "/matserve.bench.Wire/Echo";

struct Options {
  std::int64_t request_bytes = std::int64_t{128} << 20;
  std::int64_t reply_bytes = std::int64_t{64} << 20;
  int reps = 20;
  int warmup = 3;
  bool copy = false;
  bool callback_api = false;
  std::vector<std::pair<std::string, int>> channel_args;
};

// Copies every slice of `buffer` into `out` (resized to fit): what a parser of the message does.
void copy_out(const grpc::ByteBuffer& buffer, std::vector<char>& out) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return;
  out.resize(buffer.Length());
  std::size_t at = 0;
  for (const grpc::Slice& s : slices) {
    std::memcpy(out.data() + at, s.begin(), s.size());
    at += s.size();
  }
}

// Answers each call with the same static reply after reading (and, with --copy, copying) the
// request: one call at a time on a thread of its own that polls its completion queue, as the
// threads of matserve's synchronous server do.
class EchoServer {
 public:
  EchoServer(std::int64_t reply_bytes, bool copy, grpc::AsyncGenericService* service,
             std::unique_ptr<grpc::ServerCompletionQueue> cq)
      : payload_(static_cast<std::size_t>(reply_bytes), 'r'),
        copy_(copy),
        service_(service),
        cq_(std::move(cq)),
        thread_([this] { loop(); }) {}
  // Call after grpc::Server::Shutdown.
  void stop() {
    cq_->Shutdown();
    thread_.join();
  }

 private:
  // False once the queue is shut down or an operation failed.
  bool await() {
    void* tag = nullptr;
    bool ok = false;
    return cq_->Next(&tag, &ok) && ok;
  }
  void loop() {
    std::vector<char> scratch;
    for (;;) {
      grpc::GenericServerContext context;
      grpc::GenericServerAsyncReaderWriter stream(&context);
      service_->RequestCall(&context, &stream, cq_.get(), cq_.get(), this);
      if (!await()) break;
      grpc::ByteBuffer request;
      stream.Read(&request, this);
      if (!await()) break;
      if (copy_) copy_out(request, scratch);
      grpc::Slice slice(payload_.data(), payload_.size(), grpc::Slice::STATIC_SLICE);
      stream.WriteAndFinish(grpc::ByteBuffer(&slice, 1), grpc::WriteOptions(), grpc::Status::OK,
                            this);
      if (!await()) break;
    }
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) {
    }
  }

  std::string payload_;
  bool copy_;
  grpc::AsyncGenericService* service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::thread thread_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Returns 0 when every call succeeded.
int measure(const std::string& target, const Options& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  for (const auto& [name, value] : o.channel_args) args.SetInt(name, value);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  const std::string payload(static_cast<std::size_t>(o.request_bytes), 'q');
  std::vector<char> reply_copy;
  std::vector<double> micros;
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    grpc::Slice slice(payload.data(), payload.size(), grpc::Slice::STATIC_SLICE);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer reply;
    grpc::ClientContext context;
    grpc::Status status;
    const auto start = std::chrono::steady_clock::now();
    if (o.callback_api) {
      std::promise<grpc::Status> done;
      stub.UnaryCall(&context, kMethod, grpc::StubOptions(), &request, &reply,
                     [&done](grpc::Status s) { done.set_value(std::move(s)); });
      status = done.get_future().get();
    } else {
      // The calling thread polls a queue of its own, as a blocking call of a generated stub does.
      grpc::CompletionQueue cq;
      auto call = stub.PrepareUnaryCall(&context, kMethod, request, &cq);
      call->StartCall();
      call->Finish(&reply, &status, &cq);
      void* tag = nullptr;
      bool ok = false;
      cq.Next(&tag, &ok);
    }
    if (status.ok() && o.copy) copy_out(reply, reply_copy);
    const auto end = std::chrono::steady_clock::now();
    if (!status.ok()) {
      std::fprintf(stderr, "%s: call failed: %s\n", target.c_str(), status.error_message().c_str());
      return 1;
    }
    if (static_cast<std::int64_t>(reply.Length()) != o.reply_bytes) {
      std::fprintf(stderr, "%s: reply of %zu bytes, expected %lld\n", target.c_str(),
                   reply.Length(), static_cast<long long>(o.reply_bytes));
      return 1;
    }
    if (i >= o.warmup)
      micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  const double p50 = median(micros);
  const double moved = static_cast<double>(o.request_bytes + o.reply_bytes);
  std::printf("| %s | %s | %s | %d | %.0f | %.0f | %.2f |\n",
              target.rfind("unix:", 0) == 0 ? "Unix socket" : "TCP 127.0.0.1",
              o.callback_api ? "callback" : "blocking", o.copy ? "yes" : "no", o.reps, p50,
              *std::min_element(micros.begin(), micros.end()), moved / p50 / 1e3);
  return 0;
}

bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--copy") {
      o.copy = true;
    } else if (a == "--callback-api") {
      o.callback_api = true;
    } else if (a == "--request-mib" && (v = next())) {
      o.request_bytes = std::atoll(v) << 20;
    } else if (a == "--reply-mib" && (v = next())) {
      o.reply_bytes = std::atoll(v) << 20;
    } else if (a == "--reps" && (v = next())) {
      o.reps = std::max(1, std::atoi(v));
    } else if (a == "--warmup" && (v = next())) {
      o.warmup = std::max(0, std::atoi(v));
    } else if (a == "--channel-arg" && (v = next())) {
      const std::string kv = v;
      const auto eq = kv.find('=');
      if (eq == std::string::npos) return false;
      o.channel_args.emplace_back(kv.substr(0, eq), std::atoi(kv.c_str() + eq + 1));
    } else {
      std::fprintf(stderr, "grpc-wire-ceiling: unknown or incomplete argument %s\n", a.c_str());
      return false;
    }
  }
  return o.request_bytes >= 0 && o.reply_bytes >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  matserve::client::turn_off_lock_order_checks();
  Options o;
  if (!parse_args(argc, argv, o)) return 2;
  const std::string socket_path = "/tmp/grpc-wire-ceiling-" + std::to_string(getpid()) + ".sock";
  grpc::AsyncGenericService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  for (const auto& [name, value] : o.channel_args) builder.AddChannelArgument(name, value);
  builder.RegisterAsyncGenericService(&service);
  std::unique_ptr<grpc::ServerCompletionQueue> cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "grpc-wire-ceiling: could not start the in-process server\n");
    return 1;
  }
  EchoServer echo(o.reply_bytes, o.copy, &service, std::move(cq));
  const std::vector<std::string> targets = {"127.0.0.1:" + std::to_string(port),
                                            "unix:" + socket_path};
  std::printf("| transport | client API | copy out | calls | p50 us | min us | GB/s |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|\n");
  int rc = 0;
  for (const std::string& t : targets) rc |= measure(t, o);
  server->Shutdown();
  echo.stop();
  unlink(socket_path.c_str());
  return rc;
}
