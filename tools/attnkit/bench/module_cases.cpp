// The module cases and their quick subset.
#include "bench/module_cases.hpp"

#include "attnkit/quantized.hpp"

namespace attnkit::bench {

namespace {

// A Llama-like layer: E = 4096, 32 query heads over 8 KV heads, d = 128.
constexpr ModuleLayer kLayer{4096, 32, 8, 128};
// --quick: the same head dimension and grouping (4 query heads per KV head) at a quarter of the
// width, so that the quick run keeps its ~30 seconds (a full prefill is ~200 GFLOP).
constexpr ModuleLayer kQuickLayer{1024, 8, 2, 128};

const std::vector<std::int64_t> kPrefillSizes = {2048};
const std::vector<std::int64_t> kQuickPrefillSizes = {256};
const std::vector<std::int64_t> kDecodeContexts = {4096, 32768};
const std::vector<std::int64_t> kQuickDecodeContexts = {1024};

// Decode runs on both layouts: paged is what serving engines use, contiguous shows what the block
// table costs. A prefill appends into one contiguous slot, as a single-sequence engine would.
constexpr KVCacheLayout kDecodeLayouts[] = {KVCacheLayout::paged, KVCacheLayout::contiguous};

constexpr double kCausalFlopFraction = 0.5;  // n queries over n keys, causal: about half the pairs

std::string embed_suffix(const ModuleLayer& layer) { return "_e" + std::to_string(layer.embed_dim); }

void add_if_selected(std::vector<ModuleCase>& cases, const CaseSelection& sel, ModuleCase c) {
  if (matches_filter(c.name, sel.filter)) cases.push_back(std::move(c));
}

}  // namespace

const char* layout_name(KVCacheLayout layout) { return layout == KVCacheLayout::paged ? "paged" : "contiguous"; }

double ModuleCase::flops() const {
  const auto t = static_cast<double>(tokens), e = static_cast<double>(layer.embed_dim);
  const double projections = 2.0 * t * e * static_cast<double>(layer.q_width() + 2 * layer.kv_width()) +
                             2.0 * t * static_cast<double>(layer.q_width()) * e;
  return projections + attention_flops();
}

double ModuleCase::attention_flops() const {
  const auto d = static_cast<double>(layer.head_dim), heads = static_cast<double>(layer.num_heads);
  if (kind == ModuleKind::prefill) {
    const auto n = static_cast<double>(tokens);
    return 4.0 * n * n * d * heads * kCausalFlopFraction;
  }
  return 4.0 * static_cast<double>(tokens) * static_cast<double>(context) * d * heads;
}

double ModuleCase::bytes() const {
  if (kind == ModuleKind::prefill) return 0;
  const double weights = static_cast<double>(layer.weight_elements()) * static_cast<double>(sizeof(float));
  const double rows = static_cast<double>(context) * static_cast<double>(layer.num_kv_heads) * 2.0;  // keys and values
  if (is_quantized(cache_dtype)) return weights + rows * static_cast<double>(quantized_row_bytes(cache_dtype, layer.head_dim));
  return weights + rows * static_cast<double>(layer.head_dim) * static_cast<double>(sizeof(float));
}

std::vector<ModuleCase> select_module_cases(const CaseSelection& sel) {
  const ModuleLayer& layer = sel.quick ? kQuickLayer : kLayer;
  const auto& prefill_sizes = !sel.sizes.empty() ? sel.sizes : sel.quick ? kQuickPrefillSizes : kPrefillSizes;
  const auto& contexts = !sel.sizes.empty() ? sel.sizes : sel.quick ? kQuickDecodeContexts : kDecodeContexts;
  std::vector<ModuleCase> cases;
  for (std::int64_t n : prefill_sizes) {
    for (int threads : sel.threads) {
      const std::string name = "mha_prefill_f32_n" + std::to_string(n) + embed_suffix(layer);
      add_if_selected(cases, sel, {name, ModuleKind::prefill, layer, n, 0, KVCacheLayout::contiguous, threads});
    }
  }
  for (std::int64_t m : contexts) {
    for (KVCacheLayout layout : kDecodeLayouts) {
      for (int threads : sel.threads) {
        const std::string name =
            "mha_decode_f32_m" + std::to_string(m) + embed_suffix(layer) + "_" + layout_name(layout);
        add_if_selected(cases, sel, {name, ModuleKind::decode, layer, 1, m, layout, threads});
      }
    }
  }
  // The same step over an int8 or int4 cache (f32 weights), paged, in the full list.
  if (!sel.quick) {
    for (std::int64_t m : contexts)
      for (DType cache : {DType::int8, DType::int4})
        for (int threads : sel.threads) {
          const std::string name = "mha_decode_" + std::string(dtype_name(cache)) + "_m" + std::to_string(m) +
                                   embed_suffix(layer) + "_paged";
          add_if_selected(cases, sel, {name, ModuleKind::decode, layer, 1, m, KVCacheLayout::paged, threads, cache});
        }
  }
  return cases;
}

}  // namespace attnkit::bench
