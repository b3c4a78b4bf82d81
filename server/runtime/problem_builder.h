// Turns a job plus operand pointers (host or device) into the kernels' canonical problem. The one
// place where request semantics (layouts, op(), output layout) meet the kernel API.
#pragma once

#include "kernels/gemm_problem.h"
#include "kernels/transpose_problem.h"
#include "server/runtime/jobs.h"

namespace matserve::server {

// `operand_type` is the dtype of the A and B buffers the kernel reads (differs from the data's
// when fp32 data was converted to fp16/bf16 on the device). A and B are shaped as `a` and `b`;
// `has_c` says whether the product has a C (absent, C = 0 whatever beta). A batch gives product
// 0's pointers and the placement of the others (in the request's operand order; canonicalization
// swaps it with the operands).
inline kernels::GemmProblem gemm_problem(const GemmOptions& options, const HostMatrix& a_shape,
                                         const HostMatrix& b_shape, bool has_c,
                                         kernels::DType operand_type, const void* a, const void* b,
                                         void* c, const kernels::GemmBatch& batch = {}) {
  kernels::GemmRequestDesc r;
  r.a = {a_shape.rows, a_shape.cols, a_shape.layout, options.transpose_a, a};
  r.b = {b_shape.rows, b_shape.cols, b_shape.layout, options.transpose_b, b};
  r.c = c;
  r.c_layout = options.out_layout;
  r.in_type = operand_type;
  r.out_type = options.out_dtype;
  r.precision = options.precision;
  r.alpha = options.alpha;
  r.beta = has_c ? options.beta : 0.0;  // absent C means C = 0
  r.batch = batch;
  return kernels::canonicalize_gemm(r);
}

inline kernels::GemmProblem gemm_problem(const GemmJob& job, kernels::DType operand_type,
                                         const void* a, const void* b, void* c) {
  return gemm_problem(job, job.a, job.b, job.c.has_value(), operand_type, a, b, c);
}

inline kernels::GemmProblem gemm_problem(const GemmShape& shape, kernels::DType operand_type,
                                         const void* a, const void* b, void* c,
                                         const kernels::GemmBatch& batch) {
  return gemm_problem(shape, shape.a, shape.b, shape.has_c, operand_type, a, b, c, batch);
}

inline kernels::TransposeProblem transpose_problem(const TransposeJob& job, const void* in,
                                                   void* out) {
  return kernels::canonicalize_transpose(job.a.rows, job.a.cols, job.a.layout, job.a.dtype, in, out,
                                         job.scale);
}

}  // namespace matserve::server
