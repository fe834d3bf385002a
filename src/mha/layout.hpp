// Where the module's weights live: torch's parameter names and shapes for a configuration, and the
// rows of each projection inside them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/mha.hpp"

namespace attnkit::mha {

class Layout {
 public:
  explicit Layout(const MultiHeadAttentionConfig& c) : c_(c) {}

  std::int64_t q_width() const { return c_.num_heads * c_.head_dim; }      // H·d
  std::int64_t kv_width() const { return c_.num_kv_heads * c_.head_dim; }  // Hkv·d
  // torch packs q, k and v into in_proj_weight [3E, E] exactly when they share one width.
  bool packed() const {
    return c_.kdim == c_.embed_dim && c_.vdim == c_.embed_dim && c_.num_kv_heads == c_.num_heads &&
           q_width() == c_.embed_dim;
  }

  std::vector<std::pair<std::string, std::vector<std::int64_t>>> parameter_shapes() const {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
    if (packed()) {
      shapes.push_back({"in_proj_weight", {3 * c_.embed_dim, c_.embed_dim}});
    } else {
      shapes.push_back({"q_proj_weight", {q_width(), c_.embed_dim}});
      shapes.push_back({"k_proj_weight", {kv_width(), c_.kdim}});
      shapes.push_back({"v_proj_weight", {kv_width(), c_.vdim}});
    }
    if (c_.bias) shapes.push_back({"in_proj_bias", {q_width() + 2 * kv_width()}});
    shapes.push_back({"out_proj.weight", {c_.embed_dim, q_width()}});
    if (c_.bias) shapes.push_back({"out_proj.bias", {c_.embed_dim}});
    return shapes;
  }

  // The projection of q (0), k (1) or v (2): its weight's name, first row in it, and its bias offset.
  struct Projection {
    std::string weight;
    std::int64_t first_row = 0, rows = 0, in = 0, bias_offset = 0;
  };
  Projection projection(int which) const {
    const std::int64_t in = which == 0 ? c_.embed_dim : which == 1 ? c_.kdim : c_.vdim;
    const std::int64_t rows = which == 0 ? q_width() : kv_width();
    const std::int64_t offset = which == 0 ? 0 : which == 1 ? q_width() : q_width() + kv_width();
    if (packed()) return {"in_proj_weight", offset, rows, in, offset};
    return {which == 0 ? "q_proj_weight" : which == 1 ? "k_proj_weight" : "v_proj_weight", 0, rows, in, offset};
  }

 private:
  MultiHeadAttentionConfig c_;
};

}  // namespace attnkit::mha
