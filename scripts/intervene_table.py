#!/usr/bin/env python3
"""Markdown tables of an `arcal intervene` result (arcal.intervene/1): every ablation row, the
mass-importance comparison per sublayer type, and the points whose largest-mass family is not their
largest-effect family. Used by scripts/lm_routing_study.sh for docs/results.md.

    python3 scripts/intervene_table.py runs/lm_routing/intervene_block.json
"""
import json
import math
import sys


def ci(v, lo, hi, signed=True):
    f = "{:+.4f}" if signed else "{:.4f}"
    return (f + " [" + f + ", " + f + "]").format(v, lo, hi)


def main(path):
    j = json.load(open(path))
    token = j.get("unit") == "token"
    unit = "bits per byte" if token else "NLL"
    print(f"`{path}`: {j['n']} {'next-byte predictions' if token else 'images'} in {j['clusters']} "
          f"{'sequences' if token else 'units'}; base {'bits per byte ' + format(j['base_bits_per_byte'], '.4f') if token else 'NLL ' + format(j['base_nll'], '.4f')}, "
          f"accuracy {j['base_accuracy']:.4f}; intervals: 95 % percentile bootstrap over "
          f"{'whole sequences' if token else 'images'} ({j['bootstrap']} resamples).")
    w = j.get("wrapper_check")
    if w:
        print(f"Wrapped standard model (norm eps {w['norm_eps']:g}): max relative logit difference "
              f"{w['max_rel_logit_diff']:.2e}, max |α − 1/S_p| {w['max_routing_deviation']:.1e} over {w['examples']} examples.")
    print()
    print(f"| point | feeds | family | mass | Δ {unit} [95 % CI] | mean KL, nats [95 % CI] | Δ accuracy |")
    print("|---|---|---|---|---|---|---|")
    for e in j["effects"]:
        d, dci = (e["delta_bits_per_byte"], e["delta_bits_per_byte_ci"]) if token else (e["delta_nll"], e["delta_nll_ci"])
        print(f"| {e['point']} | {e.get('sublayer', '')} | {e['family']} | {e['mass']:.3f} | {ci(d, *dci)} | "
              f"{ci(e['mean_kl'], *e['mean_kl_ci'], signed=False)} | {e['delta_accuracy']:+.4f} |")
    print()
    print("| sublayer type | largest mass | largest effect (KL) | dissociated | points dissociated | Spearman(mass, KL) | mass ≥ 0.1, no detectable ΔNLL |")
    print("|---|---|---|---|---|---|---|")
    for m in j.get("mass_importance", []):
        rho = m["spearman_mass_vs_kl"]
        rho = "—" if rho is None or (isinstance(rho, float) and math.isnan(rho)) else f"{rho:.2f} ({m['pairs']} pairs)"
        print(f"| {m['sublayer']} | {m['largest_mass_family']} ({m['largest_mass']:.3f}) | {m['largest_effect_family']} "
              f"({m['largest_effect_kl']:.4f}) | {'yes' if m['dissociated'] else 'no'} | {m['dissociated_points']} of "
              f"{m['points']} | {rho} | {', '.join(m['mass_without_effect']) or 'none'} |")
    per_point = {}
    for e in j["effects"]:
        if e["point"] != "all":
            per_point.setdefault(e["point"], []).append(e)
    cases = []
    for p, es in sorted(per_point.items()):
        top_mass = max(e["mass"] for e in es)
        top = max(es, key=lambda e: e["mean_kl"])
        if top["mass"] < top_mass - 1e-6:
            heavy = max(es, key=lambda e: e["mass"])
            cases.append(f"point {p} ({es[0].get('sublayer', '')}): {heavy['family']} has the most mass "
                         f"({heavy['mass']:.3f}, KL {heavy['mean_kl']:.4f}), {top['family']} the largest effect "
                         f"({top['mass']:.3f}, KL {top['mean_kl']:.4f})")
        for e in es:
            d = e["delta_nll_ci"]
            if e["mass"] >= 0.1 and d[0] <= 0 <= d[1]:
                cases.append(f"point {p} ({es[0].get('sublayer', '')}): {e['family']} carries {e['mass']:.3f} of the "
                             f"mass and its ΔNLL interval [{d[0]:+.4f}, {d[1]:+.4f}] holds 0")
    print()
    print("Per point:" if cases else "Per point: no point's largest-mass family is smaller in effect than another.")
    for c in cases:
        print(f"- {c}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: intervene_table.py INTERVENE.json")
    main(sys.argv[1])
