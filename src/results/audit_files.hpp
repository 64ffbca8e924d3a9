// The result set of one audit on disk: results.json (the typed AuditResults through results/audit_json.hpp)
// and the CSV tables beside it (diagnostic, CondCal, probes, sensitivity, exact null), written atomically.
// Lives in src/results, above src/audit, so that the audit computes and never includes its writers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "audit/audit.hpp"

namespace arcal {

/// The results.json object (to_json of results/audit_json.hpp).
nlohmann::json audit_results_json(const AuditResults& results);

/// Writes DIR/diagnostic.csv, DIR/condcal.csv, DIR/probes.csv (when has_probes), DIR/sensitivity.csv
/// (when has_sensitivity), DIR/exact_null.csv (when has_exact_null) and finally DIR/results.json, each atomically
/// (creating DIR). Throws InputError when DIR cannot be created or written.
void write_audit_results(const AuditResults& results, const std::string& dir);

}  // namespace arcal
