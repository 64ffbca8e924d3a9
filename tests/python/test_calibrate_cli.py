"""`arcal calibrate` fit on one file and apply to another: every array of the applied file carried into
the output, --params from --save, --json's calibrator and before/after metrics (= arcal.metrics on the
applied file), outputs that would overwrite an input refused, mode errors; the one-file split mode kept."""
import json
import os
import sys

import numpy as np
import pytest

import arcal
from conftest import SOURCE, make_predictions, simulated_trace, softmax

sys.path.insert(0, os.path.join(SOURCE, "tests", "schema"))
import arcal_schemas  # noqa: E402  (docs/schema with their cross-file references resolved)


@pytest.fixture
def files(tmp_path):
    val = simulated_trace(2000, 5, seed=1)
    test = simulated_trace(1500, 5, seed=2)
    test["features"] = np.random.default_rng(3).normal(size=(1500, 2)).astype(np.float32)
    test["feature_names"] = np.array(["depth", "norm"])
    test["ids"] = np.arange(1500, dtype=np.int64) * 7
    np.savez(tmp_path / "val.npz", **val)
    np.savez_compressed(tmp_path / "test.npz", **test)
    return tmp_path, val, test


def test_apply_carries_every_array(cli, files):
    d, val, test = files
    r = cli("calibrate", "--fit", d / "val.npz", "--apply", d / "test.npz", "--method", "temperature",
            "--out", d / "g.npz")
    assert r.code == 0, r.err
    assert "wrote" in r.out
    g = np.load(d / "g.npz")
    assert set(g.files) == set(test) - {"logits"} | {"probs", "logits_uncalibrated", "calibrator"}
    for name in ["labels", "routing", "routing_sources", "features", "feature_names", "ids"]:
        assert np.array_equal(g[name], test[name]) and g[name].dtype == test[name].dtype, name
    assert str(g["meta"]) == test["meta"]
    assert np.array_equal(g["logits_uncalibrated"], test["logits"])
    cal = arcal.Calibrator("temperature").fit(val["labels"], logits=val["logits"])
    assert np.array_equal(g["probs"], cal.predict_proba(logits=test["logits"]))
    assert json.loads(str(g["calibrator"][0])) == cal.to_dict()
    # The output is a valid trace: arcal reads it back (and audits it: it still has routing).
    tr = arcal.read_trace(str(d / "g.npz"))
    assert tr["probs"].shape == (1500, 5)


def test_params_applies_the_saved_calibrator(cli, files):
    d, _, _ = files
    assert cli("calibrate", "--fit", d / "val.npz", "--apply", d / "test.npz", "--method", "isotonic", "--out",
               d / "g1.npz", "--save", d / "p.json").code == 0
    arcal_schemas.validate(json.loads((d / "p.json").read_text()), "calibrator.schema.json")
    r = cli("calibrate", "--params", d / "p.json", "--apply", d / "test.npz", "--out", d / "g2.npz")
    assert r.code == 0, r.err
    a, b = np.load(d / "g1.npz"), np.load(d / "g2.npz")
    assert np.array_equal(a["probs"], b["probs"])
    # Calibrating an already calibrated file keeps the first uncalibrated scores.
    assert cli("calibrate", "--params", d / "p.json", "--apply", d / "g2.npz", "--out", d / "g3.npz").code == 0
    c = np.load(d / "g3.npz")
    assert np.array_equal(c["logits_uncalibrated"], a["logits_uncalibrated"]) and "probs_uncalibrated" not in c.files


def test_json_reports_parameters_and_before_after_metrics(cli, files):
    d, _, test = files
    r = cli("calibrate", "--fit", d / "val.npz", "--apply", d / "test.npz", "--method", "vector", "--out",
            d / "g.npz", "--json", "--bootstrap", 30, "--seed", 2)
    j = r.json()
    arcal_schemas.validate(j, "calibrate.schema.json")
    assert j["schema"] == "arcal.calibrate/1" and j["mode"] == "fit" and j["method"] == "vector"
    assert j["n_fit"] == 2000 and j["n_apply"] == 1500 and len(j["calibrator"]["w"]) == 5
    g = np.load(d / "g.npz")
    assert j["before"] == arcal.metrics(test["labels"], logits=test["logits"], bootstrap=30, seed=2, smooth=True)
    assert j["after"] == arcal.metrics(g["labels"], probs=g["probs"], bootstrap=30, seed=2, smooth=True)
    assert j["after"]["nll"] < j["before"]["nll"]


def test_split_mode_unchanged_and_json(cli, files):
    d, _, _ = files
    r = cli("calibrate", d / "val.npz", "--method", "platt", "--out", d / "s.npz")
    assert r.code == 0 and "calibration n = " in r.out and "evaluation n = " in r.out
    s = np.load(d / "s.npz")
    assert set(s.files) == {"probs", "labels", "calibrator", "meta"}
    c = json.loads(str(s["calibrator"][0]))
    assert c["method"] == "platt" and c["seed"] == 0 and c["n_calibration"] + len(s["labels"]) == 2000
    j = cli("calibrate", d / "val.npz", "--method", "platt", "--out", d / "s2.npz", "--json", "--bootstrap", 0).json()
    assert j["mode"] == "split" and j["n_apply"] == len(s["labels"])
    assert np.array_equal(np.load(d / "s2.npz")["probs"], s["probs"])


def test_out_equal_to_an_input_is_refused(cli, files):
    d, _, _ = files
    before = (d / "test.npz").read_bytes()
    os.symlink(d / "test.npz", d / "link.npz")
    for out in [d / "test.npz", f"{d}/./test.npz", f"{d}/../{d.name}/test.npz", d / "link.npz"]:
        r = cli("calibrate", "--fit", d / "val.npz", "--apply", d / "test.npz", "--method", "platt", "--out", out)
        assert r.code == 2 and "writing it would destroy the input" in r.err, (out, r.err)
    r = cli("calibrate", "--fit", d / "val.npz", "--apply", d / "test.npz", "--method", "platt", "--out", "val.npz",
            cwd=d)
    assert r.code == 2 and "writing it would destroy the input" in r.err
    r = cli("calibrate", "--fit", d / "val.npz", "--apply", d / "test.npz", "--method", "platt", "--out", d / "g.npz",
            "--save", d / "val.npz")
    assert r.code == 2 and "--save" in r.err
    assert (d / "test.npz").read_bytes() == before and not (d / "g.npz").exists()


@pytest.mark.parametrize("args, message", [
    (["--apply", "test.npz", "--method", "platt"], "needs --fit"),
    (["--fit", "val.npz", "--method", "platt"], "needs --apply"),
    (["val.npz", "--fit", "val.npz", "--apply", "test.npz", "--method", "platt"], "is not taken with --fit"),
    (["--params", "val.npz", "--apply", "test.npz", "--method", "platt"], "--method: is not taken with --params"),
    (["--fit", "val.npz", "--apply", "test.npz"], "--method: is required"),
    (["--method", "platt"], "give FILE"),
])
def test_mode_errors_exit_two_with_one_line(cli, files, args, message):
    d, _, _ = files
    r = cli("calibrate", *args, "--out", "g.npz", cwd=d)
    assert r.code == 2 and message in r.err and r.err.count("\n") == 1, r.err
    assert not (d / "g.npz").exists()


def test_bad_params_and_class_mismatch(cli, files):
    d, _, _ = files
    (d / "bad.json").write_text('{"schema": "arcal.calibrator/1", "method": "temperature", "classes": 5}')
    r = cli("calibrate", "--params", d / "bad.json", "--apply", d / "test.npz", "--out", d / "g.npz")
    assert r.code == 2 and "key 'n_calibration' is missing" in r.err
    z, y = make_predictions(100, 3, seed=1)
    np.savez(d / "k3.npz", logits=z, labels=y)
    assert cli("calibrate", "--fit", d / "val.npz", "--apply", d / "test.npz", "--method", "platt", "--out",
               d / "g.npz", "--save", d / "p.json").code == 0
    r = cli("calibrate", "--params", d / "p.json", "--apply", d / "k3.npz", "--out", d / "g3.npz")
    assert r.code == 2 and "K = 3 classes, but the calibrator was fitted on K = 5" in r.err


def test_probs_only_files(cli, tmp_path):
    z, y = make_predictions(1000, 4, seed=9)
    np.savez(tmp_path / "v.npz", probs=softmax(z[:500]), labels=y[:500])
    np.savez(tmp_path / "t.npz", probs=softmax(z[500:]), labels=y[500:])
    assert cli("calibrate", "--fit", tmp_path / "v.npz", "--apply", tmp_path / "t.npz", "--method", "temperature",
               "--out", tmp_path / "g.npz").code == 0
    g = np.load(tmp_path / "g.npz")
    assert "probs_uncalibrated" in g.files
    cal = arcal.Calibrator("temperature").fit(y[:500], probs=softmax(z[:500]))
    assert np.array_equal(g["probs"], cal.predict_proba(probs=softmax(z[500:])))
