#include "model/config.hpp"

#include <algorithm>
#include <vector>

#include "core/check.hpp"

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

std::string join(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

void validate_swin(const ModelConfig& c) {
  const std::string f = "model config (" + c.preset + ")";
  const std::size_t n = c.stage_depths.size();
  if (n == 0 || c.stage_dims.size() != n || c.stage_heads.size() != n)
    throw_input(f, "stage_depths, stage_dims and stage_heads must be non-empty and of equal length (got " +
                       join(c.stage_depths) + " / " + join(c.stage_dims) + " / " + join(c.stage_heads) + ")");
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

void validate_model_config(const ModelConfig& c) {
  const std::string f = "model config";
  if (c.dim <= 0 || c.depth <= 0 || c.heads <= 0 || c.mlp_ratio <= 0 || c.classes < 2 || c.channels <= 0)
    throw_input(f, "dim, depth, heads, mlp_ratio and channels must be positive and classes >= 2");
  if (c.dim % c.heads != 0)
    throw_input(f, "dim " + std::to_string(c.dim) + " is not divisible by heads " + std::to_string(c.heads));
  if (c.patch <= 0 || c.image_size % c.patch != 0)
    throw_input(f, "patch " + std::to_string(c.patch) + " must divide the image size " +
                       std::to_string(c.image_size));
  if (c.norm_eps < 0) throw_input(f, "norm_eps must be >= 0");
  if (c.arch != "vit" && c.arch != "swin") throw_input(f, "arch '" + c.arch + "' is not vit or swin");
  if (c.arch == "swin") validate_swin(c);
  if (c.residual == ResidualMode::Block) {
    if (c.arch == "swin") {
      const auto sl = c.stage_layers();
      const int longest = *std::max_element(sl.begin(), sl.end());
      if (c.block_size < 1 || c.block_size > longest)
        throw_input("--block-size", std::to_string(c.block_size) + " must be in [1, " + std::to_string(longest) +
                                        "] (the longest Swin stage has " + std::to_string(longest) +
                                        " sublayers; a shorter stage forms one block)");
    } else if (c.block_size < 1 || c.block_size > c.layers()) {
      throw_input("--block-size", std::to_string(c.block_size) + " must be in [1, " +
                                      std::to_string(c.layers()) + "] (layers L = 2 x depth = " +
                                      std::to_string(c.layers()) + ")");
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
  } else {
    std::string names;
    for (const auto& n : model_presets()) names += (names.empty() ? "" : ", ") + n;
    throw_input("--model", "'" + preset + "' is not a known preset; available: " + names);
  }
  validate_model_config(c);
  return c;
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
  j = nlohmann::json{{"preset", c.preset},       {"image_size", c.image_size}, {"channels", c.channels},
                     {"patch", c.patch},         {"dim", c.dim},               {"depth", c.depth},
                     {"heads", c.heads},         {"mlp_ratio", c.mlp_ratio},   {"classes", c.classes},
                     {"residual", to_string(c.residual)}, {"block_size", c.block_size},
                     {"norm_eps", c.norm_eps}};
  if (c.arch != "vit") {
    j["arch"] = c.arch;
    j["stage_depths"] = c.stage_depths;
    j["stage_dims"] = c.stage_dims;
    j["stage_heads"] = c.stage_heads;
    j["window"] = c.window;
  }
}

void from_json(const nlohmann::json& j, ModelConfig& c) {
  c.preset = j.at("preset").get<std::string>();
  c.image_size = j.at("image_size").get<int>();
  c.channels = j.at("channels").get<int>();
  c.patch = j.at("patch").get<int>();
  c.dim = j.at("dim").get<int>();
  c.depth = j.at("depth").get<int>();
  c.heads = j.at("heads").get<int>();
  c.mlp_ratio = j.at("mlp_ratio").get<int>();
  c.classes = j.at("classes").get<int>();
  c.residual = parse_residual_mode(j.at("residual").get<std::string>());
  c.block_size = j.at("block_size").get<int>();
  c.norm_eps = j.at("norm_eps").get<double>();
  c.arch = j.value("arch", std::string("vit"));  // runs written before Swin have no arch
  if (c.arch == "swin") {
    c.stage_depths = j.at("stage_depths").get<std::vector<int>>();
    c.stage_dims = j.at("stage_dims").get<std::vector<int>>();
    c.stage_heads = j.at("stage_heads").get<std::vector<int>>();
    c.window = j.at("window").get<int>();
  }
  validate_model_config(c);
}

}  // namespace arcal
