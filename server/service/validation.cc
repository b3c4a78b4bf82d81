// Request validation: see validation.h. Checks run in this order: enums, then each dimension
// against [1, max_dimension], then byte sizes (products checked for 64-bit overflow, so even a
// --max_dimension near 2^31 cannot wrap a size into a small number), then byte lengths, then
// agreement between operands.
#include "server/service/validation.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/precision.h"
#include "server/runtime/quote.h"
#include "server/service/operand_resolution.h"
#include "server/service/proto_convert.h"

namespace matserve::server {
namespace {

using absl::StrCat;

std::string dims(std::int64_t r, std::int64_t c) {
  return StrCat(r, "x", c);
}

std::string name_of(v1::DataType t) {
  const std::string& n = v1::DataType_Name(t);
  return n.empty() ? StrCat(static_cast<int>(t)) : n;
}

absl::Status check_dimension(const std::string& field, std::int64_t v,
                             const ServiceLimits& limits) {
  if (v < 1) return absl::InvalidArgumentError(StrCat(field, ": must be >= 1 (got ", v, ")"));
  if (v > limits.max_dimension) {
    return absl::InvalidArgumentError(StrCat(field, ": ", v, " exceeds the limit of ",
                                             limits.max_dimension, " (--max_dimension)"));
  }
  return absl::OkStatus();
}

// rows * cols * elem, or nullopt when it does not fit in 64 bits.
std::optional<std::int64_t> checked_bytes(std::int64_t rows, std::int64_t cols, std::int64_t elem) {
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(rows, cols, &elements) ||
      __builtin_mul_overflow(elements, elem, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

absl::Status check_size(const std::string& field, std::int64_t rows, std::int64_t cols,
                        std::int64_t elem, const ServiceLimits& limits) {
  const std::optional<std::int64_t> bytes = checked_bytes(rows, cols, elem);
  if (!bytes.has_value() || *bytes > limits.max_matrix_bytes) {
    const std::string size =
        bytes.has_value() ? StrCat(*bytes) : StrCat(rows, " * ", cols, " * ", elem, " (over 2^63)");
    return absl::ResourceExhaustedError(StrCat(field, ": ", size, " bytes exceeds the limit of ",
                                               limits.max_matrix_bytes,
                                               " bytes per matrix (--max_matrix_bytes)"));
  }
  return absl::OkStatus();
}

// Dtype, layout, dimensions and size limit of a matrix (not its data).
absl::StatusOr<HostMatrix> check_header(const std::string& field, const v1::Matrix& m,
                                        const ServiceLimits& limits, bool batched = false) {
  if (!batched && m.batch() > 1) {
    return absl::InvalidArgumentError(
        StrCat(field, ".batch: ", m.batch(),
               " matrices where one is taken (several products: MultiplyBatched)"));
  }
  const std::optional<kernels::DType> dtype = from_proto(m.dtype());
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(
        StrCat(field, ".dtype: must be FP64, FP32, FP16, BF16 or FP8_E4M3 (got ",
               name_of(m.dtype()), ")"));
  }
  const std::optional<kernels::Layout> layout = from_proto(m.layout());
  if (!layout.has_value()) {
    return absl::InvalidArgumentError(StrCat(field, ".layout: must be ROW_MAJOR or COL_MAJOR (got ",
                                             static_cast<int>(m.layout()), ")"));
  }
  if (absl::Status s = check_dimension(field + ".rows", m.rows(), limits); !s.ok()) return s;
  if (absl::Status s = check_dimension(field + ".cols", m.cols(), limits); !s.ok()) return s;
  const auto elem = static_cast<std::int64_t>(kernels::dtype_size(*dtype));
  if (absl::Status s = check_size(field, m.rows(), m.cols(), elem, limits); !s.ok()) return s;
  HostMatrix h;
  h.rows = m.rows();
  h.cols = m.cols();
  h.dtype = *dtype;
  h.layout = *layout;
  return h;
}

// A whole inline matrix: the header checks plus its byte length (Matrix.shm is taken by operand()
// and validate_matrix(), which know the caller's regions).
absl::StatusOr<HostMatrix> check_matrix(const std::string& field, const v1::Matrix& m,
                                        const ServiceLimits& limits) {
  absl::StatusOr<HostMatrix> h = check_header(field, m, limits);
  if (!h.ok()) return h;
  const auto elem = static_cast<std::int64_t>(kernels::dtype_size(h->dtype));
  const std::int64_t expected = m.rows() * m.cols() * elem;
  if (m.has_shm()) {
    return absl::InvalidArgumentError(StrCat(
        field,
        ".shm: shared memory is for Upload, Multiply and Transpose; send the bytes instead"));
  }
  if (static_cast<std::int64_t>(m.data().size()) != expected) {
    return absl::InvalidArgumentError(StrCat(field, ".data: ", m.data().size(), " bytes, expected ",
                                             expected, " (rows ", m.rows(), " * cols ", m.cols(),
                                             " * ", elem, " bytes per ", name_of(m.dtype()), ")"));
  }
  h->data = std::span<const std::byte>(reinterpret_cast<const std::byte*>(m.data().data()),
                                       m.data().size());
  return h;
}

// Exactly one of an inline matrix and a handle: `field` or `field_handle`.
absl::Status one_of(const std::string& field, bool has_inline, const std::string& handle,
                    bool required) {
  if (has_inline && !handle.empty()) {
    return absl::InvalidArgumentError(
        StrCat(field, " and ", field, "_handle: give one of them, not both"));
  }
  if (required && !has_inline && handle.empty()) {
    return absl::InvalidArgumentError(
        StrCat(field, ": missing (send ", field, " or ", field, "_handle)"));
  }
  return absl::OkStatus();
}

// The operand from an inline matrix or a locked resident one.
absl::StatusOr<Operand> operand(const std::string& field, const v1::Matrix& m,
                                const std::shared_ptr<ResidentMatrix>& resident,
                                const ServiceLimits& limits, SharedMemoryPlaces& shm) {
  Operand o;
  if (resident != nullptr) {
    o.rows = resident->rows;
    o.cols = resident->cols;
    o.dtype = resident->dtype;
    o.layout = resident->layout;
    o.resident = resident;
    return o;
  }
  if (m.has_shm()) {
    absl::StatusOr<HostMatrix> h = check_header(field, m, limits);
    if (!h.ok()) return h.status();
    if (!m.data().empty()) {
      return absl::InvalidArgumentError(
          StrCat(field, ".data and ", field, ".shm: give one of them, not both"));
    }
    absl::StatusOr<SharedMemoryPlaces::Place> p =
        shm.place(field + ".shm", m.shm(), static_cast<std::int64_t>(h->bytes()), false);
    if (!p.ok()) return p.status();
    static_cast<HostMatrix&>(o) = *h;
    if (p->region->is_device()) {
      o.resident = device_view(*p, h->rows, h->cols, h->dtype, h->layout);
    } else {
      o.data = p->range;
    }
    return o;
  }
  absl::StatusOr<HostMatrix> h = check_matrix(field, m, limits);
  if (!h.ok()) return h.status();
  static_cast<HostMatrix&>(o) = *h;
  return o;
}

absl::Status check_finite(const std::string& field, double v) {
  if (!std::isfinite(v)) {
    return absl::InvalidArgumentError(StrCat(field, ": must be a finite number (got ", v, ")"));
  }
  return absl::OkStatus();
}

// The host memory of a job's float64 reference, against --max_verify_bytes. Sizes are in double:
// with dimensions up to 2^31, 8 * m * n can pass 2^63.
absl::StatusOr<std::int64_t> verify_bytes(double bytes, const ServiceLimits& limits) {
  if (bytes > static_cast<double>(limits.max_verify_bytes)) {
    return absl::InvalidArgumentError(StrCat(
        "verify: the float64 reference needs ", bytes, " bytes of server memory, above the ",
        "limit of ", limits.max_verify_bytes,
        " (--max_verify_bytes); check the result on the client or verify a smaller problem"));
  }
  return static_cast<std::int64_t>(bytes);
}

double resident_bytes(const Operand& o) {
  return o.is_resident() ? static_cast<double>(o.bytes()) : 0.0;
}

// A GEMM reference: op(A), op(B) and the m x n result as dense doubles, host copies of resident
// operands (and of a kept result), and 2*m*n*k flops of one CPU's time.
// A batch's products are checked one after another: the flops add up, the memory does not.
absl::StatusOr<std::int64_t> gemm_verify_bytes(const GemmJob& job, const ServiceLimits& limits,
                                               std::int64_t products) {
  const auto m = static_cast<double>(job.m());
  const auto n = static_cast<double>(job.n());
  const auto k = static_cast<double>(job.k());
  const double flops = 2.0 * m * n * k * static_cast<double>(products);
  if (flops > limits.max_verify_flops) {
    return absl::InvalidArgumentError(StrCat(
        "verify: the float64 reference of ", products > 1 ? StrCat(products, " x ") : "this ",
        dims(job.m(), job.n()), "x", job.k(), products > 1 ? " products is " : " product is ",
        flops, " flops of server CPU, above the limit of ", limits.max_verify_flops,
        " (--max_verify_flops); check the result on the client or verify a smaller "
        "problem"));
  }
  double bytes = 8.0 * (m * k + k * n + m * n) + resident_bytes(job.a) + resident_bytes(job.b);
  if (job.c.has_value() && job.beta != 0.0) bytes += resident_bytes(*job.c);
  if (job.keep_result) bytes += static_cast<double>(job.out_bytes());
  return verify_bytes(bytes, limits);
}

// A transpose reference: the result as dense doubles, plus host copies of a resident input and of
// a result kept on the device (or transposed in place).
absl::StatusOr<std::int64_t> transpose_verify_bytes(const TransposeJob& job,
                                                    const ServiceLimits& limits) {
  double bytes = 8.0 * static_cast<double>(job.a.rows) * static_cast<double>(job.a.cols) +
                 resident_bytes(job.a);
  if (job.keep_result || job.in_place) bytes += static_cast<double>(job.out_bytes());
  return verify_bytes(bytes, limits);
}

// A result returned in the reply must fit in one message: refused before any work, instead of
// being computed and then dropped by gRPC ("Sent message larger than max"). 1 KiB of the message
// is left for the reply's other fields.
absl::Status check_inline_result(const char* field, std::size_t bytes,
                                 const ServiceLimits& limits) {
  if (static_cast<std::int64_t>(bytes) <= limits.max_message_bytes - 1024) return absl::OkStatus();
  return absl::ResourceExhaustedError(StrCat(
      field, ": ", bytes, " bytes do not fit in one reply of at most ", limits.max_message_bytes,
      " bytes (--max_message_bytes): use keep_result, then DownloadStream"));
}

// What a result is, for placing it.
struct ResultShape {
  const char* field;  // in messages: "c (the result)"
  std::int64_t rows;
  std::int64_t cols;
  kernels::DType dtype;
  kernels::Layout layout;
  std::int64_t products;  // results one after another (a batch's), else 1
  std::size_t bytes;      // of all of them
};

// Where a result goes when it is not kept on the device (and not written over its input): the
// output_shm place (host shared memory, or CUDA memory for a single result), else the reply.
struct ResultPlace {
  std::span<std::byte> shm_out;
  std::shared_ptr<ResidentMatrix> device_out;
};

// The one rule for a result's place, for every compute RPC. `output_shm` is null when the request
// names none; a caller refuses output_shm with a result that `stays` (kept or in place) first,
// with its own fields in the message. A result that goes to the reply must fit in it.
absl::StatusOr<ResultPlace> place_result(const v1::SharedMemoryRef* output_shm, bool stays,
                                         const ResultShape& r, const ServiceLimits& limits,
                                         SharedMemoryPlaces& shm) {
  ResultPlace place;
  if (output_shm != nullptr) {
    absl::StatusOr<SharedMemoryPlaces::Place> out =
        shm.place("output_shm", *output_shm, static_cast<std::int64_t>(r.bytes), true);
    if (!out.ok()) return out.status();
    if (out->region->is_device()) {
      if (r.products > 1) {
        return absl::InvalidArgumentError(
            "output_shm: a batch's results go to host shared memory or the reply (not CUDA "
            "memory)");
      }
      place.device_out = device_view(*out, r.rows, r.cols, r.dtype, r.layout);
    } else {
      place.shm_out = out->range;
    }
  } else if (!stays) {
    if (absl::Status s = check_inline_result(r.field, r.bytes, limits); !s.ok()) return s;
  }
  return place;
}

// The one rule for verify's place: the reference reads the result on the host, so a result in
// CUDA memory cannot be verified.
absl::Status check_verify_place(bool verify, const std::shared_ptr<ResidentMatrix>& device_out) {
  if (verify && device_out != nullptr) {
    return absl::InvalidArgumentError(
        "verify: not with a result in CUDA memory (the server does not read it back; check it "
        "where it is)");
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// op(A) and op(B) agree: one dtype, matching inner dimensions.
absl::Status check_operands_agree(const GemmJob& job) {
  if (job.b.dtype != job.a.dtype) {
    return absl::InvalidArgumentError(
        StrCat("b.dtype: ", name_of(to_proto(job.b.dtype)), " differs from a.dtype ",
               name_of(to_proto(job.a.dtype)), " (both operands share one type)"));
  }
  const std::int64_t k_b = job.transpose_b ? job.b.cols : job.b.rows;
  if (job.k() != k_b) {
    return absl::InvalidArgumentError(
        StrCat("b: inner dimensions do not agree: op(A) is ", dims(job.m(), job.k()), ", op(B) is ",
               dims(k_b, job.n()), " (transpose_a=", job.transpose_a ? "true" : "false",
               ", transpose_b=", job.transpose_b ? "true" : "false", ")"));
  }
  return absl::OkStatus();
}

// The caller's dequantization scales of e4m3 data, folded into alpha (the product of the data as
// sent, times a_scale * b_scale, is the product meant).
absl::Status apply_fp8_scales(bool has_a, double a_scale, bool has_b, double b_scale,
                              GemmJob& job) {
  if (!has_a && !has_b) return absl::OkStatus();
  const char* field = has_a ? "a_scale" : "b_scale";
  if (job.a.dtype != kernels::DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        StrCat(field, ": only for FP8_E4M3 operands (got ", name_of(to_proto(job.a.dtype)),
               "; data of other types is quantized on the device with scales of its own)"));
  }
  for (const auto& [name, given, value] :
       {std::tuple{"a_scale", has_a, a_scale}, std::tuple{"b_scale", has_b, b_scale}}) {
    if (given && !(std::isfinite(value) && value > 0)) {
      return absl::InvalidArgumentError(
          StrCat(name, ": must be a finite number > 0 (got ", value, ")"));
    }
  }
  job.alpha *= (has_a ? a_scale : 1.0) * (has_b ? b_scale : 1.0);
  return check_finite("alpha * a_scale * b_scale", job.alpha);
}

// The options Multiply and MultiplyBatched share (same field names in both messages): compute
// mode, output type and layout, alpha and beta, and the result's size limit.
template <typename Request>
absl::Status apply_options(const Request& request, const ServiceLimits& limits, GemmJob& job) {
  const std::optional<kernels::Compute> compute = from_proto(request.compute());
  if (!compute.has_value()) {
    return absl::InvalidArgumentError(
        StrCat("compute: unknown compute mode ", static_cast<int>(request.compute())));
  }
  absl::StatusOr<kernels::Precision> precision = kernels::resolve_precision(job.a.dtype, *compute);
  if (!precision.ok()) return precision.status();
  job.precision = *precision;
  job.out_dtype = job.a.dtype;
  if (job.a.dtype == kernels::DType::kF8E4M3 &&
      request.output_dtype() == v1::DATA_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "output_dtype: required for FP8_E4M3 inputs (FP32, BF16 or FP16; results are not stored in "
        "fp8)");
  }
  if (request.output_dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    const std::optional<kernels::DType> out = from_proto(request.output_dtype());
    if (!out.has_value()) {
      return absl::InvalidArgumentError(
          StrCat("output_dtype: unknown data type ", static_cast<int>(request.output_dtype())));
    }
    if (absl::Status s = kernels::check_output_dtype(job.a.dtype, *out); !s.ok()) return s;
    job.out_dtype = *out;
  }
  const std::optional<kernels::Layout> out_layout = from_proto(request.output_layout());
  if (!out_layout.has_value()) {
    return absl::InvalidArgumentError(StrCat("output_layout: must be ROW_MAJOR or COL_MAJOR (got ",
                                             static_cast<int>(request.output_layout()), ")"));
  }
  job.out_layout = *out_layout;
  job.alpha = request.has_alpha() ? request.alpha() : 1.0;
  job.beta = request.has_beta() ? request.beta() : 0.0;
  if (absl::Status s = check_finite("alpha", job.alpha); !s.ok()) return s;
  if (absl::Status s = check_finite("beta", job.beta); !s.ok()) return s;
  if (absl::Status s = apply_fp8_scales(request.has_a_scale(), request.a_scale(),
                                        request.has_b_scale(), request.b_scale(), job);
      !s.ok()) {
    return s;
  }
  // The output obeys the same limits as the inputs (m and n are already within max_dimension).
  return check_size("c (the result)", job.m(), job.n(),
                    static_cast<std::int64_t>(kernels::dtype_size(job.out_dtype)), limits);
}

// C (when given) is m x n in the output's dtype and layout.
absl::Status check_c(const Operand& c, const GemmJob& job) {
  if (c.rows != job.m() || c.cols != job.n()) {
    return absl::InvalidArgumentError(StrCat("c: is ", dims(c.rows, c.cols), ", expected ",
                                             dims(job.m(), job.n()), " (m x n of op(A)*op(B))"));
  }
  if (c.dtype != job.out_dtype) {
    return absl::InvalidArgumentError(StrCat("c.dtype: ", name_of(to_proto(c.dtype)),
                                             " differs from the output type ",
                                             std::string(kernels::dtype_name(job.out_dtype))));
  }
  if (c.layout != job.out_layout) {
    return absl::InvalidArgumentError(
        "c.layout: must equal output_layout (the result is written in C's place)");
  }
  return absl::OkStatus();
}

// Whether the request keeps its result(s) on the device.
bool keeps_result(const v1::MultiplyRequest& r) {
  return r.keep_result();
}
bool keeps_result(const v1::MultiplyBatchedRequest& r) {
  return r.keep_result() || r.keep_stacked();
}

// Where the results go (`products` of them): kept, a shared-memory place, or the reply.
template <typename Request>
absl::Status place_gemm_result(const Request& request, const ServiceLimits& limits,
                               SharedMemoryPlaces& shm, std::int64_t products, GemmJob& job) {
  job.verify = request.verify();
  job.keep_result = keeps_result(request);
  if (request.has_output_shm() && job.keep_result) {
    return absl::InvalidArgumentError(
        "output_shm: not with keep_result or keep_stacked (the result goes to one place)");
  }
  absl::StatusOr<ResultPlace> place =
      place_result(request.has_output_shm() ? &request.output_shm() : nullptr, job.keep_result,
                   {.field = "c (the result)",
                    .rows = job.m(),
                    .cols = job.n(),
                    .dtype = job.out_dtype,
                    .layout = job.out_layout,
                    .products = products,
                    .bytes = job.out_bytes() * static_cast<std::size_t>(products)},
                   limits, shm);
  if (!place.ok()) return place.status();
  job.shm_out = place->shm_out;
  job.device_out = std::move(place->device_out);
  job.regions = shm.take_regions();
  return check_verify_place(job.verify, job.device_out);
}

}  // namespace

absl::StatusOr<GemmJob> validate_multiply(const v1::MultiplyRequest& request,
                                          const ServiceLimits& limits,
                                          const HandleResolver& resolve,
                                          const RegionResolver* regions) {
  if (absl::Status s = one_of("a", request.has_a(), request.a_handle(), true); !s.ok()) return s;
  if (absl::Status s = one_of("b", request.has_b(), request.b_handle(), true); !s.ok()) return s;
  if (absl::Status s = one_of("c", request.has_c(), request.c_handle(), false); !s.ok()) return s;
  GemmJob job;
  SharedMemoryPlaces shm(regions);
  ResidentOperands residents(resolve);
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> ra =
      residents.add("a_handle", request.a_handle());
  if (!ra.ok()) return ra.status();
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> rb =
      residents.add("b_handle", request.b_handle());
  if (!rb.ok()) return rb.status();
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> rc =
      residents.add("c_handle", request.c_handle());
  if (!rc.ok()) return rc.status();
  job.locks = residents.lock(/*exclusive=*/false);
  absl::StatusOr<Operand> a = operand("a", request.a(), *ra, limits, shm);
  if (!a.ok()) return a.status();
  absl::StatusOr<Operand> b = operand("b", request.b(), *rb, limits, shm);
  if (!b.ok()) return b.status();
  job.a = *std::move(a);
  job.b = *std::move(b);
  job.transpose_a = request.transpose_a();
  job.transpose_b = request.transpose_b();
  if (absl::Status s = check_operands_agree(job); !s.ok()) return s;
  if (absl::Status s = apply_options(request, limits, job); !s.ok()) return s;
  if (request.has_c() || *rc != nullptr) {
    absl::StatusOr<Operand> c = operand("c", request.c(), *rc, limits, shm);
    if (!c.ok()) return c.status();
    if (absl::Status s = check_c(*c, job); !s.ok()) return s;
    job.c = *std::move(c);
  }
  if (absl::Status s = place_gemm_result(request, limits, shm, 1, job); !s.ok()) return s;
  switch (request.split()) {
    case v1::SPLIT_DEFAULT: job.split = SplitChoice::kDefault; break;
    case v1::SPLIT_NEVER: job.split = SplitChoice::kNever; break;
    case v1::SPLIT_ALWAYS: job.split = SplitChoice::kAlways; break;
    default:
      return absl::InvalidArgumentError(StrCat("split: ", request.split(),
                                               " is not a Split value (SPLIT_DEFAULT, SPLIT_NEVER, "
                                               "SPLIT_ALWAYS)"));
  }
  if (job.verify) {
    absl::StatusOr<std::int64_t> bytes = gemm_verify_bytes(job, limits, 1);
    if (!bytes.ok()) return bytes.status();
    job.verify_bytes = *bytes;
  }
  return job;
}

namespace {

// One operand of a batch as the request gives it: `field` inline (has_inline: the request sets
// it), `field`_handles or `field`_stacked; `required`: a and b must be given, c may be left out.
struct BatchOperandFields {
  std::string field;
  bool has_inline;
  const v1::Matrix& m;
  const google::protobuf::RepeatedPtrField<std::string>& handles;
  const std::string& stacked;
  bool required;
};

// What a batch's operands are resolved with: the batch's product count, the limits, and the
// handles and shared-memory places the request names (collected for the job).
struct BatchResolution {
  std::int64_t count;
  const ServiceLimits& limits;
  ResidentOperands& residents;
  SharedMemoryPlaces& shm;
};

// One operand of a batch: an inline (or shared-memory) stack of 1 or `count` matrices, or 1 or
// `count` resident handles. Returns the operands in order (size 1: every product uses it).
absl::StatusOr<std::vector<Operand>> batch_operand(const BatchOperandFields& f,
                                                   const BatchResolution& with) {
  const std::string& field = f.field;
  const v1::Matrix& m = f.m;
  const google::protobuf::RepeatedPtrField<std::string>& handles = f.handles;
  const std::int64_t count = with.count;
  const std::string handles_field = field + "_handles";
  const std::string stacked_field = field + "_stacked";
  const int given =
      (f.has_inline ? 1 : 0) + (handles.empty() ? 0 : 1) + (f.stacked.empty() ? 0 : 1);
  if (given > 1) {
    return absl::InvalidArgumentError(StrCat(field, ", ", handles_field, " and ", stacked_field,
                                             ": give one of them, not several"));
  }
  if (given == 0) {
    if (!f.required) return std::vector<Operand>{};
    return absl::InvalidArgumentError(
        StrCat(field, ": missing (send ", field, ", ", handles_field, " or ", stacked_field, ")"));
  }
  std::vector<Operand> out;
  if (!f.stacked.empty()) {  // split into the products' views once locked (split_stacked)
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> r =
        with.residents.add(stacked_field, f.stacked);
    if (!r.ok()) return r.status();
    Operand o;
    o.resident = *r;
    out.push_back(std::move(o));
    return out;
  }
  if (!handles.empty()) {
    const auto n = static_cast<std::int64_t>(handles.size());
    if (n != 1 && n != count) {
      return absl::InvalidArgumentError(StrCat(handles_field, ": ", n,
                                               " handles, expected 1 (used by every product) or "
                                               "batch = ",
                                               count));
    }
    for (int i = 0; i < handles.size(); ++i) {
      const std::string at = StrCat(handles_field, "[", i, "]");
      absl::StatusOr<std::shared_ptr<ResidentMatrix>> r = with.residents.add(at, handles[i]);
      if (!r.ok()) return r.status();
      if (*r == nullptr) return absl::InvalidArgumentError(StrCat(at, ": empty handle"));
      Operand o;
      o.resident = *r;  // the shape is read once the matrices are locked (resident_shapes)
      out.push_back(std::move(o));
    }
    return out;
  }
  const std::int64_t stacked = std::max<std::int64_t>(m.batch(), 1);
  if (stacked != 1 && stacked != count) {
    return absl::InvalidArgumentError(StrCat(field, ".batch: ", stacked,
                                             " matrices, expected 1 (used by every product) or "
                                             "batch = ",
                                             count));
  }
  absl::StatusOr<HostMatrix> h = check_header(field, m, with.limits, /*batched=*/true);
  if (!h.ok()) return h.status();
  const std::size_t one = h->bytes();
  const std::size_t total = one * static_cast<std::size_t>(stacked);
  std::span<const std::byte> bytes;
  if (m.has_shm()) {
    if (!m.data().empty()) {
      return absl::InvalidArgumentError(
          StrCat(field, ".data and ", field, ".shm: give one of them, not both"));
    }
    absl::StatusOr<SharedMemoryPlaces::Place> p =
        with.shm.place(field + ".shm", m.shm(), static_cast<std::int64_t>(total), false);
    if (!p.ok()) return p.status();
    if (p->region->is_device()) {
      return absl::InvalidArgumentError(
          StrCat(field,
                 ".shm: a batch's operands come from host shared memory, the request or resident "
                 "handles (not CUDA memory)"));
    }
    bytes = p->range;
  } else {
    if (m.data().size() != total) {
      return absl::InvalidArgumentError(
          StrCat(field, ".data: ", m.data().size(), " bytes, expected ", total, " (", stacked,
                 " x rows ", m.rows(), " * cols ", m.cols(), " * ", kernels::dtype_size(h->dtype),
                 " bytes per ", name_of(m.dtype()), ")"));
    }
    bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(m.data().data()),
                                       m.data().size());
  }
  for (std::int64_t i = 0; i < stacked; ++i) {
    Operand o;
    static_cast<HostMatrix&>(o) = *h;
    o.data = bytes.subspan(static_cast<std::size_t>(i) * one, one);
    out.push_back(std::move(o));
  }
  return out;
}

// The shapes of a batch operand's resident matrices, read under their locks: one shape, dtype
// and layout for all.
absl::Status resident_shapes(const std::string& field, std::vector<Operand>& list) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    Operand& o = list[i];
    if (!o.is_resident()) return absl::OkStatus();
    o.rows = o.resident->rows;
    o.cols = o.resident->cols;
    o.dtype = o.resident->dtype;
    o.layout = o.resident->layout;
    const Operand& first = list[0];
    if (o.rows != first.rows || o.cols != first.cols || o.dtype != first.dtype ||
        o.layout != first.layout) {
      return absl::InvalidArgumentError(
          StrCat(field, "_handles[", i, "]: is ", dims(o.rows, o.cols), " ",
                 std::string(kernels::dtype_name(o.dtype)), ", ", field, "_handles[0] is ",
                 dims(first.rows, first.cols), " ", std::string(kernels::dtype_name(first.dtype)),
                 " (every matrix of a batch has one shape, dtype and layout)"));
    }
  }
  return absl::OkStatus();
}

// A batch operand given as one stacked resident matrix (already read by resident_shapes): its
// `count` products' matrices, each a view of its place in the one block.
absl::Status split_stacked(const std::string& field, std::int64_t count,
                           std::vector<Operand>& list) {
  const Operand whole = list[0];
  const bool col_major = whole.layout == kernels::Layout::kColMajor;
  const std::int64_t stacked_dim = col_major ? whole.cols : whole.rows;
  if (stacked_dim % count != 0) {
    return absl::InvalidArgumentError(
        StrCat(field, "_stacked: the resident matrix is ", dims(whole.rows, whole.cols),
               col_major ? " column-major; its cols" : " row-major; its rows", " (", stacked_dim,
               ") are not a multiple of batch = ", count,
               " (row-major: batch * rows x cols, column-major: rows x batch * cols)"));
  }
  Operand one = whole;
  (col_major ? one.cols : one.rows) = stacked_dim / count;
  list.clear();
  for (std::int64_t i = 0; i < count; ++i) {
    one.offset = static_cast<std::size_t>(i) * one.bytes();
    list.push_back(one);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GemmBatchJob> validate_multiply_batched(const v1::MultiplyBatchedRequest& request,
                                                       const ServiceLimits& limits,
                                                       const HandleResolver& resolve,
                                                       const RegionResolver* regions) {
  const std::int64_t count = request.batch();
  if (count < 1 || count > limits.max_batch_products) {
    return absl::InvalidArgumentError(StrCat("batch: ", count, " products, must be in [1, ",
                                             limits.max_batch_products,
                                             "] (--max_batch_products)"));
  }
  GemmBatchJob batch;
  batch.count = count;
  GemmJob job;  // product 0 with the options: what the checks every product shares read
  SharedMemoryPlaces shm(regions);
  ResidentOperands residents(resolve);
  const BatchResolution with{.count = count, .limits = limits, .residents = residents, .shm = shm};
  absl::StatusOr<std::vector<Operand>> a = batch_operand({.field = "a",
                                                          .has_inline = request.has_a(),
                                                          .m = request.a(),
                                                          .handles = request.a_handles(),
                                                          .stacked = request.a_stacked(),
                                                          .required = true},
                                                         with);
  if (!a.ok()) return a.status();
  absl::StatusOr<std::vector<Operand>> b = batch_operand({.field = "b",
                                                          .has_inline = request.has_b(),
                                                          .m = request.b(),
                                                          .handles = request.b_handles(),
                                                          .stacked = request.b_stacked(),
                                                          .required = true},
                                                         with);
  if (!b.ok()) return b.status();
  absl::StatusOr<std::vector<Operand>> c = batch_operand({.field = "c",
                                                          .has_inline = request.has_c(),
                                                          .m = request.c(),
                                                          .handles = request.c_handles(),
                                                          .stacked = request.c_stacked(),
                                                          .required = false},
                                                         with);
  if (!c.ok()) return c.status();
  job.locks = residents.lock(/*exclusive=*/false);
  batch.a = *std::move(a);
  batch.b = *std::move(b);
  batch.c = *std::move(c);
  if (absl::Status s = resident_shapes("a", batch.a); !s.ok()) return s;
  if (absl::Status s = resident_shapes("b", batch.b); !s.ok()) return s;
  if (absl::Status s = resident_shapes("c", batch.c); !s.ok()) return s;
  for (const auto& [field, stacked, list] : {std::tuple{"a", &request.a_stacked(), &batch.a},
                                             std::tuple{"b", &request.b_stacked(), &batch.b},
                                             std::tuple{"c", &request.c_stacked(), &batch.c}}) {
    if (stacked->empty()) continue;
    if (absl::Status s = split_stacked(field, count, *list); !s.ok()) return s;
  }
  job.a = batch.a[0];
  job.b = batch.b[0];
  job.transpose_a = request.transpose_a();
  job.transpose_b = request.transpose_b();
  if (absl::Status s = check_operands_agree(job); !s.ok()) return s;
  if (absl::Status s = apply_options(request, limits, job); !s.ok()) return s;
  if (!batch.c.empty()) {
    if (absl::Status s = check_c(batch.c[0], job); !s.ok()) return s;
    job.c = batch.c[0];
  }
  if (absl::Status s = place_gemm_result(request, limits, shm, count, job); !s.ok()) {
    return s;
  }
  if (!job.shm_out.empty()) batch.outs.push_back(job.shm_out);
  batch.keep_stacked = request.keep_stacked();
  if (job.verify) {
    absl::StatusOr<std::int64_t> bytes = gemm_verify_bytes(job, limits, count);
    if (!bytes.ok()) return bytes.status();
    job.verify_bytes = *bytes;
  }
  const bool has_c = job.c.has_value();
  const HostMatrix a0 = job.a;
  const HostMatrix b0 = job.b;
  batch.shape = gemm_shape(std::move(job), a0, b0, has_c);
  return batch;
}

absl::StatusOr<TransposeJob> validate_transpose(const v1::TransposeRequest& request,
                                                const ServiceLimits& limits,
                                                const HandleResolver& resolve,
                                                const RegionResolver* regions) {
  if (absl::Status s = one_of("a", request.has_a(), request.a_handle(), true); !s.ok()) return s;
  if (request.in_place() && request.a_handle().empty()) {
    return absl::InvalidArgumentError(
        "in_place: needs a_handle (only a resident matrix can be transposed in place)");
  }
  if (request.in_place() && request.keep_result()) {
    return absl::InvalidArgumentError(
        "keep_result: not with in_place (the result already stays in a_handle)");
  }
  if (request.has_output_shm() && (request.keep_result() || request.in_place())) {
    return absl::InvalidArgumentError(
        "output_shm: not with keep_result or in_place (the result goes to one place)");
  }
  TransposeJob job;
  SharedMemoryPlaces shm(regions);
  ResidentOperands residents(resolve);
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> ra =
      residents.add("a_handle", request.a_handle());
  if (!ra.ok()) return ra.status();
  job.locks = residents.lock(/*exclusive=*/request.in_place());
  absl::StatusOr<Operand> a = operand("a", request.a(), *ra, limits, shm);
  if (!a.ok()) return a.status();
  job.a = *std::move(a);
  job.in_place = request.in_place();
  job.keep_result = request.keep_result();
  job.scale = request.has_scale() ? request.scale() : 1.0;
  if (absl::Status s = check_finite("scale", job.scale); !s.ok()) return s;
  absl::StatusOr<ResultPlace> place = place_result(
      request.has_output_shm() ? &request.output_shm() : nullptr, job.keep_result || job.in_place,
      {.field = "b (the result)",
       .rows = job.a.cols,
       .cols = job.a.rows,
       .dtype = job.a.dtype,
       .layout = job.a.layout,
       .products = 1,
       .bytes = job.out_bytes()},
      limits, shm);
  if (!place.ok()) return place.status();
  job.shm_out = place->shm_out;
  job.device_out = std::move(place->device_out);
  job.regions = shm.take_regions();
  job.verify = request.verify();
  if (absl::Status s = check_verify_place(job.verify, job.device_out); !s.ok()) return s;
  if (job.verify) {
    absl::StatusOr<std::int64_t> bytes = transpose_verify_bytes(job, limits);
    if (!bytes.ok()) return bytes.status();
    job.verify_bytes = *bytes;
  }
  return job;
}

absl::StatusOr<HostMatrix> validate_matrix(const std::string& field, const v1::Matrix& m,
                                           const ServiceLimits& limits,
                                           const RegionResolver* regions,
                                           std::shared_ptr<SharedMemoryRegion>* hold) {
  if (!m.has_shm() || regions == nullptr) return check_matrix(field, m, limits);
  absl::StatusOr<HostMatrix> h = check_header(field, m, limits);
  if (!h.ok()) return h;
  if (!m.data().empty()) {
    return absl::InvalidArgumentError(
        StrCat(field, ".data and ", field, ".shm: give one of them, not both"));
  }
  SharedMemoryPlaces shm(regions);
  absl::StatusOr<SharedMemoryPlaces::Place> p =
      shm.place(field + ".shm", m.shm(), static_cast<std::int64_t>(h->bytes()), false);
  if (!p.ok()) return p.status();
  if (p->region->is_device()) {
    return absl::InvalidArgumentError(
        StrCat(field, ".shm: region ", quote(m.shm().region()),
               " is CUDA memory: name it in Multiply or Transpose (it is read there in place)"));
  }
  h->data = p->range;
  if (hold != nullptr) *hold = p->region;
  return h;
}

absl::StatusOr<HostMatrix> validate_header(const std::string& field, const v1::Matrix& m,
                                           const ServiceLimits& limits) {
  return check_header(field, m, limits);
}

}  // namespace matserve::server
