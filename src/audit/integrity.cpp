#include "audit/integrity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "audit/audit.hpp"
#include "core/check.hpp"
#include "core/hash.hpp"
#include "core/rng.hpp"

namespace arcal {

namespace {

/// The values of row i that define it: label, outputs, profile and statistics.
struct RowView {
  const AuditRunInput& r;
  std::size_t K, P;
  // Clustered examples: a row equal to one of another cluster is a second draw that happens to
  // coincide (two sequences that start with the same bytes predict alike), not a copy; only copies
  // inside one cluster count.
  std::uint64_t hash(std::size_t i) const {
    const std::uint64_t h = hash_without_cluster(i);
    return r.cluster.empty() ? h : fnv1a64(&r.cluster[i], sizeof(std::int64_t), h);
  }
  std::uint64_t hash_without_cluster(std::size_t i) const {
    std::uint64_t h = fnv1a64(&r.labels[i], sizeof(std::int64_t));
    h = fnv1a64(&r.confidence[i], sizeof(double), h);
    if (K > 0) h = fnv1a64(r.output_row(i), K * sizeof(double), h);
    if (P > 0 && !r.profile.empty()) h = fnv1a64(&r.profile[i * P], P * sizeof(double), h);
    for (const auto& s : r.statistics) h = fnv1a64(&s[i], sizeof(double), h);
    return h;
  }
  bool equal(std::size_t a, std::size_t b) const {
    if (!r.cluster.empty() && r.cluster[a] != r.cluster[b]) return false;
    return equal_without_cluster(a, b);
  }
  bool equal_without_cluster(std::size_t a, std::size_t b) const {
    if (r.labels[a] != r.labels[b] || r.confidence[a] != r.confidence[b]) return false;
    if (K > 0 && !std::equal(r.output_row(a), r.output_row(a) + K, r.output_row(b))) return false;
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
  h = fnv1a64(r.sorted_log_probs.data(), r.sorted_log_probs.size() * sizeof(double), h);
  return fnv1a64(r.profile.data(), r.profile.size() * sizeof(double), h);
}

/// rep[i]: the first row bit-for-bit equal to row i (i itself when none is earlier). With
/// `use_cluster` rows of different clusters never count as equal.
std::vector<std::size_t> exact_representatives(const AuditRunInput& r, bool use_cluster) {
  const std::size_t n = r.confidence.size();
  const RowView view{r, r.confidence.empty() ? 0 : r.output_width(), r.profile_names.size()};
  std::unordered_multimap<std::uint64_t, std::size_t> seen;
  seen.reserve(n);
  std::vector<std::size_t> rep(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto h = use_cluster ? view.hash(i) : view.hash_without_cluster(i);
    rep[i] = i;
    for (auto [it, end] = seen.equal_range(h); it != end; ++it)
      if (use_cluster ? view.equal(it->second, i) : view.equal_without_cluster(it->second, i)) {
        rep[i] = it->second;
        break;
      }
    if (rep[i] == i) seen.emplace(h, i);
  }
  return rep;
}

/// A run's rows as the columns compared for near-copies: confidence, log-probabilities, routing
/// profile and statistics (row-major, n x d).
struct RowColumns {
  std::size_t n = 0, d = 0;
  std::vector<double> x;
  const double* row(std::size_t i) const { return x.data() + i * d; }
};

RowColumns row_columns(const AuditRunInput& r) {
  RowColumns c;
  c.n = r.confidence.size();
  const std::size_t K =
      c.n > 0 && (r.log_probs.size() == c.n * r.classes || r.sorted_log_probs.size() == c.n * r.sorted_width)
          ? r.output_width()
          : 0;
  const std::size_t P = r.profile.size() == c.n * r.profile_names.size() ? r.profile_names.size() : 0;
  c.d = 1 + K + P + r.statistics.size();
  c.x.resize(c.n * c.d);
  for (std::size_t i = 0; i < c.n; ++i) {
    double* out = c.x.data() + i * c.d;
    *out++ = r.confidence[i];
    if (K > 0) out = std::copy_n(r.output_row(i), K, out);
    out = std::copy_n(r.profile.data() + i * P, P, out);
    for (const auto& s : r.statistics) *out++ = s.size() == c.n ? s[i] : 0.0;
  }
  return c;
}

/// Rows gathered for near_copy_pairs: the distinct rows (rep[i] == i) of one or more runs, each with
/// its key (label, and cluster where copies count only inside one) and its row index in its run.
struct RowSet {
  std::vector<const double*> rows;
  std::vector<std::pair<std::int64_t, std::int64_t>> key;
  std::vector<std::size_t> origin;
  void add(const AuditRunInput& r, const RowColumns& c, const std::vector<std::size_t>& rep, bool use_cluster) {
    for (std::size_t i = 0; i < c.n; ++i)
      if (rep[i] == i) {
        rows.push_back(c.row(i));
        key.emplace_back(r.labels[i], use_cluster && !r.cluster.empty() ? r.cluster[i] : 0);
        origin.push_back(i);
      }
  }
};

bool near_value(double x, double y, double scale) {
  if (x == y) return true;
  if (!std::isfinite(x) || !std::isfinite(y)) return false;
  return std::abs(x - y) <= kNearCopyTolerance * (scale + std::max(std::abs(x), std::abs(y)));
}

/// Calls found(a, b) for every pair of the given rows (positions a < b in `rows`) with the same key whose
/// columns all agree within kNearCopyTolerance, scaled by each column's standard deviation over the
/// rows given. The rows are sorted by key and a fixed random projection z = Σ w_j x_j / sd_j; a
/// near pair's z differ by at most W = τ Σ |w_j| (1 + max|x_j| / sd_j), so only rows that close are
/// compared.
template <class Found>
void near_copy_pairs(const RowSet& set, std::size_t d, Found found) {
  const auto& rows = set.rows;
  const auto& key = set.key;
  const std::size_t m = rows.size();
  if (m < 2) return;
  std::vector<double> mean(d, 0.0), sd(d, 0.0), top(d, 0.0);
  std::vector<std::size_t> count(d, 0);
  for (const double* r : rows)
    for (std::size_t j = 0; j < d; ++j)
      if (std::isfinite(r[j])) {
        ++count[j];
        mean[j] += (r[j] - mean[j]) / double(count[j]);
        top[j] = std::max(top[j], std::abs(r[j]));
      }
  for (const double* r : rows)
    for (std::size_t j = 0; j < d; ++j)
      if (std::isfinite(r[j])) sd[j] += (r[j] - mean[j]) * (r[j] - mean[j]);
  Rng rng(0x6e656172636f7079ULL);  // fixed: the same rows always give the same order
  std::vector<double> w(d, 0.0);
  double window = 0;
  for (std::size_t j = 0; j < d; ++j) {
    sd[j] = count[j] > 1 ? std::sqrt(sd[j] / double(count[j] - 1)) : 0.0;
    const double wj = (0.5 + rng.uniform()) * (rng.uniform() < 0.5 ? -1.0 : 1.0);
    if (sd[j] > 0) {
      w[j] = wj / sd[j];
      window += std::abs(wj) * kNearCopyTolerance * (1 + top[j] / sd[j]);
    }
  }
  window = window * (1 + 1e-6) + 1e-300;
  std::vector<double> z(m, 0.0);
  for (std::size_t a = 0; a < m; ++a)
    for (std::size_t j = 0; j < d; ++j)
      if (w[j] != 0 && std::isfinite(rows[a][j])) z[a] += w[j] * rows[a][j];
  std::vector<std::size_t> order(m);
  for (std::size_t a = 0; a < m; ++a) order[a] = a;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return key[a] != key[b] ? key[a] < key[b] : z[a] != z[b] ? z[a] < z[b] : a < b;
  });
  for (std::size_t p = 0; p < m; ++p) {
    const std::size_t a = order[p];
    for (std::size_t q = p + 1; q < m; ++q) {
      const std::size_t b = order[q];
      if (key[b] != key[a] || z[b] - z[a] > window) break;
      bool near = true;
      for (std::size_t j = 0; j < d && near; ++j) near = near_value(rows[a][j], rows[b][j], sd[j]);
      if (near) found(std::min(a, b), std::max(a, b));
    }
  }
}

/// Rows of the smaller of a and b that have a copy or near-copy (same label, every column within
/// tolerance) in the other run, in any order.
std::size_t shared_rows(const AuditRunInput& a, const AuditRunInput& b) {
  if (a.labels.size() != a.confidence.size() || b.labels.size() != b.confidence.size()) return 0;
  const auto ca = row_columns(a), cb = row_columns(b);
  if (ca.d != cb.d || a.classes != b.classes) return 0;
  const auto ra = exact_representatives(a, false), rb = exact_representatives(b, false);
  const bool a_small = a.confidence.size() <= b.confidence.size();
  RowSet set;  // a's distinct rows, then b's: runs told apart by position
  set.add(a, ca, ra, false);
  const std::size_t first_b = set.rows.size();
  set.add(b, cb, rb, false);
  std::vector<std::uint8_t> matched(a_small ? ca.n : cb.n, 0);  // representatives of the smaller run
  near_copy_pairs(set, ca.d, [&](std::size_t x, std::size_t y) {
    if ((x < first_b) == (y < first_b)) return;  // both of one run: not an overlap
    const std::size_t small = a_small ? x : y;   // x < first_b <= y
    matched[set.origin[small]] = 1;
  });
  const auto& rep = a_small ? ra : rb;
  std::size_t shared = 0;
  for (std::size_t i = 0; i < rep.size(); ++i) shared += matched[rep[i]];
  return shared;
}

bool same_run(const AuditRunInput& a, const AuditRunInput& b) {
  return a.labels == b.labels && a.confidence == b.confidence && a.log_probs == b.log_probs &&
         a.sorted_log_probs == b.sorted_log_probs && a.profile == b.profile && a.statistics == b.statistics;
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
  keep_rows(r.sorted_log_probs, keep, r.sorted_width);
  keep_rows(r.predicted_class, keep, 1);
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
        throw_input(fn, "run[" + std::to_string(b) + "] '" + runs[b].run + "' is identical to run[" +
                            std::to_string(a) + "] '" + runs[a].run +
                            "' (same labels, outputs and routing): the same trace passed twice would count as two "
                            "independent runs; pass each trace once");
  // Runs that share rows are not independent seeds: a row-permuted copy of a trace, two traces of
  // overlapping test subsets, or two non-deterministic passes over one model, used to be accepted as
  // two seeds. Separately trained models agree on a row's every output to within float noise
  // essentially never, so 1 % shared rows is already far from chance; fewer are reported.
  for (std::size_t b = 0; b < runs.size(); ++b)
    for (std::size_t a = 0; a < b; ++a) {
      const std::size_t shared = shared_rows(runs[a], runs[b]);
      if (shared == 0) continue;
      const std::size_t na = runs[a].confidence.size(), nb = runs[b].confidence.size(), smaller = std::min(na, nb);
      if (shared * 100 >= kOverlapRefusePercent * std::max<std::size_t>(1, smaller)) {
        const bool all = shared == nb && nb == na;
        throw_input(fn, "run[" + std::to_string(b) + "] '" + runs[b].run + "' and run[" + std::to_string(a) + "] '" +
                            runs[a].run + "' share " + std::to_string(shared) + " of the smaller run's " +
                            std::to_string(smaller) +
                            " rows (the same label, outputs and routing, equal or within float noise, in any order)" +
                            (all ? ": it is the same trace with its rows reordered (or re-run)" : "") +
                            "; runs must be independent (seeds of separately trained models), so pass each "
                            "example set once (the rule: " +
                            std::to_string(kOverlapRefusePercent) + " % shared rows or more)");
      }
      res.overlaps.push_back({runs[a].run, runs[b].run, shared, smaller});
      res.notes.push_back(runs[b].run + " and " + runs[a].run + " share " + std::to_string(shared) + " of " +
                          std::to_string(smaller) + " rows (equal or within float noise); below " +
                          std::to_string(kOverlapRefusePercent) + " %, so they count as independent seeds");
    }
  for (auto& r : runs) {
    RunIntegrity ri;
    ri.run = r.run;
    const std::size_t n = r.confidence.size();
    ri.rows = n;
    // Duplicated rows: bit-for-bit copies, then near-copies (float noise) among the distinct rows.
    if (r.labels.size() == n) {
      const auto rep = exact_representatives(r, true);
      const auto cols = row_columns(r);
      RowSet set;
      set.add(r, cols, rep, true);
      ri.duplicate_rows = n - set.rows.size();
      std::vector<std::uint8_t> near(n, 0);
      near_copy_pairs(set, cols.d,
                      [&](std::size_t x, std::size_t y) { near[std::max(set.origin[x], set.origin[y])] = 1; });
      std::vector<std::size_t> keep;
      keep.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        ri.near_duplicate_rows += near[i];
        if (rep[i] == i && !near[i]) keep.push_back(i);
      }
      if (ri.duplicate_rows + ri.near_duplicate_rows > 0) {
        if (drop_duplicates) {
          drop_rows(r, keep);
          ri.duplicates_dropped = true;
        }
        const std::string of = " of " + std::to_string(n) + " rows ";
        std::string what;
        if (ri.duplicate_rows > 0) what = std::to_string(ri.duplicate_rows) + of + "duplicate an earlier row";
        if (ri.near_duplicate_rows > 0)
          what += (what.empty() ? "" : "; ") + std::to_string(ri.near_duplicate_rows) + of +
                  "nearly copy an earlier row (every column within float noise)";
        res.notes.push_back(r.run + ": " + what + " (same label, outputs and routing)" +
                            (drop_duplicates ? "; removed (--drop-duplicates)"
                                             : "; kept: the tests assume independent examples, so copies make "
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
          throw_input(fn, "run '" + r.run +
                              "': every routing point / feature column of the profile is constant, so "
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
