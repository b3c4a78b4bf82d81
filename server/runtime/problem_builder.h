// Turns a job plus operand pointers (host or device) into the kernels' canonical problem. The one
// place where request semantics (layouts, op(), output layout) meet the kernel API.
#pragma once

#include "kernels/gemm_problem.h"
#include "kernels/transpose_problem.h"
#include "server/runtime/jobs.h"

namespace matserve::server {

// `operand_type` is the dtype of the A and B buffers the kernel reads (differs from the data's
// when fp32 data was converted to fp16/bf16 on the device). A batch gives product 0's pointers
// and the placement of the others (in the request's operand order; canonicalization swaps it
// with the operands).
inline kernels::GemmProblem gemm_problem(const GemmJob& job, kernels::DType operand_type,
                                         const void* a, const void* b, void* c,
                                         const kernels::GemmBatch& batch = {}) {
  kernels::GemmRequestDesc r;
  r.a = {job.a.rows, job.a.cols, job.a.layout, job.transpose_a, a};
  r.b = {job.b.rows, job.b.cols, job.b.layout, job.transpose_b, b};
  r.c = c;
  r.c_layout = job.out_layout;
  r.in_type = operand_type;
  r.out_type = job.out_dtype;
  r.precision = job.precision;
  r.alpha = job.alpha;
  r.beta = job.c.has_value() ? job.beta : 0.0;  // absent C means C = 0
  r.batch = batch;
  return kernels::canonicalize_gemm(r);
}

inline kernels::TransposeProblem transpose_problem(const TransposeJob& job, const void* in,
                                                   void* out) {
  return kernels::canonicalize_transpose(job.a.rows, job.a.cols, job.a.layout, job.a.dtype, in, out,
                                         job.scale);
}

}  // namespace matserve::server
