"""arcal.audit: the results.json of `arcal audit` on the same traces (paths or arrays), the audit's
decisions on simulated traces with and without a routing effect, feature-only traces, bad input."""
import json

import numpy as np
import pytest

import arcal
from conftest import make_predictions, simulated_trace


def strip_times(j):
    """results.json without wall-clock fields (the only values that differ between two runs)."""
    if isinstance(j, dict):
        return {k: strip_times(v) for k, v in j.items() if k != "seconds"}
    if isinstance(j, list):
        return [strip_times(v) for v in j]
    return j


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("audit")
    paths = []
    for seed, effect in [(1, 0.05), (2, 0.05)]:
        t = simulated_trace(2000, 5, seed=seed, effect=effect)
        p = d / f"run{seed}.npz"
        np.savez(p, **t)
        paths.append(str(p))
    return d, paths


def test_same_results_as_cli(cli, traces):
    d, paths = traces
    r = cli("audit", *paths, "--out", d / "cli", "--permutations", 500, "--probe-restarts", 1, "--probe-repeats", 2,
            "--seed", 3, "--json")
    want = r.json()
    got = arcal.audit(paths, permutations=500, probe_restarts=1, probe_repeats=2, seed=3, out=str(d / "py"))
    assert got["schema"] == "arcal.audit/3"
    assert strip_times(got) == strip_times(want)
    # out= writes what `arcal audit --out` writes
    assert strip_times(json.loads((d / "py" / "results.json").read_text())) == strip_times(want)
    assert (d / "py" / "diagnostic.csv").exists() and (d / "py" / "probes.csv").exists()


def test_arrays_give_the_results_of_files(traces):
    d, paths = traces
    arrays = [dict(np.load(p)) for p in paths]
    a = arcal.audit(paths, permutations=300, probes=False, seed=1)
    b = arcal.audit(arrays, permutations=300, probes=False, seed=1, names=paths)
    assert strip_times(a) == strip_times(b)
    c = arcal.audit(arrays, permutations=300, probes=False, seed=1)
    assert [t["run"] for t in c["diagnostic"]["tests"]][:2] == ["traces[0]", "traces[0]"]


def test_effect_detected_and_null_not():
    eff = simulated_trace(3000, 5, seed=5, effect=0.2)
    null = simulated_trace(3000, 5, seed=6, effect=0.0)
    r = arcal.audit([eff], stats=["re"], permutations=1000, probes=False, condcal=False)
    assert r["diagnostic"]["tests"][0]["p_holm"] < 0.01
    r = arcal.audit([null], stats="re", permutations=1000, probes=False, condcal=False)
    assert r["diagnostic"]["tests"][0]["p"] > 0.01  # seeded: a fixed draw, not a flaky one


def test_feature_only_traces_default_to_their_features():
    z, y = make_predictions(2000, 4, seed=7)
    rng = np.random.default_rng(7)
    t = {"logits": z, "labels": y, "features": rng.normal(size=(2000, 2)), "feature_names": np.array(["s1", "s2"])}
    r = arcal.audit([t], permutations=200, probe_repeats=2)
    assert sorted({x["statistic"] for x in r["diagnostic"]["tests"]}) == ["s1", "s2"]
    assert r["probes"]["tests"]


def test_sensitivity_and_exact_null_match_cli(cli, traces):
    d, paths = traces
    opts = dict(sensitivity_effects=[0.0, 0.02], sensitivity_draws=2, sensitivity_threshold_effect=0.02,
                null_replicates=2, refit_patience=1)
    got = arcal.audit(paths[:1], permutations=200, probe_repeats=2, sensitivity=True, exact_null=True, seed=2,
                      condcal=False, **opts)
    want = cli("audit", paths[0], "--out", d / "cli2", "--permutations", 200, "--probe-repeats", 2, "--sensitivity",
               "--exact-null", "--seed", 2, "--no-condcal", "--sensitivity-effects", "0,0.02", "--sensitivity-draws", 2,
               "--sensitivity-threshold-effect", 0.02, "--null-replicates", 2, "--refit-patience", 1, "--json").json()
    assert "sensitivity" in got and "exact_null" in got
    assert strip_times(got) == strip_times(want)
    assert got["exact_null"]["refit"]["examples"] == [2000]  # within the default cap: whole


def test_refits_on_a_subsample_match_cli(cli, traces):
    # --refit-subsample cuts each larger run to a seeded subsample for the sensitivity audit and the
    # exact null only; the rest of the audit sees every example.
    d, paths = traces
    got = arcal.audit(paths[:1], permutations=200, probe_repeats=2, exact_null=True, seed=3, condcal=False,
                      null_replicates=2, refit_patience=1, null_model_based=False, refit_subsample=800)
    want = cli("audit", paths[0], "--out", d / "cli3", "--permutations", 200, "--probe-repeats", 2, "--exact-null",
               "--seed", 3, "--no-condcal", "--null-replicates", 2, "--refit-patience", 1, "--no-null-model-based",
               "--refit-subsample", 800, "--json").json()
    assert strip_times(got) == strip_times(want)
    refit = got["exact_null"]["refit"]
    assert refit["subsample"] == 800 and refit["examples"] == [800]
    groups = sum(r["matching"]["groups"] for r in got["exact_null"]["runs"] if r["variant"] == "confidence")
    assert 800 / 6 < groups <= 800 / 4  # groups of about 5 among the 800 refitted examples, not the 2,000
    assert got["probes"]["runs"][0]["n"] == 2000


def test_torch_threads_restored():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    arcal.audit([simulated_trace(1000, 4, seed=8)], permutations=100, probe_repeats=2)
    assert torch.get_num_threads() == before


def test_bad_input():
    t = simulated_trace(500, 4, seed=9)
    with pytest.raises(ValueError, match="unknown statistic 'nope' \\(available: re, rdv\\)"):
        arcal.audit([t], stats=["nope"])
    with pytest.raises(ValueError, match="traces is empty"):
        arcal.audit([])
    with pytest.raises(ValueError, match="traces must be a list"):
        arcal.audit("run.npz")
    with pytest.raises(ValueError, match=r"traces\[1\] is a int, but must be a path or a dict of arrays"):
        arcal.audit([t, 3])
    bad = dict(t)
    bad["labels"] = t["labels"].copy()
    bad["labels"][4] = 9
    with pytest.raises(ValueError, match=r"arcal.audit: traces\[0\]: labels\[4\] is 9, but must be in \[0, 3\]"):
        arcal.audit([bad])
    with pytest.raises(ValueError, match="unknown option 'permutation'"):
        arcal.audit([t], permutation=10)
    # Options go through the audit family's option table: the CLI's ranges, named by key.
    with pytest.raises(ValueError, match=r"null_group_size = 1 is outside \[2, 10\]"):
        arcal.audit([t], null_group_size=1)
    with pytest.raises(ValueError, match="null_variants"):
        arcal.audit([t], null_variants=["logit"])
    with pytest.raises(ValueError, match="cannot open"):
        arcal.audit(["/nonexistent/run.npz"])
