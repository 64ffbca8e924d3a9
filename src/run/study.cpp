#include "run/study.hpp"

#include <toml.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/check.hpp"

namespace arcal {

namespace {

const char* kFn = "study";

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

/// Typed reads of one key with errors naming the file and the key.
struct Reader {
  std::string file;
  std::string where(const std::string& table, const std::string& key) const {
    return file + ": [" + table + "] " + key;
  }
  [[noreturn]] void bad(const std::string& table, const std::string& key, const std::string& want) const {
    throw_input(kFn, where(table, key) + " must be " + want);
  }
  std::string str(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_string()) bad(t, k, "a string");
    return v.as_string().str;
  }
  std::int64_t integer(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_integer()) bad(t, k, "an integer");
    return v.as_integer();
  }
  double real(const toml::value& v, const std::string& t, const std::string& k) const {
    if (v.is_integer()) return double(v.as_integer());
    if (!v.is_floating()) bad(t, k, "a number");
    return v.as_floating();
  }
  bool boolean(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_boolean()) bad(t, k, "true or false");
    return v.as_boolean();
  }
  std::vector<std::string> strings(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_array()) bad(t, k, "an array of strings");
    std::vector<std::string> out;
    for (const auto& e : v.as_array()) {
      if (!e.is_string()) bad(t, k, "an array of strings");
      out.push_back(e.as_string().str);
    }
    return out;
  }
  std::vector<double> reals(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_array()) bad(t, k, "an array of numbers");
    std::vector<double> out;
    for (const auto& e : v.as_array()) out.push_back(real(e, t, k));
    return out;
  }
  std::vector<std::uint64_t> seeds(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_array()) bad(t, k, "an array of integers >= 0");
    std::vector<std::uint64_t> out;
    for (const auto& e : v.as_array()) {
      const auto s = integer(e, t, k);
      if (s < 0) bad(t, k, "an array of integers >= 0");
      out.push_back(std::uint64_t(s));
    }
    return out;
  }
};

template <class T>
std::string list(const std::vector<T>& v, bool quote) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    std::ostringstream o;
    if constexpr (std::is_same_v<T, double>)
      o << num(v[i]);
    else
      o << v[i];
    s += quote ? "\"" + o.str() + "\"" : o.str();
  }
  return s + "]";
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

}  // namespace

StudyConfig default_study() { return StudyConfig{}; }

StudyConfig parse_study_toml(const std::string& path) {
  {
    std::ifstream probe(path);
    if (!probe) throw_input(kFn, "cannot read study file '" + path + "'");
  }
  toml::value root;
  try {
    root = toml::parse(path);
  } catch (const std::exception& e) {
    throw_input(kFn, "study file '" + path + "' is not valid TOML: " + std::string(e.what()));
  }
  StudyConfig c = default_study();
  Reader r{path};
  using Setter = std::function<void(const toml::value&)>;
  // table -> key -> setter; "" is the top level.
  std::map<std::string, std::map<std::string, Setter>> keys;
  keys[""]["name"] = [&](const toml::value& v) { c.name = r.str(v, "", "name"); };
  keys["data"]["datasets"] = [&](const toml::value& v) { c.datasets = r.strings(v, "data", "datasets"); };
  keys["data"]["data_dir"] = [&](const toml::value& v) { c.data_dir = r.str(v, "data", "data_dir"); };
  keys["model"]["presets"] = [&](const toml::value& v) { c.models = r.strings(v, "model", "presets"); };
  keys["model"]["residuals"] = [&](const toml::value& v) { c.residuals = r.strings(v, "model", "residuals"); };
  keys["model"]["standard_twin"] = [&](const toml::value& v) { c.standard_twin = r.boolean(v, "model", "standard_twin"); };
  keys["model"]["block_size"] = [&](const toml::value& v) { c.block_size = int(r.integer(v, "model", "block_size")); };
  keys["train"]["seeds"] = [&](const toml::value& v) { c.seeds = r.seeds(v, "train", "seeds"); };
  keys["train"]["epochs"] = [&](const toml::value& v) { c.epochs = int(r.integer(v, "train", "epochs")); };
  keys["train"]["train_subset"] = [&](const toml::value& v) { c.train_subset = r.integer(v, "train", "train_subset"); };
  keys["train"]["max_steps"] = [&](const toml::value& v) { c.max_steps = r.integer(v, "train", "max_steps"); };
  keys["train"]["batch_size"] = [&](const toml::value& v) { c.batch_size = int(r.integer(v, "train", "batch_size")); };
  keys["train"]["lr"] = [&](const toml::value& v) { c.lr = r.real(v, "train", "lr"); };
  keys["train"]["weight_decay"] = [&](const toml::value& v) { c.weight_decay = r.real(v, "train", "weight_decay"); };
  keys["train"]["sbece_weight"] = [&](const toml::value& v) { c.sbece_weight = r.real(v, "train", "sbece_weight"); };
  keys["execution"]["parallel"] = [&](const toml::value& v) { c.parallel = int(r.integer(v, "execution", "parallel")); };
  keys["execution"]["threads_per_job"] = [&](const toml::value& v) {
    c.threads_per_job = int(r.integer(v, "execution", "threads_per_job"));
  };
  keys["trace"]["split"] = [&](const toml::value& v) { c.split = r.str(v, "trace", "split"); };
  keys["audit"]["stats"] = [&](const toml::value& v) { c.stats = r.strings(v, "audit", "stats"); };
  keys["audit"]["permutations"] = [&](const toml::value& v) { c.permutations = int(r.integer(v, "audit", "permutations")); };
  keys["audit"]["bins"] = [&](const toml::value& v) { c.bins = int(r.integer(v, "audit", "bins")); };
  keys["audit"]["seed"] = [&](const toml::value& v) {
    const auto s = r.integer(v, "audit", "seed");
    if (s < 0) r.bad("audit", "seed", "an integer >= 0");
    c.audit_seed = std::uint64_t(s);
  };
  keys["audit"]["probes"] = [&](const toml::value& v) { c.probes = r.boolean(v, "audit", "probes"); };
  keys["audit"]["probe_restarts"] = [&](const toml::value& v) { c.probe_restarts = int(r.integer(v, "audit", "probe_restarts")); };
  keys["audit"]["sensitivity"] = [&](const toml::value& v) { c.sensitivity = r.boolean(v, "audit", "sensitivity"); };
  keys["audit"]["sensitivity_effects"] = [&](const toml::value& v) {
    c.sensitivity_effects = r.reals(v, "audit", "sensitivity_effects");
  };
  keys["audit"]["sensitivity_threshold"] = [&](const toml::value& v) {
    c.sensitivity_threshold = r.real(v, "audit", "sensitivity_threshold");
  };
  keys["audit"]["sensitivity_threshold_effect"] = [&](const toml::value& v) {
    c.sensitivity_threshold_effect = r.real(v, "audit", "sensitivity_threshold_effect");
  };
  keys["audit"]["sensitivity_draws"] = [&](const toml::value& v) {
    c.sensitivity_draws = int(r.integer(v, "audit", "sensitivity_draws"));
  };
  keys["audit"]["exact_null"] = [&](const toml::value& v) { c.exact_null = r.boolean(v, "audit", "exact_null"); };
  keys["audit"]["null_replicates"] = [&](const toml::value& v) { c.null_replicates = int(r.integer(v, "audit", "null_replicates")); };
  keys["audit"]["null_variants"] = [&](const toml::value& v) { c.null_variants = r.strings(v, "audit", "null_variants"); };
  keys["audit"]["threads"] = [&](const toml::value& v) { c.threads = int(r.integer(v, "audit", "threads")); };

  if (!root.is_table()) throw_input(kFn, "study file '" + path + "' has no top-level table");
  for (const auto& [k, v] : root.as_table()) {
    if (keys.count(k) && k != "") {
      if (!v.is_table()) throw_input(kFn, path + ": '" + k + "' must be a table ([" + k + "])");
      for (const auto& [k2, v2] : v.as_table()) {
        auto it = keys[k].find(k2);
        if (it == keys[k].end()) throw_input(kFn, path + ": unknown key '" + k2 + "' in [" + k + "]");
        it->second(v2);
      }
    } else if (keys[""].count(k)) {
      keys[""][k](v);
    } else {
      throw_input(kFn, path + ": unknown table or key '" + k + "' (tables: data, model, train, execution, trace, audit)");
    }
  }
  try {
    validate_study(c);
  } catch (const InputError& e) {
    throw_input(kFn, path + ": " + e.what());
  }
  return c;
}

void validate_study(const StudyConfig& c) {
  auto need = [](bool ok, const std::string& key, const std::string& rule) {
    if (!ok) throw_input(kFn, key + " " + rule);
  };
  need(!c.name.empty() && c.name.find_first_of("/\\ ") == std::string::npos, "name", "must be non-empty without spaces or slashes");
  need(!c.datasets.empty(), "[data] datasets", "must name at least one dataset");
  for (const auto& d : c.datasets)
    need(d == "fashion-mnist" || d == "cifar10" || d == "cifar100", "[data] datasets", "entry '" + d + "' is not fashion-mnist, cifar10 or cifar100");
  need(!c.models.empty(), "[model] presets", "must name at least one preset");
  need(!c.residuals.empty() || c.standard_twin, "[model] residuals", "is empty and standard_twin is false: nothing to train");
  std::set<std::string> seen;
  for (const auto& m : c.residuals) {
    need(m == "full" || m == "block", "[model] residuals", "entry '" + m + "' is not full or block (the standard twin is standard_twin = true)");
    need(seen.insert(m).second, "[model] residuals", "lists '" + m + "' twice");
  }
  need(c.block_size >= 1, "[model] block_size", "must be >= 1");
  need(!c.seeds.empty(), "[train] seeds", "must list at least one seed");
  std::set<std::uint64_t> ss(c.seeds.begin(), c.seeds.end());
  need(ss.size() == c.seeds.size(), "[train] seeds", "has a repeated seed");
  need(c.epochs >= 1, "[train] epochs", "must be >= 1");
  need(c.train_subset >= 0, "[train] train_subset", "must be >= 0 (0 = all)");
  need(c.max_steps >= 0, "[train] max_steps", "must be >= 0 (0 = no cap)");
  need(c.batch_size >= 1, "[train] batch_size", "must be >= 1");
  need(c.lr > 0 && std::isfinite(c.lr), "[train] lr", "must be > 0");
  need(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "[train] weight_decay", "must be >= 0");
  need(c.sbece_weight >= 0 && std::isfinite(c.sbece_weight), "[train] sbece_weight", "must be >= 0");
  need(c.parallel >= 1 && c.parallel <= 256, "[execution] parallel", "must be in [1, 256]");
  need(c.threads_per_job >= 1 && c.threads_per_job <= 256, "[execution] threads_per_job", "must be in [1, 256]");
  need(c.split == "test" || c.split == "val", "[trace] split", "must be test or val");
  need(!c.stats.empty(), "[audit] stats", "must name at least one statistic (the test family would be empty)");
  need(c.permutations >= 1, "[audit] permutations", "must be >= 1");
  need(c.bins >= 1 && c.bins <= 1000, "[audit] bins", "must be in [1, 1000]");
  need(c.probe_restarts >= 1, "[audit] probe_restarts", "must be >= 1");
  need(!c.sensitivity || !c.sensitivity_effects.empty(), "[audit] sensitivity_effects", "must not be empty");
  for (double e : c.sensitivity_effects) need(e >= 0 && std::isfinite(e), "[audit] sensitivity_effects", "entries must be finite and >= 0");
  need(!c.sensitivity || std::find(c.sensitivity_effects.begin(), c.sensitivity_effects.end(), c.sensitivity_threshold_effect) !=
                             c.sensitivity_effects.end(),
       "[audit] sensitivity_threshold_effect", "must be one of sensitivity_effects");
  need(std::isfinite(c.sensitivity_threshold), "[audit] sensitivity_threshold", "must be a finite number");
  need(c.sensitivity_draws >= 1, "[audit] sensitivity_draws", "must be >= 1");
  need(c.null_replicates >= 1, "[audit] null_replicates", "must be >= 1");
  for (const auto& v : c.null_variants)
    need(v == "confidence" || v == "full_logit", "[audit] null_variants", "entry '" + v + "' is not confidence or full_logit");
  need(!c.exact_null || !c.null_variants.empty(), "[audit] null_variants", "must not be empty");
  need(c.threads >= 1 && c.threads <= 256, "[audit] threads", "must be in [1, 256]");
  need(!c.residuals.empty(), "[model] residuals", "must name at least one AttnRes mode (the audit needs routing)");
}

std::string study_to_toml(const StudyConfig& c) {
  std::ostringstream o;
  o << "# arcal study (resolved). Every key is optional; omitted keys take these defaults.\n";
  o << "name = \"" << c.name << "\"\n\n";
  o << "[data]\n";
  o << "datasets = " << list(c.datasets, true) << "   # fashion-mnist | cifar10 | cifar100\n";
  o << "data_dir = \"" << c.data_dir << "\"   # \"\" = each dataset's default location\n\n";
  o << "[model]\n";
  o << "presets = " << list(c.models, true) << "\n";
  o << "residuals = " << list(c.residuals, true) << "   # AttnRes modes, audited: full | block\n";
  o << "standard_twin = " << (c.standard_twin ? "true" : "false") << "   # a standard-residual twin per seed\n";
  o << "block_size = " << c.block_size << "\n\n";
  o << "[train]\n";
  o << "seeds = " << list(c.seeds, false) << "\n";
  o << "epochs = " << c.epochs << "\n";
  o << "train_subset = " << c.train_subset << "   # 0 = the whole training split\n";
  o << "max_steps = " << c.max_steps << "   # 0 = no cap\n";
  o << "batch_size = " << c.batch_size << "\n";
  o << "lr = " << num(c.lr) << "\n";
  o << "weight_decay = " << num(c.weight_decay) << "\n";
  o << "sbece_weight = " << num(c.sbece_weight) << "\n\n";
  o << "[execution]\n";
  o << "parallel = " << c.parallel << "   # trainings and traces at once\n";
  o << "threads_per_job = " << c.threads_per_job << "\n\n";
  o << "[trace]\n";
  o << "split = \"" << c.split << "\"\n\n";
  o << "[audit]\n";
  o << "stats = " << list(c.stats, true) << "\n";
  o << "permutations = " << c.permutations << "\n";
  o << "bins = " << c.bins << "\n";
  o << "seed = " << c.audit_seed << "\n";
  o << "probes = " << (c.probes ? "true" : "false") << "\n";
  o << "probe_restarts = " << c.probe_restarts << "\n";
  o << "sensitivity = " << (c.sensitivity ? "true" : "false") << "\n";
  o << "sensitivity_effects = " << list(c.sensitivity_effects, false) << "\n";
  o << "sensitivity_threshold = " << num(c.sensitivity_threshold) << "   # recovery R needed for the verdict 'absent'\n";
  o << "sensitivity_threshold_effect = " << num(c.sensitivity_threshold_effect) << "   # nats; one of sensitivity_effects\n";
  o << "sensitivity_draws = " << c.sensitivity_draws << "\n";
  o << "exact_null = " << (c.exact_null ? "true" : "false") << "\n";
  o << "null_replicates = " << c.null_replicates << "\n";
  o << "null_variants = " << list(c.null_variants, true) << "\n";
  o << "threads = " << c.threads << "\n";
  return o.str();
}

std::vector<StudyRun> expand_study(const StudyConfig& c) {
  validate_study(c);
  std::vector<std::string> modes = c.residuals;
  if (c.standard_twin) modes.push_back("standard");
  std::vector<StudyRun> out;
  for (const auto& d : c.datasets)
    for (const auto& m : c.models)
      for (const auto& mode : modes)
        for (auto seed : c.seeds) {
          StudyRun r;
          r.dataset = d;
          r.model = m;
          r.residual = mode;
          r.seed = seed;
          r.audited = mode != "standard";
          r.id = d + "-" + m + "-" + mode + "-s" + std::to_string(seed);
          r.train_args = {"--dataset", d, "--model", m, "--residual", mode, "--seed", std::to_string(seed),
                          "--epochs", std::to_string(c.epochs), "--train-subset", std::to_string(c.train_subset),
                          "--max-steps", std::to_string(c.max_steps), "--batch-size", std::to_string(c.batch_size),
                          "--lr", num(c.lr), "--weight-decay", num(c.weight_decay), "--sbece-weight", num(c.sbece_weight)};
          if (mode == "block") {
            r.train_args.push_back("--block-size");
            r.train_args.push_back(std::to_string(c.block_size));
          }
          if (!c.data_dir.empty()) {
            r.train_args.push_back("--data-dir");
            r.train_args.push_back(c.data_dir);
          }
          std::string key;
          for (const auto& a : r.train_args) key += a + '\0';
          r.hash = stable_hash(key);
          out.push_back(std::move(r));
        }
  return out;
}

std::vector<std::string> study_audit_args(const StudyConfig& c) {
  std::vector<std::string> a = {"--stat", join(c.stats), "--permutations", std::to_string(c.permutations), "--bins",
                                std::to_string(c.bins), "--seed", std::to_string(c.audit_seed), "--probe-restarts",
                                std::to_string(c.probe_restarts)};
  if (!c.probes) a.push_back("--no-probes");
  if (c.sensitivity) {
    std::vector<std::string> e;
    for (double x : c.sensitivity_effects) e.push_back(num(x));
    a.insert(a.end(), {"--sensitivity", "--sensitivity-effects", join(e), "--sensitivity-draws", std::to_string(c.sensitivity_draws),
                       "--sensitivity-threshold", num(c.sensitivity_threshold), "--sensitivity-threshold-effect",
                       num(c.sensitivity_threshold_effect)});
  }
  if (c.exact_null)
    a.insert(a.end(), {"--exact-null", "--null-replicates", std::to_string(c.null_replicates), "--null-variants", join(c.null_variants)});
  return a;
}

std::string stable_hash(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace arcal
