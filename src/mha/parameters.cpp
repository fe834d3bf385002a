// The module's configuration and parameters: validation, torch's initialisation, state dicts in
// torch's layout, .safetensors and .npy files.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/mha.hpp"
#include "attnkit/npy.hpp"
#include "attnkit/safetensors.hpp"
#include "mha/layout.hpp"

namespace attnkit {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

MultiHeadAttentionConfig resolved(MultiHeadAttentionConfig c) {
  const auto positive = [](const char* name, std::int64_t value) {
    if (value <= 0) fail(ErrorCode::invalid_argument, std::string("MultiHeadAttentionConfig: ") + name + " must be > 0, got " + std::to_string(value));
  };
  positive("embed_dim", c.embed_dim);
  positive("num_heads", c.num_heads);
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  positive("num_kv_heads", c.num_kv_heads);
  if (c.num_heads % c.num_kv_heads != 0) {
    fail(ErrorCode::invalid_argument, "MultiHeadAttentionConfig: num_heads (" + std::to_string(c.num_heads) +
                                          ") must be a multiple of num_kv_heads (" + std::to_string(c.num_kv_heads) + ")");
  }
  if (c.head_dim == 0) {
    if (c.embed_dim % c.num_heads != 0) {
      fail(ErrorCode::invalid_argument, "MultiHeadAttentionConfig: embed_dim (" + std::to_string(c.embed_dim) +
                                            ") is not divisible by num_heads (" + std::to_string(c.num_heads) +
                                            "); set head_dim");
    }
    c.head_dim = c.embed_dim / c.num_heads;
  }
  positive("head_dim", c.head_dim);
  if (c.kdim == 0) c.kdim = c.embed_dim;
  if (c.vdim == 0) c.vdim = c.embed_dim;
  positive("kdim", c.kdim);
  positive("vdim", c.vdim);
  if (c.rope && c.head_dim % 2 != 0) {
    fail(ErrorCode::invalid_argument, "MultiHeadAttentionConfig: RoPE rotates pairs of features; head_dim (" +
                                          std::to_string(c.head_dim) + ") must be even");
  }
  if (c.rope && !(c.rope->base > 0 && std::isfinite(c.rope->base))) {
    fail(ErrorCode::invalid_argument, "MultiHeadAttentionConfig: rope.base must be positive and finite");
  }
  if (c.weight_dtype != DType::f32 && c.weight_dtype != DType::bf16) {
    fail(ErrorCode::invalid_dtype, std::string("MultiHeadAttentionConfig: weight_dtype ") + std::string(dtype_name(c.weight_dtype)) +
                                       "; expected f32 or bf16");
  }
  constexpr std::int64_t kLimit = std::int64_t{1} << 30;  // keeps every BLAS size an int
  for (std::int64_t size : {c.embed_dim, c.kdim, c.vdim, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim}) {
    if (size >= kLimit) fail(ErrorCode::size_overflow, "MultiHeadAttentionConfig: a width of " + std::to_string(size) + " is too large");
  }
  return c;
}

// Uniform in [−bound, bound) from a 64-bit generator, the same on every standard library.
void fill_uniform(Tensor& t, std::mt19937_64& rng, double bound) {
  Tensor wide(DType::f64, t.shape());
  for (std::int64_t i = 0; i < wide.numel(); ++i) {
    const double unit = static_cast<double>(rng() >> 11) * 0x1p-53;
    wide.data<double>()[i] = (2 * unit - 1) * bound;
  }
  t = Tensor::converted(wide.view(), t.dtype());
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionConfig& config, std::uint64_t seed)
    : config_(resolved(config)) {
  const mha::Layout layout(config_);
  std::mt19937_64 rng(seed);
  for (const auto& [name, shape] : layout.parameter_shapes()) {
    Tensor t(config_.weight_dtype, shape);
    if (name == "in_proj_weight" || name == "q_proj_weight" || name == "k_proj_weight" || name == "v_proj_weight") {
      fill_uniform(t, rng, std::sqrt(6.0 / static_cast<double>(shape[0] + shape[1])));  // Xavier-uniform
    } else if (name == "out_proj.weight") {
      fill_uniform(t, rng, 1.0 / std::sqrt(static_cast<double>(shape[1])));  // torch's Linear default
    }  // biases stay +0: a Tensor starts zero-filled
    parameters_.emplace(name, std::move(t));
  }
}

std::vector<std::string> MultiHeadAttention::parameter_names() const {
  std::vector<std::string> names;
  for (const auto& [name, shape] : mha::Layout(config_).parameter_shapes()) names.push_back(name);
  return names;
}

const Tensor& MultiHeadAttention::parameter(const std::string& name) const {
  const auto it = parameters_.find(name);
  if (it == parameters_.end()) fail(ErrorCode::invalid_argument, "MultiHeadAttention: no parameter named '" + name + "'");
  return it->second;
}

Tensor& MultiHeadAttention::parameter(const std::string& name) {
  return const_cast<Tensor&>(static_cast<const MultiHeadAttention&>(*this).parameter(name));
}

void MultiHeadAttention::load_state_dict(const std::map<std::string, Tensor>& state) {
  const mha::Layout layout(config_);
  std::map<std::string, Tensor> loaded;
  std::set<std::string> used;
  auto take = [&](const std::string& name, const std::vector<std::int64_t>& shape) -> const Tensor* {
    const auto it = state.find(name);
    if (it == state.end()) return nullptr;
    if (it->second.shape() != shape) {
      fail(ErrorCode::invalid_shape, "load_state_dict: '" + name + "' has shape " + shape_string(it->second.shape()) +
                                         ", this configuration needs " + shape_string(shape));
    }
    if (!is_floating(it->second.dtype())) {
      fail(ErrorCode::invalid_dtype, "load_state_dict: '" + name + "' is " + std::string(dtype_name(it->second.dtype())) + ", expected a floating dtype");
    }
    used.insert(name);
    return &it->second;
  };
  for (const auto& [name, shape] : layout.parameter_shapes()) {
    if (const Tensor* t = take(name, shape)) {
      loaded[name] = Tensor::converted(t->view(), config_.weight_dtype);
      continue;
    }
    // torch writes in_proj_weight when q, k and v share one width, else the three separately:
    // either form loads whenever its shapes fit this configuration.
    if (name == "in_proj_weight") {
      const std::int64_t e = config_.embed_dim;
      const Tensor* q = take("q_proj_weight", {e, e});
      const Tensor* k = take("k_proj_weight", {e, e});
      const Tensor* v = take("v_proj_weight", {e, e});
      if (q && k && v) {
        Tensor packed(config_.weight_dtype, shape);
        const std::size_t part = Tensor::converted(q->view(), config_.weight_dtype).nbytes();
        auto* out = static_cast<std::byte*>(packed.raw());
        for (const Tensor* t : {q, k, v}) {
          const Tensor c = Tensor::converted(t->view(), config_.weight_dtype);
          std::memcpy(out, c.raw(), part);
          out += part;
        }
        loaded[name] = std::move(packed);
        continue;
      }
    } else if (name == "q_proj_weight" || name == "k_proj_weight" || name == "v_proj_weight") {
      if (layout.packed() == false && state.count("in_proj_weight") != 0) {
        fail(ErrorCode::invalid_shape, "load_state_dict: 'in_proj_weight' is only for q, k and v of one width (kdim = vdim = "
                                       "embed_dim, num_kv_heads = num_heads); this configuration needs q_proj_weight, "
                                       "k_proj_weight and v_proj_weight");
      }
    }
    fail(ErrorCode::invalid_argument, "load_state_dict: missing '" + name + "'" +
                                          (name == "in_proj_weight" ? " (or q_proj_weight, k_proj_weight and v_proj_weight)" : ""));
  }
  for (const auto& [name, tensor] : state) {
    if (used.count(name) == 0) {
      fail(ErrorCode::invalid_argument, "load_state_dict: unexpected '" + name + "'" +
                                            (name == "bias_k" || name == "bias_v" ? " (add_bias_kv is not supported)" : ""));
    }
  }
  parameters_ = std::move(loaded);
}

std::map<std::string, Tensor> MultiHeadAttention::state_dict() const { return parameters_; }

void MultiHeadAttention::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::map<std::string, Tensor> state;
    for (const auto& entry : fs::directory_iterator(path)) {
      if (entry.path().extension() != ".npy") continue;
      state.emplace(entry.path().stem().string(), read_npy(entry.path().string()));
    }
    load_state_dict(state);
    return;
  }
  load_state_dict(read_safetensors(path).tensors);
}

void MultiHeadAttention::save(const std::string& safetensors_path) const {
  std::vector<std::pair<std::string, ConstTensorView>> views;
  for (const auto& [name, tensor] : parameters_) views.emplace_back(name, tensor.view());
  write_safetensors(safetensors_path, views, {{"format", "pt"}, {"producer", "attnkit"}});
}

}  // namespace attnkit
