// The C API's attention calls: attnkit_forward and attnkit_backward over tensor descriptors.
#include "attnkit/attention.hpp"

#include "attnkit/attnkit.h"
#include "attnkit/error.hpp"
#include "c_api/descriptors.hpp"
#include "c_api/status.hpp"

using attnkit::c_api::guarded;
using attnkit::c_api::input_view;
using attnkit::c_api::output_view;

extern "C" {

void attnkit_options_init(attnkit_options* options) {
  if (options == nullptr) return;
  *options = attnkit_options{};
  options->struct_size = sizeof(attnkit_options);
  options->causal = ATTNKIT_CAUSAL_NONE;
  options->kernel = ATTNKIT_KERNEL_AUTOMATIC;
  options->window_left = -1;
  options->window_right = -1;
}

attnkit_status attnkit_tensor_contiguous(attnkit_tensor* tensor, void* data, attnkit_dtype dtype, int32_t rank,
                                         const int64_t* shape) {
  return guarded([&] {
    using attnkit::Error, attnkit::ErrorCode;
    attnkit::c_api::not_null(tensor, "tensor");
    if (rank < 0 || rank > ATTNKIT_MAX_RANK) {
      throw Error(ErrorCode::invalid_shape, "rank " + std::to_string(rank) + " is outside 0.." +
                                                std::to_string(ATTNKIT_MAX_RANK));
    }
    if (rank > 0 && shape == nullptr) throw Error(ErrorCode::null_pointer, "shape: NULL for rank " + std::to_string(rank));
    attnkit::c_api::dtype_from("dtype", dtype);
    attnkit_tensor t{};
    t.data = data;
    t.dtype = dtype;
    t.rank = rank;
    std::int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (shape[d] < 0) throw Error(ErrorCode::invalid_shape, "shape[" + std::to_string(d) + "] is negative");
      t.shape[d] = shape[d];
      t.strides[d] = stride;
      if (shape[d] > 0 && __builtin_mul_overflow(stride, shape[d], &stride)) {
        throw Error(ErrorCode::size_overflow, "shape: the product of the sizes overflows 64 bits");
      }
    }
    *tensor = t;
  });
}

attnkit_status attnkit_forward(const attnkit_tensor* q, const attnkit_tensor* k, const attnkit_tensor* v,
                               const attnkit_tensor* out, const attnkit_options* options, const attnkit_tensor* lse,
                               const attnkit_tensor* probs) {
  return guarded([&] {
    const attnkit::AttentionOptions o = attnkit::c_api::attention_options(options);
    attnkit::ForwardExtras extras;
    // In argument order, so that the first bad argument is the one reported.
    const attnkit::ConstTensorView q_view = input_view("q", q), k_view = input_view("k", k), v_view = input_view("v", v);
    const attnkit::TensorView out_view = output_view("out", out);
    extras.lse = attnkit::c_api::optional_output("lse", lse);
    extras.probs = attnkit::c_api::optional_output("probs", probs);
    attnkit::forward(q_view, k_view, v_view, out_view, o, extras);
  });
}

attnkit_status attnkit_backward(const attnkit_tensor* q, const attnkit_tensor* k, const attnkit_tensor* v,
                                const attnkit_tensor* out, const attnkit_tensor* d_out, const attnkit_tensor* lse,
                                const attnkit_tensor* dq, const attnkit_tensor* dk, const attnkit_tensor* dv,
                                const attnkit_options* options) {
  return attnkit_backward_with_sinks(q, k, v, out, d_out, lse, dq, dk, dv, options, nullptr);
}

attnkit_status attnkit_backward_with_sinks(const attnkit_tensor* q, const attnkit_tensor* k, const attnkit_tensor* v,
                                           const attnkit_tensor* out, const attnkit_tensor* d_out, const attnkit_tensor* lse,
                                           const attnkit_tensor* dq, const attnkit_tensor* dk, const attnkit_tensor* dv,
                                           const attnkit_options* options, const attnkit_tensor* d_sinks) {
  return guarded([&] {
    const attnkit::AttentionOptions o = attnkit::c_api::attention_options(options);
    const attnkit::ConstTensorView q_view = input_view("q", q), k_view = input_view("k", k), v_view = input_view("v", v);
    const attnkit::ConstTensorView out_view = input_view("out", out), d_out_view = input_view("d_out", d_out);
    const attnkit::ConstTensorView lse_view = input_view("lse", lse);
    const attnkit::TensorView dq_view = output_view("dq", dq), dk_view = output_view("dk", dk), dv_view = output_view("dv", dv);
    attnkit::BackwardExtras extras;
    if (d_sinks != nullptr) extras.d_sinks = output_view("d_sinks", d_sinks);
    attnkit::backward(q_view, k_view, v_view, out_view, d_out_view, lse_view, dq_view, dk_view, dv_view, o, extras);
  });
}

}  // extern "C"
