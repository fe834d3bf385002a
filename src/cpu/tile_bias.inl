// Biases and masks on one row of scores, written once over an ISA wrapper. Included inside the
// target's namespace; no include guard on purpose.

// Whether a row's logits over keys j0 .. j0 + cols are its scores unchanged: no softcap, ALiBi or
// mask, and every one of the cols keys visible to it (none past `width`, none outside its interval
// or `keys`). bias_and_mask_row then does nothing, and a forward tile of such rows skips it.
inline bool scores_are_logits(const detail::Problem& p, const RowInfo& info, KeyRange keys,
                              std::int64_t j0, std::int64_t width, std::int64_t cols) {
  return p.mask_kind == detail::MaskKind::none && !(p.f32.softcap > 0) && info.alibi_slope == 0 && width == cols &&
         first_seen(info, keys) <= j0 && last_seen(info, keys) >= j0 + cols - 1;
}

// scores[0 .. cols) of query row `info` over keys j0 + [0, cols) become its logits, in docs/semantics.md's
// order: softcap, ALiBi, additive mask, then −inf where not visible (outside the row's interval or
// `keys`, masked out, or past `width`). `mask_row` is scratch of cols floats. When softcap is on and
// `tanh_out` is given, it receives t = tanh(s/c) per key, for the softcap's derivative 1 − t².
void bias_and_mask_row(const detail::Problem& p, std::int64_t batch, const RowInfo& info, KeyRange keys,
                       std::int64_t j0, std::int64_t width, std::int64_t cols, float* scores, float* mask_row,
                       float* tanh_out) {
  if (scores_are_logits(p, info, keys, j0, width, cols)) return;  // the common case costs nothing
  if (!row_sees_block(info, keys, j0, width)) {
    std::fill(scores, scores + cols, kMinusInf);
    return;
  }
  // Key positions relative to the block start, clamped just outside it, stay exact in float.
  const std::int64_t first_rel = std::clamp<std::int64_t>(first_seen(info, keys) - j0, -1, cols);
  const std::int64_t last_rel = std::clamp<std::int64_t>(std::min(last_seen(info, keys), j0 + width - 1) - j0, -1, cols);
  const bool whole_block_visible = first_rel <= 0 && last_rel >= cols - 1;
  const float softcap = p.f32.softcap;
  const bool capped = softcap > 0;
  if (p.mask_kind != detail::MaskKind::none) load_mask_row(p, batch, info.head, info.query, j0, width, mask_row);
  const Vec minus_inf = Isa::set1(kMinusInf);
  const Vec first = Isa::set1(static_cast<float>(first_rel)), last = Isa::set1(static_cast<float>(last_rel));
  const Vec cap = Isa::set1(softcap), inv_cap = Isa::set1(capped ? 1 / softcap : 0);
  const Vec slope = Isa::set1(info.alibi_slope), pos = Isa::set1(static_cast<float>(info.position - j0));
  auto logits_of_vector = [&](std::int64_t c0) {
    Vec s = Isa::load(scores + c0);
    const Vec key = Isa::iota(static_cast<float>(c0));  // j − j0
    if (capped) {  // s = c·tanh(s/c)
      const Vec t = cpu::tanh<Isa>(Isa::mul(s, inv_cap));
      if (tanh_out != nullptr) Isa::store(tanh_out + c0, t);
      s = Isa::mul(cap, t);
    }
    if (info.alibi_slope != 0) {  // s −= slope·|i' − j|
      const Vec distance = Isa::sub(pos, key);
      s = Isa::sub(s, Isa::mul(slope, Isa::max(distance, Isa::sub(Isa::zero(), distance))));
    }
    if (p.mask_kind == detail::MaskKind::additive) {  // s += mask; an additive −inf masks outright
      const Vec bias = Isa::load(mask_row + c0);
      s = Isa::select_equal(bias, minus_inf, minus_inf, Isa::add(s, bias));
    } else if (p.mask_kind == detail::MaskKind::keep) {  // mask_row holds 1 (keep) or 0
      s = Isa::select_equal(Isa::load(mask_row + c0), Isa::zero(), minus_inf, s);
    }
    if (!whole_block_visible) {  // causal, window, key lengths, range and block ends
      s = Isa::select_less(key, first, minus_inf, s);
      s = Isa::select_less(last, key, minus_inf, s);
    }
    Isa::store(scores + c0, s);
  };
  if (capped || info.alibi_slope != 0 || p.mask_kind != detail::MaskKind::none) {
    for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) logits_of_vector(c0);
    return;
  }
  // Only visibility: just the vectors holding keys before first_rel or after last_rel change (on
  // the causal diagonal, the row's tail). Over the whole row, this loop was 2.8% of a causal forward
  // at n = 1024, d = 64 (AVX-512 Zen 4), where nearly every row's last block is a diagonal one (see
  // docs/tuning.md, "Causal attention: the diagonal").
  const std::int64_t head_end = std::min(cols, (std::max<std::int64_t>(first_rel, 0) + kLanes - 1) / kLanes * kLanes);
  for (std::int64_t c0 = 0; c0 < head_end; c0 += kLanes) logits_of_vector(c0);
  for (std::int64_t c0 = std::max(head_end, (last_rel + 1) / kLanes * kLanes); c0 < cols; c0 += kLanes) logits_of_vector(c0);
}
