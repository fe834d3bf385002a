// The probabilities output, a second sweep once each row's log-sum-exp is known. Included by
// flash_forward.inl inside the target's namespace; no include guard on purpose.

// probs[b, h, i, j] = exp(s_ij − lse_i) for every key, after the item's log-sum-exp is known:
// a second sweep that recomputes the scores (probabilities are for inspection, not the hot path).
void run_probs_item(const ForwardPlan& plan, std::int64_t item_index) {
  const detail::Problem& p = *plan.problem;
  const ItemCoordinates item = item_coordinates(plan, item_index);
  ForwardWorkspace& ws = thread_workspace();
  ws.prepare(round_up(plan.group * item.queries, kTileRows), p.sizes.d_k, plan.padded_d_v);
  prepare_rows(plan, ws, item);
  const TensorView& probs = *plan.outputs->probs;
  const std::int64_t key_count = p.key_count(item.batch);  // m, or a packed sequence's own (the rest is zeroed)
  const KeyRange keys{0, key_count};
  for (std::int64_t j0 = 0; j0 < key_count; j0 += kKeyBlock) {
    const std::int64_t width = std::min(kKeyBlock, key_count - j0);
    const std::int64_t cols = round_up(width, kTileCols);
    pack_keys<F32KeyPanels>(plan, ws, item, j0, width, cols);
    for (std::int64_t tile = 0; tile < ws.rows; tile += kTileRows) {
      score_tile(ws, tile, cols, p.f32.scale);
      apply_bias_and_mask(plan, ws, item, tile, j0, width, cols, keys);
      for (std::int64_t r = 0; r < kTileRows && tile + r < plan.group * item.queries; ++r) {
        const RowInfo& info = ws.row_info[tile + r];
        const float row_lse = plan.row_lse[item_index * plan.padded_rows + tile + r];
        float* s = ws.scores + r * kKeyBlock;
        if (row_lse == kMinusInf) {  // no visible key: probabilities are 0, not exp(−inf + inf)
          std::fill(s, s + cols, 0.0f);
        } else {
          const Vec lse = Isa::set1(row_lse);
          for (std::int64_t c0 = 0; c0 < cols; c0 += kLanes) Isa::store(s + c0, exp_of_difference<Isa>(Isa::load(s + c0), lse));
        }
        store_row_part(s, probs, item.batch, info.head, info.query, j0, width);
      }
    }
  }
}
