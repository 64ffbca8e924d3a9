#include "model/config.hpp"

#include <algorithm>
#include <vector>

#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/text_input.hpp"
#include "core/hash.hpp"

namespace arcal {

std::string to_string(ResidualMode mode) {
  switch (mode) {
    case ResidualMode::Standard: return "standard";
    case ResidualMode::Full: return "full";
    case ResidualMode::Block: return "block";
  }
  return "?";
}

ResidualMode parse_residual_mode(const std::string& name) {
  if (name == "standard") return ResidualMode::Standard;
  if (name == "full") return ResidualMode::Full;
  if (name == "block") return ResidualMode::Block;
  throw_input("--residual", "'" + name + "' is not a residual mode; expected full, block or standard");
}

std::vector<int> ModelConfig::stage_layers() const {
  if (arch != "swin") return {layers()};
  std::vector<int> out;
  for (int d : stage_depths) out.push_back(2 * d);
  return out;
}

int ModelConfig::stage_window(int s) const { return std::min(window, stage_resolution(s)); }

int ModelConfig::stage_shift(int s) const { return stage_resolution(s) <= window ? 0 : stage_window(s) / 2; }

int ModelConfig::routing_points() const {
  if (residual == ResidualMode::Standard) return 0;
  int P = 0;
  for (int L : stage_layers()) P += L + 1;
  return P;
}

std::vector<int> ModelConfig::sources_per_point() const {
  std::vector<int> out;
  if (residual == ResidualMode::Standard) return out;
  const int S = effective_block_size();
  for (int L : stage_layers()) {
    for (int l = 0; l < L; ++l) {
      const int completed = l / S;            // blocks b_1..b_completed are finished
      const bool has_partial = (l % S) != 0;  // later layers of a block also see b_n^partial
      out.push_back(1 + completed + (has_partial ? 1 : 0));
    }
    const int blocks = (L + S - 1) / S;
    out.push_back(1 + blocks);  // the stack's final aggregation over [b_0..b_N]
  }
  return out;
}

namespace {

// Bounds on every size a configuration (config.json, a checkpoint) can ask for, so a crafted file
// cannot make the model constructor allocate terabytes.
constexpr IntRange kImageSize{1, 4096}, kChannels{1, 64}, kDim{1, 16384}, kDepth{1, 1024}, kHeads{1, 1024},
    kMlpRatio{1, 64}, kClasses{2, 1000000}, kWindow{1, 4096}, kContext{1, 65536};
constexpr double kMaxParameters = 4e9;

std::string join(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

void validate_swin(const ModelConfig& c) {
  const std::string f = "model config (" + c.preset + ")";
  const std::size_t n = c.stage_depths.size();
  if (n == 0 || n > 8 || c.stage_dims.size() != n || c.stage_heads.size() != n)
    throw_input(f, "stage_depths, stage_dims and stage_heads must hold 1 to 8 stages each, of equal length (got " +
                       join(c.stage_depths) + " / " + join(c.stage_dims) + " / " + join(c.stage_heads) + ")");
  for (std::size_t s = 0; s < n; ++s)
    if (!in_range(kDepth, c.stage_depths[s]) || !in_range(kDim, c.stage_dims[s]) || !in_range(kHeads, c.stage_heads[s]))
      throw_input(f, "stage " + std::to_string(s) + ": depth, width and heads must be in " + range_text(kDepth) + ", " +
                         range_text(kDim) + " and " + range_text(kHeads));
  if (!in_range(kWindow, c.window))
    throw_input(f, "window " + std::to_string(c.window) + " must be in " + range_text(kWindow));
  if (c.window < 1) throw_input(f, "window " + std::to_string(c.window) + " must be >= 1");
  const int grid = c.image_size / c.patch;
  const int merges = static_cast<int>(n) - 1;
  if (grid % (1 << merges) != 0)
    throw_input(f, "image size " + std::to_string(c.image_size) + " with patch " + std::to_string(c.patch) +
                       " gives a " + std::to_string(grid) + "x" + std::to_string(grid) + " grid, which " +
                       std::to_string(merges) + " patch mergings cannot halve evenly (needs a multiple of " +
                       std::to_string(1 << merges) + "; ar-swin-tiny is defined on 32x32 input)");
  int depth = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const int si = static_cast<int>(s);
    if (c.stage_depths[s] < 1 || c.stage_dims[s] < 1 || c.stage_heads[s] < 1)
      throw_input(f, "stage " + std::to_string(s) + " has a non-positive depth, width or head count");
    if (c.stage_dims[s] % c.stage_heads[s] != 0)
      throw_input(f, "stage " + std::to_string(s) + ": width " + std::to_string(c.stage_dims[s]) +
                         " is not divisible by heads " + std::to_string(c.stage_heads[s]));
    if (s > 0 && c.stage_dims[s] != 2 * c.stage_dims[s - 1])
      throw_input(f, "stage " + std::to_string(s) + ": patch merging doubles the width, so width " +
                         std::to_string(c.stage_dims[s]) + " must be 2 x " + std::to_string(c.stage_dims[s - 1]));
    if (c.stage_resolution(si) % c.stage_window(si) != 0)
      throw_input(f, "stage " + std::to_string(s) + ": the " + std::to_string(c.stage_resolution(si)) + "x" +
                         std::to_string(c.stage_resolution(si)) + " grid is not divisible by window " +
                         std::to_string(c.stage_window(si)));
    depth += c.stage_depths[s];
  }
  if (c.dim != c.stage_dims[0] || c.heads != c.stage_heads[0] || c.depth != depth)
    throw_input(f, "dim, heads and depth must equal stage 0's width, stage 0's heads and the total depth");
}

}  // namespace

const std::vector<std::string>& model_presets() {
  static const std::vector<std::string> names = {"ar-vit-tiny", "ar-deit-small", "ar-swin-tiny"};
  return names;
}

const std::vector<std::string>& lm_presets() {
  static const std::vector<std::string> names = {"ar-lm-tiny", "ar-lm-tiny-nope"};
  return names;
}

bool is_lm_preset(const std::string& preset) {
  return std::find(lm_presets().begin(), lm_presets().end(), preset) != lm_presets().end();
}

void validate_model_config(const ModelConfig& c) {
  const std::string f = "model config";
  if (c.dim <= 0 || c.depth <= 0 || c.heads <= 0 || c.mlp_ratio <= 0 || c.classes < 2 || c.channels <= 0)
    throw_input(f, "dim, depth, heads, mlp_ratio and channels must be positive and classes >= 2");
  auto bound = [&](const char* name, int v, const IntRange& r) {
    if (!in_range(r, v)) throw_input(f, std::string(name) + " " + std::to_string(v) + " must be in " + range_text(r));
  };
  bound("image_size", c.image_size, kImageSize);
  bound("channels", c.channels, kChannels);
  bound("dim", c.dim, kDim);
  bound("depth", c.depth, kDepth);
  bound("heads", c.heads, kHeads);
  bound("mlp_ratio", c.mlp_ratio, kMlpRatio);
  bound("classes", c.classes, kClasses);
  if (c.dim % c.heads != 0)
    throw_input(f, "dim " + std::to_string(c.dim) + " is not divisible by heads " + std::to_string(c.heads));
  if (c.arch == "lm") {
    bound("context", c.context, kContext);
  } else if (c.patch <= 0 || c.image_size % c.patch != 0) {
    throw_input(f, "patch " + std::to_string(c.patch) + " must divide the image size " + std::to_string(c.image_size));
  }
  if (!in_range(ranges::norm_eps, c.norm_eps)) throw_input(f, "norm_eps must be in " + range_text(ranges::norm_eps));
  if (c.arch != "vit" && c.arch != "swin" && c.arch != "lm")
    throw_input(f, "arch '" + c.arch + "' is not vit, swin or lm");
  if (c.arch == "swin") validate_swin(c);
  // Parameters, roughly (attention 4 d^2 + MLP 2 r d^2 per block, embeddings, head), in double so
  // nothing overflows: a configuration beyond the limit is refused before anything is allocated.
  const double embed = c.arch == "lm" ? double(c.classes) * c.dim : double(c.patch) * c.patch * c.channels * c.dim;
  double params = embed + double(c.dim) * c.classes + double(c.tokens()) * c.dim;
  if (c.arch == "swin")
    for (std::size_t s = 0; s < c.stage_depths.size(); ++s)
      params += double(c.stage_depths[s]) * (4.0 + 2.0 * c.mlp_ratio) * double(c.stage_dims[s]) * c.stage_dims[s];
  else
    params += double(c.depth) * (4.0 + 2.0 * c.mlp_ratio) * double(c.dim) * c.dim;
  if (params > kMaxParameters)
    throw_input(f, "the model would have about " + std::to_string(static_cast<long long>(params)) +
                       " parameters, more than the limit of " + std::to_string(static_cast<long long>(kMaxParameters)));
  if (c.residual == ResidualMode::Block) {
    if (c.arch == "swin") {
      const auto sl = c.stage_layers();
      const int longest = *std::max_element(sl.begin(), sl.end());
      if (c.block_size < 1 || c.block_size > longest)
        throw_input("--block-size", std::to_string(c.block_size) + " must be in [1, " + std::to_string(longest) +
                                        "] (the longest Swin stage has " + std::to_string(longest) +
                                        " sublayers; a shorter stage forms one block)");
    } else if (c.block_size < 1 || c.block_size > c.layers()) {
      throw_input("--block-size", std::to_string(c.block_size) + " must be in [1, " + std::to_string(c.layers()) +
                                      "] (layers L = 2 x depth = " + std::to_string(c.layers()) + ")");
    }
  }
}

ModelConfig make_model_config(const std::string& preset, int image_size, int channels, int classes,
                              ResidualMode residual, int block_size) {
  ModelConfig c;
  c.preset = preset;
  c.image_size = image_size;
  c.channels = channels;
  c.classes = classes;
  c.residual = residual;
  c.block_size = block_size;
  if (preset == "ar-vit-tiny") {
    c.dim = 64;
    c.depth = 6;
    c.heads = 4;
    c.mlp_ratio = 4;
    c.patch = image_size == 28 ? 7 : 4;
  } else if (preset == "ar-deit-small") {
    // DeiT-S (Touvron et al. 2021): ViT with d 384, 12 blocks, 6 heads, MLP x4; patch 4 on 32x32.
    c.dim = 384;
    c.depth = 12;
    c.heads = 6;
    c.mlp_ratio = 4;
    c.patch = 4;
  } else if (preset == "ar-swin-tiny") {
    // Swin-T (Liu et al. 2021): depths 2,2,6,2, widths 96..768, heads 3..24; window 4, patch 2 on 32x32.
    c.arch = "swin";
    c.stage_depths = {2, 2, 6, 2};
    c.stage_dims = {96, 192, 384, 768};
    c.stage_heads = {3, 6, 12, 24};
    c.window = 4;
    c.dim = 96;
    c.depth = 12;
    c.heads = 3;
    c.mlp_ratio = 4;
    c.patch = 2;
  } else if (is_lm_preset(preset)) {
    throw_input("--model",
                "'" + preset + "' is a language model: it trains on a text corpus (--dataset gcide), not on images");
  } else {
    std::string names;
    for (const auto& n : model_presets()) names += (names.empty() ? "" : ", ") + n;
    throw_input("--model",
                "'" + preset + "' is not a known preset; available: " + names + " (images), ar-lm-tiny (text)");
  }
  validate_model_config(c);
  return c;
}

ModelConfig make_lm_config(const std::string& preset, int context, ResidualMode residual, int block_size) {
  if (preset != "ar-lm-tiny" && preset != "ar-lm-tiny-nope")
    throw_input("--model", "'" + preset + "' is not a language-model preset; available: ar-lm-tiny, ar-lm-tiny-nope");
  ModelConfig c;
  c.preset = preset;
  c.arch = "lm";
  c.context = context;
  c.classes = 256;  // byte-level tokens
  c.dim = 128;
  c.depth = 4;
  c.heads = 4;
  c.mlp_ratio = 4;
  c.tie_weights = true;
  c.learned_positions = preset != "ar-lm-tiny-nope";
  c.residual = residual;
  c.block_size = block_size;
  validate_model_config(c);
  return c;
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
  j = nlohmann::json{{"preset", c.preset},
                     {"image_size", c.image_size},
                     {"channels", c.channels},
                     {"patch", c.patch},
                     {"dim", c.dim},
                     {"depth", c.depth},
                     {"heads", c.heads},
                     {"mlp_ratio", c.mlp_ratio},
                     {"classes", c.classes},
                     {"residual", to_string(c.residual)},
                     {"block_size", c.block_size},
                     {"norm_eps", c.norm_eps}};
  if (c.arch == "lm") {
    j["arch"] = c.arch;
    j["context"] = c.context;
    j["tie_weights"] = c.tie_weights;
    // Written only for NoPE, so that the hash of every run written before it stays the same.
    if (!c.learned_positions) j["positions"] = "none";
  } else if (c.arch != "vit") {
    j["arch"] = c.arch;
    j["stage_depths"] = c.stage_depths;
    j["stage_dims"] = c.stage_dims;
    j["stage_heads"] = c.stage_heads;
    j["window"] = c.window;
  }
}

void from_json(const nlohmann::json& j, ModelConfig& c) { c = model_config_from_json(j, "model config"); }

std::string model_config_hash(const ModelConfig& c) {
  nlohmann::json j;
  to_json(j, c);
  return stable_hash(j.dump());  // keys sorted by nlohmann's std::map: canonical
}

ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where) {
  // Typed reads with the key in every message (a config.json edited by hand or crafted); the
  // ranges here only keep the conversions exact, validate_model_config checks the meaning.
  const IntRange any_int{-2147483647LL - 1, 2147483647LL};
  auto i = [&](const char* k) { return static_cast<int>(json_int(j, k, where, any_int)); };
  auto ints = [&](const char* k) {
    if (!j.contains(k) || !j[k].is_array() || j[k].size() > 64)
      throw InputError(where + ": key '" + k + "' must be an array of at most 64 integers");
    std::vector<int> v;
    for (std::size_t n = 0; n < j[k].size(); ++n) {
      const nlohmann::json one = {{k, j[k][n]}};
      v.push_back(static_cast<int>(json_int(one, k, where, any_int)));
    }
    return v;
  };
  ModelConfig c;
  c.preset = json_string(j, "preset", where);
  c.image_size = i("image_size");
  c.channels = i("channels");
  c.patch = i("patch");
  c.dim = i("dim");
  c.depth = i("depth");
  c.heads = i("heads");
  c.mlp_ratio = i("mlp_ratio");
  c.classes = i("classes");
  c.residual = parse_residual_mode(json_string(j, "residual", where));
  c.block_size = i("block_size");
  c.norm_eps = json_real(j, "norm_eps", where);
  c.arch = j.contains("arch") ? json_string(j, "arch", where) : "vit";  // runs written before Swin have no arch
  if (c.arch == "lm") {
    c.context = i("context");
    if (!j.contains("tie_weights") || !j["tie_weights"].is_boolean())
      throw InputError(where + ": key 'tie_weights' must be true or false");
    c.tie_weights = j["tie_weights"].get<bool>();
    if (j.contains("positions")) {
      const std::string pos = json_string(j, "positions", where);
      if (pos != "none" && pos != "learned")
        throw InputError(where + ": key 'positions' is '" + pos + "', but must be learned or none");
      c.learned_positions = pos == "learned";
    }
  }
  if (c.arch == "swin") {
    c.stage_depths = ints("stage_depths");
    c.stage_dims = ints("stage_dims");
    c.stage_heads = ints("stage_heads");
    c.window = i("window");
  }
  try {
    validate_model_config(c);
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }
  return c;
}

}  // namespace arcal
