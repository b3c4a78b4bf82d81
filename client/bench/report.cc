// Derived figures and the four renderings of matserve-bench's results (see report.h).
#include "client/bench/report.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/bench/histogram.h"

namespace matserve::client::bench {

RunReport make_report(RunResult result, int devices) {
  Recorder& r = result.record;
  RunReport rep;
  rep.spec = result.spec;
  rep.requests = r.requests();
  rep.ok = r.ok();
  rep.errors = r.errors();
  rep.setup_failures = result.setup_failures;
  rep.release_errors = r.release_errors;
  rep.errors_by_code = r.errors_by_code;
  rep.variants = r.variants;
  rep.devices_ran = r.devices;
  rep.precisions = r.precisions;
  rep.first_error = r.first_error;
  rep.wall_s = result.wall_s;
  rep.offered_rate = result.offered_rate;
  rep.poisson_arrivals = result.poisson_arrivals;
  rep.start_unix_s = result.start_unix_s;
  const double wall = std::max(result.wall_s, 1e-9);
  rep.requests_per_s = static_cast<double>(rep.requests) / wall;
  rep.ok_per_s = static_cast<double>(rep.ok) / wall;
  const Shape& s = result.spec.shape;
  const auto batch = static_cast<double>(result.spec.batch);
  // Products: the successful multiplies (all successful requests unless the workload mixes).
  const auto multiply = r.ops.find("multiply");
  const std::int64_t multiplies = r.ops.empty()             ? rep.ok
                                  : multiply != r.ops.end() ? multiply->second.ok()
                                                            : 0;
  const double multiplies_per_s = static_cast<double>(multiplies) / wall;
  rep.matrices_per_s = IsFloor(result.spec.mode) ? 0 : multiplies_per_s * batch;
  rep.gflops_per_s = multiplies_per_s * batch * 2.0 * static_cast<double>(s.m) *
                     static_cast<double>(s.n) * static_cast<double>(s.k) / 1e9;
  rep.workload = result.workload;
  for (auto& [name, op] : r.ops) {
    OpReport& o = rep.ops.emplace_back();
    o.name = name;
    o.ok = op.ok();
    o.errors = op.errors;
    o.requests = o.ok + o.errors;
    o.requests_per_s = static_cast<double>(o.requests) / wall;
    o.client_us = summarize(op.client_us);
  }
  rep.stability = std::move(result.stability);
  rep.histogram = bucketize(r.client_us);
  rep.seconds = per_second(r.completions, result.wall_s);
  rep.client_us = summarize(r.client_us);
  rep.server_total_us = summarize(r.server_total_us);
  rep.kernel_us = summarize(r.kernel_us);
  rep.overhead_us = summarize(r.overhead_us);
  rep.queue_us = summarize(r.queue_us);
  rep.h2d_us = summarize(r.host_to_device_us);
  rep.d2h_us = summarize(r.device_to_host_us);
  rep.release_us = summarize(r.release_us);
  rep.merged_requests = summarize(r.merged_requests);
  rep.batch_wait_us = summarize(r.batch_wait_us);
  rep.bytes_sent_per_request = result.bytes_sent_per_request;
  rep.bytes_received_per_request = result.bytes_received_per_request;
  if (rep.bytes_sent_per_request > 0 && rep.h2d_us.p50 > 0) {
    rep.h2d_gb_per_s = static_cast<double>(rep.bytes_sent_per_request) / (rep.h2d_us.p50 * 1e3);
  }
  rep.devices = std::max(devices, 1);
  rep.device_busy = r.kernel_us_sum / (wall * 1e6 * rep.devices);
  return rep;
}

namespace {

std::string us(double v) {
  return v >= 10000 ? absl::StrFormat("%.0f", v) : absl::StrFormat("%.1f", v);
}

std::string rate(double v) {
  return v >= 100 ? absl::StrFormat("%.0f", v) : absl::StrFormat("%.2f", v);
}

std::string errors(const RunReport& r) {
  if (r.errors == 0) return "0";
  std::string out;
  for (const auto& [code, n] : r.errors_by_code)
    absl::StrAppend(&out, out.empty() ? "" : " ", code, "=", n);
  return out;
}

// The mean of merged_requests, "-" when the server reported none.
std::string merged(const RunReport& r) {
  return r.merged_requests.count > 0 ? absl::StrFormat("%.2f", r.merged_requests.mean) : "-";
}

std::vector<std::string> column_headers() {
  return {"shape",   "mode",    "variant",    "prec",    "conc",     "batch",    "requests",
          "errors",  "req/s",   "matrices/s", "merged",  "p50 us",   "p90 us",   "p95 us",
          "p99 us",  "max us",  "srv p50",    "srv p99", "kern p50", "kern p99", "ovh p50",
          "ovh p99", "h2d p50", "H2D GB/s",   "busy%"};
}

std::vector<std::string> cells(const RunReport& r) {
  return {r.spec.shape.name(),
          ModeName(r.spec.mode),
          r.spec.variant,
          r.spec.precision,
          absl::StrCat(r.spec.concurrency),
          absl::StrCat(r.spec.batch),
          absl::StrCat(r.requests),
          errors(r),
          rate(r.requests_per_s),
          IsFloor(r.spec.mode) ? "-" : rate(r.matrices_per_s),
          merged(r),
          us(r.client_us.p50),
          us(r.client_us.p90),
          us(r.client_us.p95),
          us(r.client_us.p99),
          us(r.client_us.max),
          us(r.server_total_us.p50),
          us(r.server_total_us.p99),
          us(r.kernel_us.p50),
          us(r.kernel_us.p99),
          us(r.overhead_us.p50),
          us(r.overhead_us.p99),
          us(r.h2d_us.p50),
          r.h2d_gb_per_s > 0 ? absl::StrFormat("%.2f", r.h2d_gb_per_s) : "-",
          absl::StrFormat("%.1f", 100 * r.device_busy)};
}

void sep(std::ostream& out, const std::vector<std::size_t>& widths) {
  for (std::size_t i = 0; i < widths.size(); ++i)
    out << (i ? "-+-" : "") << std::string(widths[i], '-');
  out << "\n";
}

}  // namespace

void print_table(std::ostream& out, const std::vector<RunReport>& runs) {
  const auto headers = column_headers();
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : runs) rows.push_back(cells(r));
  std::vector<std::size_t> widths;
  for (const auto& h : headers) widths.push_back(h.size());
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      out << (i ? " | " : "") << std::string(widths[i] - cells[i].size(), ' ') << cells[i];
    }
    out << "\n";
  };
  line(headers);
  sep(out, widths);
  for (const auto& row : rows) line(row);
  out << "latency: client round trip (p50..max) and server total/kernel/overhead/host-to-device in"
         " us, nearest-rank\npercentiles over successful timed requests; busy% = sum(kernel)/(wall "
         "x"
         " devices): a lower bound on\ndevice busy while kernels do not overlap (over 100% means"
         " concurrent kernels shared the device).\nmatrices/s = products per second (successful"
         " req/s x batch); merged = mean requests per launch\nas the replies report it (the"
         " server's dynamic batching; 1 = each ran alone).\n";
  for (const auto& r : runs) {
    if (!r.first_error.empty()) {
      out << "errors in " << r.spec.shape.name() << " " << ModeName(r.spec.mode) << " "
          << r.spec.variant << " " << r.spec.precision << " c=" << r.spec.concurrency << ": "
          << errors(r) << " (first: " << r.first_error << ")\n";
    }
  }
}

void print_markdown(std::ostream& out, const std::vector<RunReport>& runs,
                    const ServerDescription& server) {
  out << "Server " << server.target << ": backend " << server.backend << ", version "
      << server.version << " (" << server.git_sha << ")";
  for (const auto& d : server.devices) out << ", " << d;
  out << ". Times in us (client = round trip; srv = server total; kern = kernel; ovh = srv - kern;"
         " h2d = host to device), nearest-rank percentiles over successful timed requests;"
         " H2D GB/s = bytes sent per request / median h2d; busy% = sum(kernel) / (wall x devices),"
         " a lower bound on device busy while kernels do not overlap (over 100% means concurrent"
         " kernels shared the device); matrices/s = products per second (successful req/s x"
         " batch); merged = mean requests per launch as the replies report it (the server's"
         " dynamic batching; 1 = each ran alone).\n\n|";
  const auto headers = column_headers();
  for (const auto& h : headers) out << " " << h << " |";
  out << "\n|";
  for (std::size_t i = 0; i < headers.size(); ++i) out << (i < 5 ? " --- |" : " ---: |");
  out << "\n";
  for (const auto& r : runs) {
    out << "|";
    for (const auto& c : cells(r)) out << " " << c << " |";
    out << "\n";
  }
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(ch));
        } else {
          out += ch;
        }
    }
  }
  return out;
}

namespace {

std::string Q(const std::string& s) {
  return "\"" + json_escape(s) + "\"";
}

std::string num(double v) {
  return absl::StrFormat("%.6g", v);
}

}  // namespace

std::string summary_json(const Summary& s) {
  return absl::StrCat("{\"count\": ", s.count, ", \"min\": ", num(s.min),
                      ", \"mean\": ", num(s.mean), ", \"p50\": ", num(s.p50),
                      ", \"p90\": ", num(s.p90), ", \"p95\": ", num(s.p95),
                      ", \"p99\": ", num(s.p99), ", \"max\": ", num(s.max), "}");
}

std::string operations_json(const std::vector<OpReport>& ops) {
  std::string out = "{";
  for (const OpReport& op : ops) {
    absl::StrAppend(&out, out.size() > 1 ? ", " : "", Q(op.name), ": {\"requests\": ", op.requests,
                    ", \"ok\": ", op.ok, ", \"errors\": ", op.errors,
                    ", \"requests_per_s\": ", num(op.requests_per_s),
                    ", \"client_us\": ", summary_json(op.client_us), "}");
  }
  return out + "}";
}

namespace {

std::string json(const std::map<std::string, std::int64_t>& m) {
  std::string out = "{";
  for (const auto& [key, n] : m) absl::StrAppend(&out, out.size() > 1 ? ", " : "", Q(key), ": ", n);
  return out + "}";
}

}  // namespace

void write_json(std::ostream& out, const std::vector<RunReport>& runs,
                const ServerDescription& server, const std::string& command_line,
                const std::string& client_mode) {
  out << "{\n  \"tool\": \"matserve-bench\",\n  \"command_line\": " << Q(command_line)
      << ",\n  \"client\": " << Q(client_mode) << ",\n  \"percentiles\": \"nearest-rank\""
      << ",\n  \"server\": {\"target\": " << Q(server.target)
      << ", \"backend\": " << Q(server.backend) << ", \"version\": " << Q(server.version)
      << ", \"git_sha\": " << Q(server.git_sha) << ", \"devices\": [";
  for (std::size_t i = 0; i < server.devices.size(); ++i)
    out << (i ? ", " : "") << Q(server.devices[i]);
  out << "]},\n  \"runs\": [";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunReport& r = runs[i];
    const Shape& s = r.spec.shape;
    out << (i ? "," : "") << "\n    {\"shape\": " << Q(s.name()) << ", \"m\": " << s.m
        << ", \"n\": " << s.n << ", \"k\": " << s.k << ", \"mode\": " << Q(ModeName(r.spec.mode))
        << ", \"variant\": " << Q(r.spec.variant) << ", \"precision\": " << Q(r.spec.precision)
        << ", \"concurrency\": " << r.spec.concurrency << ", \"batch\": " << r.spec.batch
        << ",\n     \"requests\": " << r.requests << ", \"ok\": " << r.ok
        << ", \"errors\": " << r.errors << ", \"errors_by_code\": " << json(r.errors_by_code)
        << ", \"setup_failures\": " << r.setup_failures
        << ", \"release_errors\": " << r.release_errors << ", \"first_error\": " << Q(r.first_error)
        << ",\n     \"variants_ran\": " << json(r.variants)
        << ", \"devices_ran\": " << json(r.devices_ran)
        << ", \"precisions_ran\": " << json(r.precisions) << ",\n     \"wall_s\": " << num(r.wall_s)
        << ", \"start_unix_s\": " << absl::StrFormat("%.3f", r.start_unix_s) << ", \"load\": "
        << Q(!r.offered_rate      ? "closed"
             : r.poisson_arrivals ? "open, poisson arrivals"
                                  : "open, constant arrivals")
        << ", \"offered_rate\": " << (r.offered_rate ? num(*r.offered_rate) : "null")
        << ", \"requests_per_s\": " << num(r.requests_per_s)
        << ", \"ok_per_s\": " << num(r.ok_per_s) << ", \"gflops_per_s\": " << num(r.gflops_per_s)
        << ", \"matrices_per_s\": " << num(r.matrices_per_s) << ", \"merged_requests_mean\": "
        << (r.merged_requests.count > 0 ? num(r.merged_requests.mean) : "null")
        << ",\n     \"client_us\": " << summary_json(r.client_us)
        << ",\n     \"server_total_us\": " << summary_json(r.server_total_us)
        << ",\n     \"kernel_us\": " << summary_json(r.kernel_us)
        << ",\n     \"overhead_us\": " << summary_json(r.overhead_us)
        << ",\n     \"queue_us\": " << summary_json(r.queue_us)
        << ",\n     \"host_to_device_us\": " << summary_json(r.h2d_us)
        << ",\n     \"device_to_host_us\": " << summary_json(r.d2h_us)
        << ",\n     \"release_us\": " << summary_json(r.release_us)
        << ",\n     \"batch_wait_us\": " << summary_json(r.batch_wait_us)
        << ",\n     \"bytes_sent_per_request\": " << r.bytes_sent_per_request
        << ", \"bytes_received_per_request\": " << r.bytes_received_per_request
        << ", \"h2d_gb_per_s\": " << (r.h2d_gb_per_s > 0 ? num(r.h2d_gb_per_s) : "null")
        << ", \"devices\": " << r.devices << ", \"device_busy_lower_bound\": " << num(r.device_busy)
        << ",\n     \"workload\": " << Q(r.workload)
        << ", \"operations\": " << operations_json(r.ops)
        << ",\n     \"stability\": " << stability_json(r.stability) << "}";
  }
  out << "\n  ]\n}\n";
}

namespace {

// "multiply=80;transpose=20": successful requests per operation (a CSV cell, so no commas).
std::string ok_by_operation(const RunReport& r) {
  return absl::StrJoin(r.ops, ";", [](std::string* out, const OpReport& op) {
    absl::StrAppend(out, op.name, "=", op.ok);
  });
}

// "yes" or "no" for a windowed run, empty otherwise.
std::string stable(const RunReport& r) {
  if (r.stability.options.window_ms <= 0) return "";
  return r.stability.stable ? "yes" : "no";
}

}  // namespace

void write_csv(std::ostream& out, const std::vector<RunReport>& runs) {
  out << "shape,m,n,k,mode,variant,precision,concurrency,requests,ok,errors,errors_by_code,wall_s,"
         "requests_per_s,ok_per_s,gflops_per_s,client_p50_us,client_p90_us,client_p95_us,"
         "client_p99_us,client_max_us,server_total_p50_us,server_total_p99_us,kernel_p50_us,"
         "kernel_p99_us,overhead_p50_us,overhead_p99_us,queue_p50_us,h2d_p50_us,h2d_p99_us,"
         "d2h_p50_us,release_p50_us,bytes_sent_per_request,h2d_gb_per_s,devices,"
         "device_busy_lower_bound,batch,matrices_per_s,merged_requests_mean,batch_wait_p50_us,"
         "workload,ok_by_operation,stable,windows\n";
  for (const RunReport& r : runs) {
    const Shape& s = r.spec.shape;
    std::string codes;
    for (const auto& [code, n] : r.errors_by_code)
      absl::StrAppend(&codes, codes.empty() ? "" : ";", code, "=", n);
    const std::string merged_mean =
        r.merged_requests.count > 0 ? num(r.merged_requests.mean) : "";  // empty: not reported
    out << absl::StrJoin(
               std::vector<std::string>{
                   s.name(), absl::StrCat(s.m), absl::StrCat(s.n), absl::StrCat(s.k),
                   ModeName(r.spec.mode), r.spec.variant, r.spec.precision,
                   absl::StrCat(r.spec.concurrency), absl::StrCat(r.requests), absl::StrCat(r.ok),
                   absl::StrCat(r.errors), codes, num(r.wall_s), num(r.requests_per_s),
                   num(r.ok_per_s), num(r.gflops_per_s), num(r.client_us.p50), num(r.client_us.p90),
                   num(r.client_us.p95), num(r.client_us.p99), num(r.client_us.max),
                   num(r.server_total_us.p50), num(r.server_total_us.p99), num(r.kernel_us.p50),
                   num(r.kernel_us.p99), num(r.overhead_us.p50), num(r.overhead_us.p99),
                   num(r.queue_us.p50), num(r.h2d_us.p50), num(r.h2d_us.p99), num(r.d2h_us.p50),
                   num(r.release_us.p50), absl::StrCat(r.bytes_sent_per_request),
                   num(r.h2d_gb_per_s), absl::StrCat(r.devices), num(r.device_busy),
                   absl::StrCat(r.spec.batch), num(r.matrices_per_s), merged_mean,
                   num(r.batch_wait_us.p50),
                   // A mix names its weights with commas.
                   absl::StrCat("\"", r.workload, "\""), ok_by_operation(r), stable(r),
                   absl::StrCat(r.stability.windows.size())},
               ",")
        << "\n";
  }
}

}  // namespace matserve::client::bench
