// Model configuration: presets (ar-vit-tiny, ar-deit-small, ar-swin-tiny) and residual modes
// (standard, full, block). Standard library and nlohmann-json only (compiled into arcal_std, so the
// config readers can be fuzzed without LibTorch); every size is bounded (validate_model_config).
// Presets are part of the public interface (docs/interface.md); everything a model needs is here
// so that a run's config.json can rebuild it exactly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace arcal {

enum class ResidualMode { Standard, Full, Block };

std::string to_string(ResidualMode mode);
/// Throws InputError for anything but "standard", "full" or "block".
ResidualMode parse_residual_mode(const std::string& name);

struct ModelConfig {
  std::string preset = "ar-vit-tiny";
  std::string arch = "vit";  ///< "vit" (ar-vit-tiny, ar-deit-small), "swin" (ar-swin-tiny) or "lm" (ar-lm-tiny)
  int image_size = 28;
  int channels = 1;
  int patch = 7;
  int dim = 64;
  int depth = 6;  ///< transformer blocks; routing layers L = 2 * depth
  int heads = 4;
  int mlp_ratio = 4;
  int classes = 10;
  ResidualMode residual = ResidualMode::Full;
  int block_size = 2;      ///< S in sublayers for Block AttnRes (1 = Full)
  double norm_eps = 1e-6;  ///< epsilon of every LayerNorm and RMSNorm
  // Swin only (arch "swin"): per-stage depth, width and heads; dim/depth/heads above then hold
  // stage 0's width, the total block count and stage 0's heads.
  std::vector<int> stage_depths, stage_dims, stage_heads;
  int window = 0;  ///< Swin window size before clipping to a stage's resolution
  // Language model only (arch "lm"): classes is the vocabulary (256 bytes); the image fields are unused.
  int context = 0;  ///< tokens per training sequence (positions learned up to this length)
  /// Learned absolute positions (ar-lm-tiny); false: none at all (ar-lm-tiny-nope, "NoPE": the causal
  /// mask alone carries order), and the model then runs on sequences longer than `context`.
  bool learned_positions = true;
  bool tie_weights = false;  ///< the next-token head reuses the token embedding (no head weight)

  int layers() const { return 2 * depth; }
  int stages() const { return arch == "swin" ? static_cast<int>(stage_depths.size()) : 1; }
  /// Sublayers per AttnRes stack: {2 * depth} for ViT, {2 * depth_s} per Swin stage.
  std::vector<int> stage_layers() const;
  /// Swin: token grid side of stage s (patch grid halved by each patch merging).
  int stage_resolution(int s) const { return (image_size / patch) >> s; }
  /// Swin: window side of stage s: min(window, resolution), as the official Swin code clips it.
  int stage_window(int s) const;
  /// Swin: shift of the odd blocks of stage s: window / 2, or 0 when one window covers the stage.
  int stage_shift(int s) const;
  int tokens() const { return arch == "lm" ? context : (image_size / patch) * (image_size / patch) + 1; }
  /// Routing points: L + 1 per AttnRes stack (P = L + 1 for ViT, sum of 2 depth_s + 1 for Swin),
  /// 0 for the standard twin.
  int routing_points() const;
  /// Effective block size in sublayers (1 for Full).
  int effective_block_size() const { return residual == ResidualMode::Full ? 1 : block_size; }
  /// Sources seen by each routing point, [P]; Swin points run stage by stage, and each stage
  /// starts again from its own v_0 with its own blocks.
  std::vector<int> sources_per_point() const;
};

/// Builds a preset for an image size / channel count / class count. Throws InputError for an
/// unknown preset, a patch size that does not divide the image, a Swin grid that cannot be halved
/// at every stage or split into whole windows, or an inconsistent block size.
ModelConfig make_model_config(const std::string& preset, int image_size, int channels, int classes,
                              ResidualMode residual, int block_size);

/// The byte-level AttnRes language model (issue 27): ar-lm-tiny is d 128, 4 blocks, 4 heads, MLP x4,
/// vocabulary 256, learned positions over `context` tokens, the head tied to the embedding;
/// ar-lm-tiny-nope is the same without positions (it extends past `context`).
/// Throws InputError for an unknown preset or an inconsistent block size.
ModelConfig make_lm_config(const std::string& preset, int context, ResidualMode residual, int block_size);

/// Throws InputError naming the field when the configuration is inconsistent.
void validate_model_config(const ModelConfig& config);

void to_json(nlohmann::json& j, const ModelConfig& c);
/// Throws InputError naming the key for a missing, mistyped or invalid field.
void from_json(const nlohmann::json& j, ModelConfig& c);

/// from_json with `where` (e.g. "RUN/config.json: model") leading every message.
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where);

/// FNV-1a hash (16 hex digits) of the configuration's canonical JSON: what a checkpoint records so
/// that loading it into a model of another configuration is refused.
std::string model_config_hash(const ModelConfig& c);

/// The preset names, for help texts and error messages.
const std::vector<std::string>& model_presets();
/// The language-model presets (make_lm_config): ar-lm-tiny.
const std::vector<std::string>& lm_presets();
bool is_lm_preset(const std::string& preset);

}  // namespace arcal
