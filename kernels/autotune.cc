// The autotune table: TSV parsing and printing, shape classes, and the per-class choice.
// See autotune.h.
#include "kernels/autotune.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace matserve::kernels {
namespace {

char bucket(std::int64_t x) {
  if (x <= 32) return 't';
  if (x <= 256) return 's';
  if (x <= 1536) return 'm';
  if (x <= 6144) return 'l';
  return 'h';
}

}  // namespace

std::string gemm_shape_class(std::int64_t m, std::int64_t n, std::int64_t k) {
  return std::string{'m', bucket(m), '_', 'n', bucket(n), '_', 'k', bucket(k)};
}

std::string gemm_batch_shape_class(std::int64_t m, std::int64_t n, std::int64_t k) {
  return "batch_" + gemm_shape_class(m, n, k);
}

absl::StatusOr<Precision> parse_precision_name(std::string_view name) {
  for (Precision p : kEveryPrecision) {
    if (precision_name(p) == name) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown precision '", std::string(name), "'"));
}

absl::StatusOr<AutotuneTable> AutotuneTable::parse(std::string_view tsv) {
  AutotuneTable t;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(tsv.data(), tsv.size()), '\n')) {
    ++line_no;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    const auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("autotune table line ", line_no, ": ", std::string(why)));
    };
    if (f.size() != 5) return bad("want 5 tab-separated fields");
    AutotuneEntry e;
    e.device = f[0];
    absl::StatusOr<Precision> p = parse_precision_name(f[1]);
    if (!p.ok()) return bad(std::string(p.status().message()));
    e.precision = *p;
    e.shape_class = f[2];
    e.variant = f[3];
    if (e.device.empty() || e.shape_class.empty() || e.variant.empty()) return bad("empty field");
    if (!absl::SimpleAtod(f[4], &e.gflops) || !(e.gflops >= 0.0)) return bad("bad GFLOP/s");
    t.add(std::move(e));
  }
  return t;
}

absl::StatusOr<AutotuneTable> AutotuneTable::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read autotune table ", path));
  std::stringstream s;
  s << in.rdbuf();
  return parse(s.str());
}

void AutotuneTable::add(AutotuneEntry e) {
  entries_.push_back(std::move(e));
}

std::string AutotuneTable::to_tsv() const {
  std::string out = "# device\tprecision\tshape_class\tvariant\tgflops\n";
  for (const AutotuneEntry& e : entries_) {
    absl::StrAppend(&out, e.device, "\t", std::string(precision_name(e.precision)), "\t",
                    e.shape_class, "\t", e.variant, "\t", e.gflops, "\n");
  }
  return out;
}

std::vector<std::string> AutotuneTable::ranked(std::string_view device, Precision precision,
                                               std::string_view shape_class) const {
  std::map<std::string, std::pair<double, int>> sums;  // variant -> (sum of GFLOP/s, count)
  for (const AutotuneEntry& e : entries_) {
    if (e.device != device || e.precision != precision || e.shape_class != shape_class) continue;
    auto& s = sums[e.variant];
    s.first += e.gflops;
    s.second += 1;
  }
  std::vector<std::pair<double, std::string>> by_rate;
  by_rate.reserve(sums.size());
  for (const auto& [variant, s] : sums) by_rate.emplace_back(s.first / s.second, variant);
  std::stable_sort(by_rate.begin(), by_rate.end(), [](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first > y.first;
    return x.second == "cublas" && y.second != "cublas";
  });
  std::vector<std::string> out;
  out.reserve(by_rate.size());
  for (auto& [rate, variant] : by_rate) out.push_back(std::move(variant));
  return out;
}

std::string AutotuneTable::choose(std::string_view device, Precision precision, std::int64_t m,
                                  std::int64_t n, std::int64_t k,
                                  const std::function<bool(std::string_view)>& usable) const {
  for (std::string& v : ranked(device, precision, gemm_shape_class(m, n, k))) {
    if (!usable || usable(v)) return std::move(v);
  }
  return "cublas";
}

}  // namespace matserve::kernels
