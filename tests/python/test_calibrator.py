"""arcal.Calibrator: temperature scaling against scipy.optimize, every method's save/restore round
trip (bit-identical outputs), the same JSON and outputs as `arcal calibrate --fit/--apply --save`, and
bad input."""
import json
import pickle

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import arcal
from conftest import make_predictions, softmax

METHODS = ["temperature", "platt", "isotonic", "histogram", "nw", "qats", "vector", "matrix"]


def nll(p, y):
    return -np.mean(np.log(np.maximum(p[np.arange(len(y)), y], 1e-15)))


def ece(p, y, bins=15):
    c, a = p.max(axis=1), (p.argmax(axis=1) == y).astype(float)
    b = np.minimum((c * bins).astype(int), bins - 1)
    return sum(abs(a[b == i].mean() - c[b == i].mean()) * (b == i).mean() for i in range(bins) if (b == i).any())


def test_temperature_matches_scipy():
    z, y = make_predictions(3000, 6, seed=1, temp=2.0, dtype=np.float64)
    cal = arcal.Calibrator("temperature").fit(y, logits=z)
    t = cal.to_dict()["temperature"]
    # scipy's bounded Brent on the same convex objective, mean NLL of softmax(z / T).
    res = minimize_scalar(lambda T: nll(softmax(z / T), y), bounds=(0.05, 20), method="bounded",
                          options={"xatol": 1e-10})
    assert t == pytest.approx(res.x, rel=1e-5)  # Brent's tolerance on T, not arcal's
    assert 1.5 < t < 2.5  # labels were drawn at temperature 2
    np.testing.assert_allclose(cal.predict_proba(logits=z), softmax(z / t), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("method", METHODS)
def test_fit_predict_lowers_ece_and_round_trips(method):
    z, y = make_predictions(4000, 4, seed=2, temp=2.0)
    zv, yv, zt, yt = z[:2000], y[:2000], z[2000:], y[2000:]
    cal = arcal.Calibrator(method).fit(yv, logits=zv)
    assert cal.fitted and cal.classes == 4 and cal.method == method
    p = cal.predict_proba(logits=zt)
    assert p.shape == (2000, 4) and p.dtype == np.float64
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert ece(p, yt) < 0.5 * ece(softmax(zt), yt)
    d = cal.to_dict()
    assert d["schema"] == "arcal.calibrator/1" and d["method"] == method and d["n_calibration"] == 2000
    again = arcal.Calibrator.from_dict(json.loads(json.dumps(d)))
    assert again.to_dict() == d
    assert np.array_equal(again.predict_proba(logits=zt), p)  # bit for bit
    assert np.array_equal(pickle.loads(pickle.dumps(cal)).predict_proba(logits=zt), p)


@pytest.mark.parametrize("method", ["temperature", "isotonic", "vector"])
def test_probs_input_is_log_probs_as_logits(method):
    z, y = make_predictions(2000, 5, seed=3)
    p = softmax(z)
    a = arcal.Calibrator(method).fit(y, probs=p).predict_proba(probs=p)
    b = arcal.Calibrator(method).fit(y, logits=np.log(p)).predict_proba(logits=np.log(p))
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_same_json_and_outputs_as_cli_fit_apply(cli, tmp_path, method):
    z, y = make_predictions(3000, 4, seed=4, temp=1.8)
    val, test = tmp_path / "val.npz", tmp_path / "test.npz"
    np.savez(val, logits=z[:1500], labels=y[:1500])
    ids = np.arange(1500, 3000, dtype=np.int64)
    np.savez(test, logits=z[1500:], labels=y[1500:], ids=ids)
    out, saved = tmp_path / "g.npz", tmp_path / "p.json"
    r = cli("calibrate", "--fit", val, "--apply", test, "--method", method, "--out", out, "--save", saved)
    assert r.code == 0, r.err
    cal = arcal.Calibrator(method).fit(y[:1500], logits=z[:1500])
    assert json.loads(saved.read_text()) == cal.to_dict()
    g = np.load(out)
    assert np.array_equal(g["probs"], cal.predict_proba(logits=z[1500:]))
    # ... and a calibrator saved by the CLI applies identically in Python.
    assert np.array_equal(arcal.Calibrator.from_dict(json.loads(saved.read_text())).predict_proba(logits=z[1500:]),
                          g["probs"])


def test_options_reach_the_method():
    z, y = make_predictions(2000, 4, seed=5)
    assert len(arcal.Calibrator("histogram", bins=7).fit(y, logits=z).to_dict()["value"]) == 7
    assert len(arcal.Calibrator("qats", knots=3).fit(y, logits=z).to_dict()["temperature_knots"]) == 3
    assert arcal.Calibrator("matrix", l2=0.1).fit(y, logits=z).to_dict()["l2"] == 0.1
    assert arcal.Calibrator("histogram", bins=7).options["bins"] == 7


def test_errors():
    z, y = make_predictions(200, 4, seed=6)
    with pytest.raises(ValueError, match="unknown method 'tempreature'"):
        arcal.Calibrator("tempreature")
    with pytest.raises(ValueError, match="unknown option 'bin'"):
        arcal.Calibrator("histogram", bin=10)
    with pytest.raises(ValueError, match="not fitted"):
        arcal.Calibrator("platt").predict_proba(logits=z)
    cal = arcal.Calibrator("temperature").fit(y, logits=z)
    with pytest.raises(ValueError, match="fitted on K = 4 classes, but the predictions have K = 3"):
        cal.predict_proba(logits=z[:, :3])
    with pytest.raises(ValueError, match=r"labels\[0\] is 9, but must be in \[0, 3\]"):
        arcal.Calibrator("temperature").fit(np.full(200, 9), logits=z)
    with pytest.raises(ValueError, match="key 'beta' is missing"):
        arcal.Calibrator.from_dict({"schema": "arcal.calibrator/1", "method": "temperature", "classes": 4,
                                    "n_calibration": 10})
    with pytest.raises(ValueError, match="schema"):
        arcal.Calibrator.from_dict({"schema": "other", "method": "temperature"})
    with pytest.raises(ValueError, match="give exactly one of logits= and probs="):
        cal.predict_proba()


def test_report_before_and_after_from_python(tmp_path):
    # Issue 56: a before/after report from Python (it took the CLI's calibrate --json before): the
    # plug-in ECE headlined before and after, the fitted temperature shown, the metrics those of
    # arcal.metrics on the same arrays.
    import csv
    z, y = make_predictions(3000, 4, seed=7, temp=1.8)
    cal = arcal.Calibrator("temperature").fit(y[:1500], logits=z[:1500])
    rep = cal.report(y[1500:], logits=z[1500:], out=tmp_path / "cal_report", bootstrap=100)
    before = arcal.metrics(y[1500:], logits=z[1500:], bootstrap=100)
    after = arcal.metrics(y[1500:], probs=cal.predict_proba(logits=z[1500:]), bootstrap=100)
    assert "%.4f → %.4f (plug-in" % (before["ece"], after["ece"]) in rep["verdict"]
    html = open(rep["html"]).read()
    assert "temperature = %.6g" % cal.to_dict()["temperature"] in html
    rows = {r["metric"]: r for r in csv.DictReader(open(tmp_path / "cal_report" / "tables" / "calibration.csv"))}
    assert rows["NLL"]["before"] == "%.4f" % before["nll"] and rows["NLL"]["after"] == "%.4f" % after["nll"]
