// Reading K and V rows where they are stored, a vector at a time: f32, bf16 and f16 widened in
// registers, and the quantized int8, int4 and fp8 rows of a KV cache (quantized_loads.inl). Included by
// flash_forward.inl inside the target's namespace; no include guard on purpose.

// Rows the kernels read where they are stored: f32, bf16 and f16 widened in registers, and the
// quantized rows of a KV cache (quantized_loads.inl), addressed by their first byte.
template <DType Stored>
using StoredElement = std::conditional_t<Stored == DType::f32, float, std::conditional_t<is_quantized(Stored), std::byte, std::uint16_t>>;

// kLanes elements of a float row, as floats.
template <DType Stored>
Vec load_stored(const StoredElement<Stored>* x) {
  if constexpr (Stored == DType::f32) return Isa::load(x);
  else if constexpr (Stored == DType::bf16) return Isa::load_bf16(x);
  else return Isa::load_f16(x);
}

// Elements c .. c + kLanes of a stored row of `width` values, as floats: for float rows the elements
// at x + c, for quantized rows dequantised from the row's record.
template <DType Stored>
Vec load_row_vector(const StoredElement<Stored>* row, std::int64_t width, std::int64_t c) {
  if constexpr (is_quantized(Stored)) return load_quantized<Stored>(row, width, c);
  else return load_stored<Stored>(row + c);
}

// f(std::integral_constant<DType, dtype>{}) for a dtype read in place (f32, bf16, f16 or a quantized
// row format): the loops
// over a row are instantiated per dtype, never choosing it per vector (GCC then kept the
// accumulators of such a loop in memory and stored them on every step). Inlined: left as a call,
// packing a value block paid one per row.
template <class F>
__attribute__((always_inline)) inline void with_stored_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); break;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); break;
    case DType::int8: f(std::integral_constant<DType, DType::int8>{}); break;
    case DType::int4: f(std::integral_constant<DType, DType::int4>{}); break;
    case DType::fp8_e4m3: f(std::integral_constant<DType, DType::fp8_e4m3>{}); break;
    case DType::fp8_e5m2: f(std::integral_constant<DType, DType::fp8_e5m2>{}); break;
    default: f(std::integral_constant<DType, DType::f16>{}); break;  // f16: the only other one read in place
  }
}

// Whether the value rows are read where they are stored: unit stride, d_v already whole tiles, and
// a dtype load_row_vector reads.
bool value_rows_in_place(const detail::Problem& p, const ForwardWorkspace& ws) {
  const DType dtype = p.v.dtype();
  return p.v.stride(3) == 1 && p.sizes.d_v == ws.d_v &&
         (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || is_quantized(dtype));
}
