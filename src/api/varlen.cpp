// varlen_forward / varlen_backward: read and check the offsets, validate the packed views, then run
// the problem on its backend like any other call (the kernels find each sequence's rows through
// Problem::packed).
#include "attnkit/varlen.hpp"

#include "api/validate.hpp"
#include "dispatch/backends.hpp"
#include "dispatch/run_within_memory.hpp"

namespace attnkit {

void varlen_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const SequenceOffsets& offsets,
                    TensorView out, const AttentionOptions& options, const ForwardExtras& extras) {
  detail::reporting_out_of_memory("varlen_forward", [&] {
    detail::PackedSequences packed;
    detail::read_packed_sequences(offsets, q, k, packed);
    detail::ForwardOutputs outputs;
    const detail::Problem problem = detail::validate_varlen_forward(q, k, v, packed, out, options, extras, outputs);
    detail::run_forward("varlen_forward", problem, outputs);
  });
}

void varlen_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const SequenceOffsets& offsets,
                     ConstTensorView out, ConstTensorView d_out, ConstTensorView lse, TensorView dq, TensorView dk,
                     TensorView dv, const AttentionOptions& options, const BackwardExtras& extras) {
  detail::reporting_out_of_memory("varlen_backward", [&] {
    detail::PackedSequences packed;
    detail::read_packed_sequences(offsets, q, k, packed);
    detail::BackwardIO io;
    const detail::Problem problem =
        detail::validate_varlen_backward(q, k, v, packed, {out, d_out, lse, dq, dk, dv, extras.d_sinks}, options, io);
    detail::run_backward("varlen_backward", problem, io);
  });
}

}  // namespace attnkit
