#include "audit/integrity.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "audit/audit.hpp"
#include "core/check.hpp"
#include "core/hash.hpp"

namespace arcal {

namespace {

/// The values of row i that define it: label, outputs, profile and statistics.
struct RowView {
  const AuditRunInput& r;
  std::size_t K, P;
  std::uint64_t hash(std::size_t i) const {
    std::uint64_t h = fnv1a64(&r.labels[i], sizeof(std::int64_t));
    // Clustered examples: a row equal to one of another cluster is a second draw that happens to
    // coincide (two sequences that start with the same bytes predict alike), not a copy; only copies
    // inside one cluster count.
    if (!r.cluster.empty()) h = fnv1a64(&r.cluster[i], sizeof(std::int64_t), h);
    h = fnv1a64(&r.confidence[i], sizeof(double), h);
    if (!r.log_probs.empty()) h = fnv1a64(&r.log_probs[i * K], K * sizeof(double), h);
    if (P > 0 && !r.profile.empty()) h = fnv1a64(&r.profile[i * P], P * sizeof(double), h);
    for (const auto& s : r.statistics) h = fnv1a64(&s[i], sizeof(double), h);
    return h;
  }
  bool equal(std::size_t a, std::size_t b) const {
    if (r.labels[a] != r.labels[b] || r.confidence[a] != r.confidence[b]) return false;
    if (!r.cluster.empty() && r.cluster[a] != r.cluster[b]) return false;
    if (!r.log_probs.empty() && !std::equal(&r.log_probs[a * K], &r.log_probs[a * K] + K, &r.log_probs[b * K]))
      return false;
    if (P > 0 && !r.profile.empty() && !std::equal(&r.profile[a * P], &r.profile[a * P] + P, &r.profile[b * P]))
      return false;
    for (const auto& s : r.statistics)
      if (s[a] != s[b]) return false;
    return true;
  }
};

/// Whole-run fingerprint (order-sensitive: the same trace written twice).
std::uint64_t run_hash(const AuditRunInput& r) {
  std::uint64_t h = fnv1a64(r.labels.data(), r.labels.size() * sizeof(std::int64_t));
  h = fnv1a64(r.confidence.data(), r.confidence.size() * sizeof(double), h);
  h = fnv1a64(r.log_probs.data(), r.log_probs.size() * sizeof(double), h);
  return fnv1a64(r.profile.data(), r.profile.size() * sizeof(double), h);
}

/// Row i of run r as it would be of any run: label, outputs, profile and statistics (no cluster id).
std::uint64_t row_hash(const AuditRunInput& r, std::size_t i) {
  const std::size_t K = r.classes, P = r.profile_names.size();
  std::uint64_t h = fnv1a64(&r.labels[i], sizeof(std::int64_t));
  h = fnv1a64(&r.confidence[i], sizeof(double), h);
  if (!r.log_probs.empty()) h = fnv1a64(&r.log_probs[i * K], K * sizeof(double), h);
  if (P > 0 && !r.profile.empty()) h = fnv1a64(&r.profile[i * P], P * sizeof(double), h);
  for (const auto& s : r.statistics) h = fnv1a64(&s[i], sizeof(double), h);
  return h;
}

bool rows_equal(const AuditRunInput& a, std::size_t i, const AuditRunInput& b, std::size_t j) {
  const std::size_t K = a.classes, P = a.profile_names.size();
  if (a.labels[i] != b.labels[j] || a.confidence[i] != b.confidence[j]) return false;
  if (K != b.classes || P != b.profile_names.size() || a.statistics.size() != b.statistics.size()) return false;
  if (!a.log_probs.empty() && !std::equal(&a.log_probs[i * K], &a.log_probs[i * K] + K, &b.log_probs[j * K])) return false;
  if (P > 0 && !a.profile.empty() && !std::equal(&a.profile[i * P], &a.profile[i * P] + P, &b.profile[j * P])) return false;
  for (std::size_t s = 0; s < a.statistics.size(); ++s)
    if (a.statistics[s][i] != b.statistics[s][j]) return false;
  return true;
}

/// Rows of b that equal a row of a, bit for bit, in any order.
std::size_t shared_rows(const AuditRunInput& a, const AuditRunInput& b) {
  if (a.labels.size() != a.confidence.size() || b.labels.size() != b.confidence.size()) return 0;
  std::unordered_multimap<std::uint64_t, std::size_t> index;
  index.reserve(a.confidence.size());
  for (std::size_t i = 0; i < a.confidence.size(); ++i) index.emplace(row_hash(a, i), i);
  std::size_t shared = 0;
  for (std::size_t j = 0; j < b.confidence.size(); ++j)
    for (auto [it, end] = index.equal_range(row_hash(b, j)); it != end; ++it)
      if (rows_equal(a, it->second, b, j)) {
        ++shared;
        break;
      }
  return shared;
}

bool same_run(const AuditRunInput& a, const AuditRunInput& b) {
  return a.labels == b.labels && a.confidence == b.confidence && a.log_probs == b.log_probs && a.profile == b.profile &&
         a.statistics == b.statistics;
}

/// Examples that differ from the column's most common value.
std::size_t minority(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t best = 0;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    best = std::max(best, j - i);
    i = j;
  }
  return v.size() - best;
}

template <class T>
void keep_rows(std::vector<T>& v, const std::vector<std::size_t>& rows, std::size_t width) {
  if (v.empty()) return;
  std::vector<T> out;
  out.reserve(rows.size() * width);
  for (auto i : rows) out.insert(out.end(), v.begin() + long(i * width), v.begin() + long((i + 1) * width));
  v = std::move(out);
}

void drop_rows(AuditRunInput& r, const std::vector<std::size_t>& keep) {
  const std::size_t K = r.classes, P = r.profile_names.size();
  keep_rows(r.confidence, keep, 1);
  keep_rows(r.correct, keep, 1);
  keep_rows(r.predictive_entropy, keep, 1);
  keep_rows(r.labels, keep, 1);
  keep_rows(r.predicted, keep, 1);
  keep_rows(r.log_probs, keep, K);
  if (P > 0) keep_rows(r.profile, keep, P);
  for (auto& s : r.statistics) keep_rows(s, keep, 1);
  keep_rows(r.cluster, keep, 1);
}

void drop_profile_columns(AuditRunInput& r, const std::vector<bool>& drop) {
  const std::size_t n = r.confidence.size(), P = r.profile_names.size();
  std::vector<std::string> names;
  std::vector<std::size_t> kept;
  for (std::size_t j = 0; j < P; ++j)
    if (!drop[j]) {
      kept.push_back(j);
      names.push_back(r.profile_names[j]);
    }
  std::vector<double> prof(n * kept.size());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < kept.size(); ++k) prof[i * kept.size() + k] = r.profile[i * P + kept[k]];
  r.profile = std::move(prof);
  r.profile_names = std::move(names);
}

}  // namespace

IntegrityResult check_integrity(std::vector<AuditRunInput>& runs, bool drop_duplicates) {
  const char* fn = "check_integrity";
  IntegrityResult res;
  res.drop_duplicates = drop_duplicates;
  // Identical runs: the same trace passed twice would count as two seeds.
  std::vector<std::uint64_t> hashes;
  for (const auto& r : runs) hashes.push_back(run_hash(r));
  for (std::size_t b = 0; b < runs.size(); ++b)
    for (std::size_t a = 0; a < b; ++a)
      if (hashes[a] == hashes[b] && same_run(runs[a], runs[b]))
        throw_input(fn, "run[" + std::to_string(b) + "] '" + runs[b].run + "' is identical to run[" + std::to_string(a) +
                            "] '" + runs[a].run +
                            "' (same labels, outputs and routing): the same trace passed twice would count as two "
                            "independent runs; pass each trace once");
  // Runs that share rows are not independent seeds: a row-permuted copy of a trace, or two traces of
  // overlapping test subsets, used to be accepted as two seeds. Independent models agree on a row's
  // every output bit for bit essentially never, so 1 % shared rows is already far from chance.
  for (std::size_t b = 0; b < runs.size(); ++b)
    for (std::size_t a = 0; a < b; ++a) {
      const std::size_t shared = shared_rows(runs[a], runs[b]);
      const std::size_t nb = runs[b].confidence.size();
      if (shared > 0 && shared * 100 >= std::max<std::size_t>(1, std::min(nb, runs[a].confidence.size()))) {
        const bool all = shared == nb && nb == runs[a].confidence.size();
        throw_input(fn, "run[" + std::to_string(b) + "] '" + runs[b].run + "' shares " + std::to_string(shared) +
                            " of its " + std::to_string(nb) + " rows with run[" + std::to_string(a) + "] '" +
                            runs[a].run + "' (the same label, outputs and routing, in any order)" +
                            (all ? ": it is the same trace with its rows reordered" : "") +
                            "; runs must be independent (seeds of separately trained models), so pass each "
                            "example set once");
      }
    }
  for (auto& r : runs) {
    RunIntegrity ri;
    ri.run = r.run;
    const std::size_t n = r.confidence.size();
    ri.rows = n;
    // Duplicated rows.
    if (r.labels.size() == n) {
      const RowView view{r, r.classes, r.profile_names.size()};
      std::unordered_multimap<std::uint64_t, std::size_t> seen;
      seen.reserve(n);
      std::vector<std::size_t> keep;
      keep.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = view.hash(i);
        bool dup = false;
        for (auto [it, end] = seen.equal_range(h); it != end && !dup; ++it) dup = view.equal(it->second, i);
        if (dup) {
          ++ri.duplicate_rows;
        } else {
          seen.emplace(h, i);
          keep.push_back(i);
        }
      }
      if (ri.duplicate_rows > 0) {
        if (drop_duplicates) {
          drop_rows(r, keep);
          ri.duplicates_dropped = true;
        }
        res.notes.push_back(r.run + ": " + std::to_string(ri.duplicate_rows) + " of " + std::to_string(n) +
                            " rows duplicate an earlier row (same label, outputs and routing)" +
                            (drop_duplicates ? "; removed (--drop-duplicates)"
                                             : "; kept: the tests assume independent examples, so duplicates make "
                                               "them anti-conservative (rerun with --drop-duplicates)"));
      }
    }
    const std::size_t m = r.confidence.size();
    const std::size_t limit = std::max(kNearConstantMin, m / kNearConstantDivisor);
    // Statistics of the diagnostic family.
    for (std::size_t s = r.statistics.size(); s-- > 0;)
      if (r.statistics[s].size() == m && minority(r.statistics[s]) < limit) {
        ri.dropped_statistics.insert(ri.dropped_statistics.begin(), r.statistic_names[s]);
        r.statistics.erase(r.statistics.begin() + long(s));
        r.statistic_names.erase(r.statistic_names.begin() + long(s));
      }
    if (!ri.dropped_statistics.empty()) {
      std::string list;
      for (const auto& s : ri.dropped_statistics) list += (list.empty() ? "" : ", ") + s;
      if (r.statistics.empty())
        throw_input(fn, "run '" + r.run + "': every statistic (" + list + ") is constant or nearly so (fewer than " +
                            std::to_string(limit) + " of " + std::to_string(m) +
                            " examples differ from the most common value), so the diagnostic family would be empty");
      res.notes.push_back(r.run + ": statistic " + list + " dropped: fewer than " + std::to_string(limit) + " of " +
                          std::to_string(m) + " examples differ from its most common value");
    }
    // Profile columns (routing points or features).
    const std::size_t P = r.profile_names.size();
    if (P > 0 && r.profile.size() == m * P) {
      std::vector<std::size_t> minor(P);
      std::vector<bool> drop(P, false);
      for (std::size_t j = 0; j < P; ++j) {
        std::vector<double> col(m);
        for (std::size_t i = 0; i < m; ++i) col[i] = r.profile[i * P + j];
        minor[j] = minority(std::move(col));
        drop[j] = minor[j] < limit;
      }
      if (std::all_of(drop.begin(), drop.end(), [](bool d) { return d; })) {
        const auto best = std::size_t(std::max_element(minor.begin(), minor.end()) - minor.begin());
        if (minor[best] == 0)
          throw_input(fn, "run '" + r.run + "': every routing point / feature column of the profile is constant, so "
                          "there is no routing information to audit");
        drop[best] = false;
      }
      for (std::size_t j = 0; j < P; ++j)
        if (drop[j]) {
          ri.dropped_profile.push_back(r.profile_names[j]);
          res.notes.push_back(r.run + ": profile column '" + r.profile_names[j] + "' dropped: only " +
                              std::to_string(minor[j]) + " of " + std::to_string(m) +
                              " examples differ from its most common value (fewer than " + std::to_string(limit) + ")");
        }
      if (!ri.dropped_profile.empty()) drop_profile_columns(r, drop);
    }
    res.runs.push_back(std::move(ri));
  }
  return res;
}

}  // namespace arcal
