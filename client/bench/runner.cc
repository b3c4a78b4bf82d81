// The loop of one run (see runner.h). Workers prepare their operands (random, or the --a-npy /
// --b-npy files; inline: built into a request once; resident: uploaded once, multiplied or
// transposed by handle with keep_result, each result handed to the release pool; with a batch, N
// of each in one MultiplyBatched request), warm up, meet at a barrier whose completion fixes the
// start time, then loop, drawing each request's operation from the --workload mix, until the
// request budget or the deadline is spent or (--window-ms) the windows have agreed.
#include "client/bench/runner.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/bench/cuda_ipc_buffer.h"
#include "client/bench/operands.h"
#include "client/bench/releaser.h"
#include "client/cpp/matrix.h"
#include "client/cpp/shared_memory.h"

namespace matserve::client::bench {
namespace {

using Clock = std::chrono::steady_clock;

double micros_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// What a worker takes from one reply, Multiply, MultiplyBatched or Transpose alike.
struct Answer {
  double client_us = 0;  // the call's round trip
  v1::Timing timing;
  std::string variant, device, precision;
  std::vector<std::string> results;  // handles of the results kept on the device
  std::int64_t result_bytes = 0;     // result bytes the reply carried
};

// `result`: the matrix the reply carries (C, or a transpose's B).
template <typename Reply>
Answer answer_of(Reply& reply, double client_us, const v1::Matrix& result) {
  Answer answer;
  answer.client_us = client_us;
  answer.timing = reply.timing();
  answer.variant = std::move(*reply.mutable_variant());
  answer.device = std::move(*reply.mutable_device());
  answer.result_bytes = static_cast<std::int64_t>(result.data().size());
  return answer;
}

// Shared between the workers of one run.
struct Shared {
  Shared(const RunContext& c, const RunSpec& s) : context(c), spec(s) {}
  const RunContext& context;
  const RunSpec& spec;
  std::optional<std::int64_t> budget;    // total timed requests
  std::atomic<std::int64_t> claimed{0};  // timed requests handed out so far
  std::atomic<std::int64_t> done{0};
  std::atomic<std::int64_t> failed{0};
  std::atomic<int> finished{0};
  Releaser* releaser = nullptr;  // resident mode
  Clock::time_point start, deadline = Clock::time_point::max();
  std::atomic<bool> stop{false};       // a windowed run that became stable
  WindowCollector* windows = nullptr;  // windowed runs (--window-ms)
  // Open loop (--rate): the schedule, handed out in order.
  std::mutex arrivals_mu;
  double next_arrival_s = 0;  // offset from start of the next scheduled request
  std::mt19937_64 arrivals_rng{12345};
};

// Claims one timed request from the budget (--requests); false once it is spent.
bool claim_from_budget(Shared& shared) {
  return !shared.budget || shared.claimed.fetch_add(1) < *shared.budget;
}

// True while the run may issue another timed request (claims one from the budget).
bool next_request(Shared& shared) {
  if (shared.stop.load(std::memory_order_relaxed) || Clock::now() >= shared.deadline) return false;
  return claim_from_budget(shared);
}

// Open loop: the scheduled time of the next timed request, or nothing when the budget is spent
// or the schedule has passed the deadline.
std::optional<Clock::time_point> next_arrival(Shared& shared) {
  const BenchOptions& o = shared.context.options;
  if (shared.stop.load(std::memory_order_relaxed) || !claim_from_budget(shared))
    return std::nullopt;
  double offset = 0;
  {
    std::lock_guard lock(shared.arrivals_mu);
    offset = shared.next_arrival_s;
    const double gap = o.poisson_arrivals
                           ? std::exponential_distribution<double>(*o.rate)(shared.arrivals_rng)
                           : 1.0 / *o.rate;
    shared.next_arrival_s += gap;
  }
  const Clock::time_point due = shared.start + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(offset));
  if (due >= shared.deadline) return std::nullopt;
  return due;
}

class Worker {
 public:
  Worker(Shared& shared, int index)
      : shared_(shared),
        index_(index),
        op_rng_(shared.context.options.seed * 1000003 + static_cast<std::uint64_t>(index)) {}

  // Connects (per-worker clients) and prepares the request; false when that failed.
  bool setup() {
    const BenchOptions& o = shared_.context.options;
    const bool striped = shared_.spec.mode == Mode::kStriped;
    client_ = striped ? nullptr : shared_.context.shared_client;
    if (client_ == nullptr) {
      ClientOptions options = o.client;
      if (striped) {  // every call striped, however small
        options.stripes = o.stripes;
        options.stripe_threshold_bytes = 0;
        options.stripe_chunk_bytes = o.stripe_chunk_bytes;
      }
      options.deadline = std::chrono::milliseconds(o.deadline_ms);
      options.channel_args = o.channel_args;
      // gRPC shares one connection among channels with equal arguments (its global subchannel
      // pool); a message limit a few bytes apart gives each worker a TCP connection of its own.
      options.max_message_bytes -= index_ + 1;
      auto connected = Client::connect(o.target, options);
      if (!connected.ok()) return fail(connected.status());
      own_client_ = *std::move(connected);
      client_ = own_client_.get();
    }
    if (IsFloor(shared_.spec.mode)) return true;
    const Shape& s = shared_.spec.shape;
    const DType dtype = data_type_of(shared_.spec.precision);
    const std::uint64_t seed = o.seed + static_cast<std::uint64_t>(index_) * 2;
    const std::int64_t batch = shared_.spec.batch;
    const FileOperands* files = shared_.context.files;
    const bool multiply = o.workload.has(Op::kMultiply);
    v1::Matrix a = files != nullptr ? files->a : random_operand(s.m, s.k, batch, dtype, seed);
    v1::Matrix b;
    if (multiply)
      b = files != nullptr ? files->b : random_operand(s.k, s.n, batch, dtype, seed + 1);
    operand_bytes_ = static_cast<std::int64_t>(a.data().size() + b.data().size());
    request_.set_variant(shared_.spec.variant);
    transpose_request_.set_variant(shared_.spec.variant);
    if (shared_.spec.precision == "tf32") request_.set_compute(v1::COMPUTE_TF32);
    if (shared_.spec.precision == "fp8") request_.set_compute(v1::COMPUTE_FP8);
    if (batched()) return setup_batched(std::move(a), std::move(b));
    if (inline_operands()) {
      if (o.workload.has(Op::kTranspose)) *transpose_request_.mutable_a() = a;
      *request_.mutable_a() = std::move(a);
      *request_.mutable_b() = std::move(b);
      return true;
    }
    if (shared_.spec.mode == Mode::kShm) return setup_shared_memory(std::move(a), std::move(b));
    if (shared_.spec.mode == Mode::kCudaIpc) return setup_cuda_ipc(std::move(a), std::move(b));
    absl::StatusOr<std::string> a_handle = upload_operand(a);
    if (!a_handle.ok()) return fail(a_handle.status());
    request_.set_a_handle(*a_handle);
    request_.set_keep_result(true);
    transpose_request_.set_a_handle(*a_handle);  // A^T kept, then released like a product
    transpose_request_.set_keep_result(true);
    if (!multiply) return true;
    absl::StatusOr<std::string> b_handle = upload_operand(b);
    if (!b_handle.ok()) return fail(b_handle.status());
    request_.set_b_handle(*b_handle);
    return true;
  }

  void warmup() {
    for (int i = 0; i < shared_.context.options.warmup; ++i) {
      if (IsFloor(shared_.spec.mode)) {
        (void)floor_call();
        continue;
      }
      absl::StatusOr<Answer> answer = Call(next_op());
      if (!answer.ok()) continue;  // failures show up again in the timed loop
      if (!answer->results.empty()) (void)client_->release(answer->results);
    }
  }

  void timed_loop() {
    const bool open_loop = shared_.context.options.rate.has_value();
    for (;;) {
      // Closed loop: now. Open loop: the request's scheduled time, waited for; its latency
      // counts from then, also when every worker was busy at that moment.
      std::optional<Clock::time_point> due;
      if (open_loop) {
        due = next_arrival(shared_);
        if (!due) break;
        std::this_thread::sleep_until(*due);
      } else if (!next_request(shared_)) {
        break;
      }
      if (IsFloor(shared_.spec.mode)) {
        ping(due);
        continue;
      }
      const Op op = next_op();
      absl::StatusOr<Answer> answer = Call(op, due);
      if (!answer.ok()) {
        record_.record_error(status_code_name(answer.status().code()),
                             std::string(answer.status().message()));
        finished(OpName(op), 0, false);
        continue;
      }
      const v1::Timing& t = answer->timing;
      record_.record_ok(answer->client_us, t.total_us(), t.kernel_us(), t.queue_us(),
                        t.host_to_device_us(), t.device_to_host_us(), t.merged_requests(),
                        t.batch_wait_us());
      ++record_.variants[answer->variant];
      ++record_.devices[answer->device];
      if (!answer->precision.empty()) ++record_.precisions[answer->precision];
      finished(OpName(op), answer->client_us, true);
      if (!answer->results.empty()) release_results(std::move(answer->results), op);
      bytes_received_ = shared_.spec.mode == Mode::kShm || shared_.spec.mode == Mode::kCudaIpc
                            ? result_bytes_
                            : answer->result_bytes;
    }
  }

  // The call of a mode with no matrix work: a health check (ping) or a ListResident (echo).
  absl::Status floor_call() {
    if (shared_.spec.mode == Mode::kEcho) return client_->list_resident().status();
    return client_->health().status();
  }

  // One ping or echo, timed like a multiply (from `due` when scheduled); the server-side columns
  // stay 0.
  void ping(std::optional<Clock::time_point> due) {
    const auto t0 = due.value_or(Clock::now());
    const absl::Status reply = floor_call();
    const double client_us = micros_between(t0, Clock::now());
    if (reply.ok()) {
      record_.record_ok(client_us, 0, 0, 0, 0, 0);
    } else {
      record_.record_error(status_code_name(reply.code()), std::string(reply.message()));
    }
    finished("", client_us, reply.ok());
  }

  void teardown() {
    release_held();
    for (const std::string& handle : operand_handles_) (void)client_->release(handle);
    if (!region_.empty()) (void)client_->unregister_shared_memory(region_);
  }

  const Recorder& record() const { return record_; }
  bool setup_failed() const { return setup_failed_; }
  // Operand bytes per request, whichever way they travel.
  std::int64_t bytes_sent() const { return operand_bytes_; }
  std::int64_t bytes_received() const { return bytes_received_; }

 private:
  bool batched() const { return shared_.spec.batch > 1; }
  // Operands sent in every call (the striped mode's client moves them as ranges).
  bool inline_operands() const {
    return shared_.spec.mode == Mode::kInline || shared_.spec.mode == Mode::kStriped;
  }

  // The next request's operation: a seeded draw from the --workload mix.
  Op next_op() {
    const Workload& workload = shared_.context.options.workload;
    if (workload.ops.size() == 1) return workload.ops.front().op;
    return workload.choose(std::uniform_real_distribution<double>(0, 1)(op_rng_));
  }

  // Books a finished timed request: the run's counters, the open window, its operation
  // (`op`, empty for a ping) and the time series.
  void finished(const char* op, double client_us, bool ok) {
    if (!ok) shared_.failed.fetch_add(1, std::memory_order_relaxed);
    shared_.done.fetch_add(1, std::memory_order_relaxed);
    if (shared_.windows != nullptr) shared_.windows->add(client_us, ok);
    if (*op != '\0') {
      OpRecord& record = record_.ops[op];
      if (ok) {
        record.client_us.push_back(client_us);
      } else {
        ++record.errors;
      }
    }
    record_.completions.push_back(
        {micros_between(shared_.start, Clock::now()) / 1e6, client_us, ok});
  }

  // One timed request: a Transpose, a Multiply, or with a batch one MultiplyBatched of all its
  // products; its round trip counts from `due` when the request was scheduled (open loop), else
  // from now.
  absl::StatusOr<Answer> Call(Op op, std::optional<Clock::time_point> due = std::nullopt) {
    const auto t0 = due.value_or(Clock::now());
    absl::StatusOr<Answer> answer = send(op, t0);
    // --release next-call: the results held went with this call, which succeeded.
    if (answer.ok() && releases_with_next_call()) {
      held_.clear();
      held_bytes_ = 0;
    }
    return answer;
  }

  absl::StatusOr<Answer> send(Op op, Clock::time_point t0) {
    if (batched()) {
      attach_held(batched_request_);
      auto reply = client_->multiply_batched(batched_request_);
      const double client_us = micros_between(t0, Clock::now());
      if (!reply.ok()) return reply.status();
      Answer answer = answer_of(*reply, client_us, reply->c());
      answer.precision = std::move(*reply->mutable_precision());
      for (const v1::ResidentInfo& r : reply->results()) answer.results.push_back(r.handle());
      return answer;
    }
    if (op == Op::kTranspose) {
      attach_held(transpose_request_);
      auto reply = client_->transpose(transpose_request_);
      const double client_us = micros_between(t0, Clock::now());
      if (!reply.ok()) return reply.status();
      Answer answer = answer_of(*reply, client_us, reply->b());
      if (!reply->result().handle().empty()) answer.results.push_back(reply->result().handle());
      return answer;
    }
    attach_held(request_);
    auto reply = client_->multiply(request_);
    const double client_us = micros_between(t0, Clock::now());
    if (!reply.ok()) return reply.status();
    Answer answer = answer_of(*reply, client_us, reply->c());
    answer.precision = std::move(*reply->mutable_precision());
    if (!reply->result().handle().empty()) answer.results.push_back(reply->result().handle());
    return answer;
  }

  bool releases_with_next_call() const {
    return shared_.context.options.release == BenchOptions::Release::kNextCall;
  }

  // --release next-call: the results held are named in the request's release_handles.
  template <typename Request>
  void attach_held(Request& request) {
    request.clear_release_handles();
    if (!releases_with_next_call()) return;
    for (const std::string& handle : held_) request.add_release_handles(handle);
  }

  // A request's kept results (one, or a batch's) of operation `op`: to the release pool, released
  // here (--release inline), held until enough are (--release deferred) or until the next call
  // (--release next-call); outside the timing, and one Release call each way but the last.
  void release_results(std::vector<std::string> handles, Op op) {
    if (shared_.releaser != nullptr) {
      shared_.releaser->push(std::move(handles));
      return;
    }
    held_.insert(held_.end(), std::make_move_iterator(handles.begin()),
                 std::make_move_iterator(handles.end()));
    held_bytes_ += kept_bytes_bound(op);
    if (releases_with_next_call()) return;
    const BenchOptions& o = shared_.context.options;
    if (o.release != BenchOptions::Release::kDeferred ||
        held_.size() >= o.deferred_release_handles || held_bytes_ >= o.deferred_release_bytes) {
      release_held();
    }
  }

  // Releases the results held (--release deferred, and the last request's with next-call; at
  // most one request's otherwise) in one call.
  void release_held() {
    if (held_.empty()) return;
    const auto r0 = Clock::now();
    const bool released = client_->release(held_).ok();
    record_.release_us.push_back(micros_between(r0, Clock::now()));
    if (!released) ++record_.release_errors;
    held_.clear();
    held_bytes_ = 0;
  }

  // At least the device bytes of one request's kept results: its elements at the widest dtype.
  std::int64_t kept_bytes_bound(Op op) const {
    const Shape& s = shared_.spec.shape;
    return (op == Op::kTranspose ? s.m * s.k : s.m * s.n) * shared_.spec.batch * 8;
  }

  // Uploads one operand onto the device of the worker's first: on a multi-GPU server each
  // worker's operands land on one device, and different workers' spread over the devices.
  absl::StatusOr<std::string> upload_operand(const v1::Matrix& matrix) {
    auto uploaded =
        client_->upload(matrix, 0, operand_handles_.empty() ? "" : operand_handles_.front());
    if (!uploaded.ok()) return uploaded.status();
    operand_handles_.push_back(uploaded->handle());
    return uploaded->handle();
  }

  // The MultiplyBatched request of a batch: A and B stacked inline, or (resident) each of their
  // matrices uploaded once and named by handle, the results kept.
  bool setup_batched(v1::Matrix a, v1::Matrix b) {
    batched_request_.set_batch(shared_.spec.batch);
    batched_request_.set_variant(request_.variant());
    batched_request_.set_compute(request_.compute());
    if (inline_operands()) {
      *batched_request_.mutable_a() = std::move(a);
      *batched_request_.mutable_b() = std::move(b);
      return true;
    }
    for (auto [stack, handles] : {std::pair{&a, batched_request_.mutable_a_handles()},
                                  std::pair{&b, batched_request_.mutable_b_handles()}}) {
      for (const v1::Matrix& matrix : unstack(*stack)) {
        absl::StatusOr<std::string> handle = upload_operand(matrix);
        if (!handle.ok()) return fail(handle.status());
        handles->Add(*std::move(handle));
      }
    }
    batched_request_.set_keep_result(true);
    return true;
  }

  // Where A, B and C go in a worker's region (each at a 4 KiB boundary).
  struct Places {
    std::size_t b = 0, c = 0, total = 0;
  };
  Places plan_places(const v1::Matrix& a, const v1::Matrix& b) {
    const auto round = [](std::size_t n) { return (n + 4095) / 4096 * 4096; };
    const Shape& s = shared_.spec.shape;
    result_bytes_ = s.m * s.n * static_cast<std::int64_t>(b.data().size() / (s.k * s.n));
    Places p;
    p.b = round(a.data().size());
    p.c = p.b + round(b.data().size());
    p.total = p.c + static_cast<std::size_t>(result_bytes_);
    return p;
  }

  // The request names places in the registered region `name` and carries no bytes.
  void name_places(const std::string& name, const Places& p, v1::Matrix a, v1::Matrix b) {
    region_ = name;
    for (auto [matrix, offset] : {std::pair{&a, std::size_t{0}}, std::pair{&b, p.b}}) {
      matrix->clear_data();
      matrix->mutable_shm()->set_region(name);
      matrix->mutable_shm()->set_offset(static_cast<std::int64_t>(offset));
    }
    *request_.mutable_a() = std::move(a);
    *request_.mutable_b() = std::move(b);
    request_.mutable_output_shm()->set_region(name);
    request_.mutable_output_shm()->set_offset(static_cast<std::int64_t>(p.c));
  }

  // A POSIX shared-memory region of A, B and room for C, registered once.
  bool setup_shared_memory(v1::Matrix a, v1::Matrix b) {
    const Places p = plan_places(a, b);
    auto object = SharedMemoryObject::create(p.total);
    if (!object.ok()) return fail(object.status());
    shm_ = *std::move(object);
    std::memcpy(shm_.bytes().data(), a.data().data(), a.data().size());
    std::memcpy(shm_.bytes().data() + p.b, b.data().data(), b.data().size());
    const std::string name = absl::StrCat("bench-", index_);
    auto region = client_->register_shared_memory(name, shm_.key(),
                                                  static_cast<std::int64_t>(shm_.bytes().size()));
    if (!region.ok()) return fail(region.status());
    name_places(name, p, std::move(a), std::move(b));
    return true;
  }

  // The same places in GPU memory of this process: one allocation, exported by CUDA IPC and
  // registered once; the server reads A and B and writes C on the GPU.
  bool setup_cuda_ipc(v1::Matrix a, v1::Matrix b) {
    const Places p = plan_places(a, b);
    auto buffer = CudaIpcBuffer::create(p.total, shared_.context.options.cuda_device);
    if (!buffer.ok()) return fail(buffer.status());
    gpu_ = *std::move(buffer);
    for (auto [matrix, offset] : {std::pair{&a, std::size_t{0}}, std::pair{&b, p.b}}) {
      if (absl::Status st = gpu_.write(offset, matrix->data().data(), matrix->data().size());
          !st.ok()) {
        return fail(st);
      }
    }
    const std::string name = absl::StrCat("bench-gpu-", index_);
    v1::RegisterCudaMemoryRequest register_request;
    register_request.set_name(name);
    register_request.set_ipc_handle(gpu_.handle());
    register_request.set_byte_size(static_cast<std::int64_t>(gpu_.size()));
    auto region = client_->register_cuda_memory(register_request);
    if (!region.ok()) return fail(region.status());
    name_places(name, p, std::move(a), std::move(b));
    return true;
  }

  bool fail(const absl::Status& status) {
    record_.record_error(status_code_name(status.code()),
                         "setup: " + std::string(status.message()));
    setup_failed_ = true;
    return false;
  }

  Shared& shared_;
  int index_;
  Client* client_ = nullptr;
  std::unique_ptr<Client> own_client_;
  v1::MultiplyRequest request_;
  v1::TransposeRequest transpose_request_;  // a --workload with transposes
  std::mt19937_64 op_rng_;                  // seeded in the constructor: the workload's draws
  // With a batch: the MultiplyBatched request sent instead of request_.
  v1::MultiplyBatchedRequest batched_request_;
  // Resident mode: the operands, uploaded once and released at the end.
  std::vector<std::string> operand_handles_;
  // Kept results not yet released (--release inline, deferred or next-call), and a bound on
  // their bytes.
  std::vector<std::string> held_;
  std::int64_t held_bytes_ = 0;
  SharedMemoryObject shm_;  // shm mode
  CudaIpcBuffer gpu_;       // cuda-ipc mode
  std::string region_;      // its registered name
  std::int64_t operand_bytes_ = 0;
  std::int64_t result_bytes_ = 0;
  Recorder record_;
  bool setup_failed_ = false;
  std::int64_t bytes_received_ = 0;
};

void print_progress(const Shared& shared, const std::string& label, bool final_line) {
  const double s = std::max(1e-9, micros_between(shared.start, Clock::now()) / 1e6);
  const auto done = shared.done.load();
  std::fprintf(stderr, "\r%s  %lld done  %.1f req/s  %lld errors  %.1f s   %s", label.c_str(),
               static_cast<long long>(done), static_cast<double>(done) / s,
               static_cast<long long>(shared.failed.load()), s, final_line ? "\n" : "");
  std::fflush(stderr);
}

// A windowed run (--window-ms): closes a window every window_ms from the start, prints it (unless
// --no-progress), and stops the workers once the last windows agree or --max-trials have passed.
StabilityResult watch_windows(Shared& shared, const std::atomic<bool>& started, int workers) {
  const BenchOptions& o = shared.context.options;
  StabilityResult result;
  result.options = o.stability;
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto window = std::chrono::duration<double, std::milli>(o.stability.window_ms);
  Clock::time_point opened = shared.start;
  for (int i = 1; i <= o.stability.max_trials; ++i) {
    const Clock::time_point close =
        shared.start + std::chrono::duration_cast<Clock::duration>(window * i);
    while (Clock::now() < close && shared.finished.load() < workers) {
      std::this_thread::sleep_until(std::min(close, Clock::now() + std::chrono::milliseconds(20)));
    }
    const Clock::time_point now = Clock::now();
    if (now < close) break;  // the workers ended before the window did (every setup failed)
    result.windows.push_back(
        shared.windows->close(i, micros_between(opened, now) / 1e6, o.stability.percentile));
    opened = now;
    result.stable = is_stable(result.windows, o.stability.windows, o.stability.pct);
    if (o.progress) {
      std::fprintf(stderr, "%s  %s\n", shared.context.label.c_str(),
                   window_line(result.windows.back(), o.stability.percentile,
                               window_spread(result.windows, o.stability.windows), result.stable)
                       .c_str());
    }
    if (result.stable) break;
  }
  shared.stop = true;
  if (o.progress && !result.stable) {
    std::fprintf(stderr, "%s  not stable after %zu windows (--max-trials %d)\n",
                 shared.context.label.c_str(), result.windows.size(), o.stability.max_trials);
  }
  return result;
}

}  // namespace

RunResult run_one(const RunContext& context, const RunSpec& spec) {
  const BenchOptions& o = context.options;
  Shared shared(context, spec);
  shared.budget = o.requests;
  const bool windowed = o.stability.window_ms > 0;
  WindowCollector windows;
  if (windowed) shared.windows = &windows;
  // Resident results are released by a pool beside the workers, through the shared client or
  // one of its own.
  std::unique_ptr<Client> release_client;
  std::unique_ptr<Releaser> releaser;
  if (spec.mode == Mode::kResident && o.release == BenchOptions::Release::kBackground) {
    Client* client = context.shared_client;
    if (client == nullptr) {
      ClientOptions options = o.client;
      options.deadline = std::chrono::milliseconds(o.deadline_ms);
      options.channel_args = o.channel_args;
      options.max_message_bytes -= spec.concurrency + 1;  // its own connection (see Setup)
      if (auto c = Client::connect(o.target, options); c.ok()) release_client = *std::move(c);
      client = release_client.get();
    }
    if (client != nullptr) {
      // Each request's results (one, or a batch's) go in one Release call.
      const std::int64_t per_round = spec.concurrency;
      releaser = std::make_unique<Releaser>(
          *client, static_cast<int>(std::clamp<std::int64_t>(per_round / 4, 1, 8)),
          static_cast<std::size_t>(2 * per_round + 16));
      shared.releaser = releaser.get();
    }
  }
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < spec.concurrency; ++i) workers.push_back(std::make_unique<Worker>(shared, i));

  std::atomic<bool> started{false};
  double start_unix_s = 0;
  auto on_start = [&]() noexcept {
    shared.start = Clock::now();
    start_unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // A windowed run stops when stable, at the latest after its last window.
    const std::optional<double> seconds =
        windowed ? std::optional(o.stability.window_ms / 1e3 * o.stability.max_trials)
                 : o.duration_s;
    if (seconds) {
      shared.deadline = shared.start + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(*seconds));
    }
    started = true;
  };
  std::barrier sync(spec.concurrency, on_start);
  Clock::time_point last_finish = Clock::now();
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&, worker = w.get()] {
      const bool ready = worker->setup();
      if (ready) worker->warmup();
      sync.arrive_and_wait();
      if (ready) worker->timed_loop();
      const auto finish = Clock::now();
      if (ready) worker->teardown();
      static std::mutex mu;
      {
        std::lock_guard lock(mu);
        last_finish = std::max(last_finish, finish);
      }
      shared.finished.fetch_add(1);
    });
  }
  StabilityResult stability;
  if (windowed) {
    stability = watch_windows(shared, started, spec.concurrency);
  } else if (context.show_progress) {
    while (shared.finished.load() < spec.concurrency) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (started) print_progress(shared, context.label, false);
    }
  }
  for (auto& t : threads) t.join();
  if (context.show_progress && !windowed) print_progress(shared, context.label, true);

  RunResult result;
  result.stability = std::move(stability);
  result.workload = IsFloor(spec.mode) ? "-" : o.workload.name();
  if (releaser) releaser->finish(result.record);
  result.spec = spec;
  result.offered_rate = o.rate;
  result.poisson_arrivals = o.poisson_arrivals;
  result.wall_s = micros_between(shared.start, last_finish) / 1e6;
  result.start_unix_s = start_unix_s;
  for (const auto& w : workers) {
    result.record.merge(w->record());
    if (w->setup_failed()) ++result.setup_failures;
    if ((spec.mode == Mode::kInline || spec.mode == Mode::kStriped || spec.mode == Mode::kShm ||
         spec.mode == Mode::kCudaIpc) &&
        !w->setup_failed()) {
      result.bytes_sent_per_request = w->bytes_sent();
    }
    result.bytes_received_per_request =
        std::max(result.bytes_received_per_request, w->bytes_received());
  }
  return result;
}

}  // namespace matserve::client::bench
