"""Hostile use of the Python module (issue 24): size-like options bounded as in the CLI, Ctrl-C stopping
long calls within about a second, a Calibrator shared by threads, from_dict validating every key, and a
trace whose meta nests too deep. Each test fails on the code before the fix (a crash, a hang, or a value
that is not a probability accepted)."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import arcal
from conftest import make_predictions


def test_size_like_options_are_bounded():
    # bins = 10**9 grew until the kernel killed the process; knots = 10**6 ran for minutes.
    with pytest.raises(ValueError, match=r"option 'bins' is 1000000000, but must be in \[1, 100000\]"):
        arcal.Calibrator("histogram", bins=10**9)
    with pytest.raises(ValueError, match=r"option 'knots' is 1000000, but must be in \[2, 256\]"):
        arcal.Calibrator("qats", knots=10**6)
    z, y = make_predictions(50, 3, seed=1)
    with pytest.raises(ValueError, match=r"bootstrap is 2000000, but must be in \[0, 1000000\]"):
        arcal.metrics(y, logits=z, bootstrap=2_000_000)
    with pytest.raises(ValueError, match=r"bins is 0, but must be in \[1, 100000\]"):
        arcal.metrics(y, logits=z, bins=0)


def interrupted_after(delay, call):
    """Seconds from a SIGINT sent `delay` s after `call` started until it raised KeyboardInterrupt."""
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        timer.cancel()
    return time.monotonic() - t0 - delay


def test_ctrl_c_stops_a_long_bootstrap():
    # 100,000 draws at N = 200k take minutes; Ctrl-C used to wait for all of them.
    z, y = make_predictions(200_000, 4, seed=2)
    late = interrupted_after(1.0, lambda: arcal.metrics(y, logits=z, bootstrap=100_000))
    assert late < 2.0, "KeyboardInterrupt came %.1f s after the signal" % late


def test_ctrl_c_stops_a_long_qats_fit():
    z, y = make_predictions(200_000, 10, seed=3)
    late = interrupted_after(1.0, lambda: arcal.Calibrator("qats", knots=256).fit(y, logits=z))
    assert late < 2.0, "KeyboardInterrupt came %.1f s after the signal" % late
    # The module still works after an interrupted call.
    assert arcal.metrics(y[:100], logits=z[:100], ci=False)["n"] == 100


def test_calibrator_shared_by_threads():
    # One thread refitting while two others predict on the same object segfaulted (2 of 3 runs) or
    # returned rows that were not probabilities.
    fits = [make_predictions(20_000, 5, seed=s) for s in (4, 5)]
    z_test, _ = make_predictions(20_000, 5, seed=6)
    cal = arcal.Calibrator("vector").fit(fits[0][1], logits=fits[0][0])
    stop = time.monotonic() + 3.0
    errors = []

    def refit():
        i = 0
        while time.monotonic() < stop:
            z, y = fits[i % 2]
            cal.fit(y, logits=z)
            i += 1

    def predict():
        while time.monotonic() < stop:
            p = cal.predict_proba(logits=z_test)
            if not (np.all(np.isfinite(p)) and p.min() >= 0 and p.max() <= 1 and
                    np.allclose(p.sum(axis=1), 1, atol=1e-9)):
                errors.append("rows that are not probabilities")
                return

    threads = [threading.Thread(target=refit)] + [threading.Thread(target=predict) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def fitted_dict(method, **options):
    z, y = make_predictions(400, 4, seed=7)
    return arcal.Calibrator(method, **options).fit(y, logits=z).to_dict()


@pytest.mark.parametrize("method,key,value,message", [
    # an edited temperature used to be ignored (the stored beta won)
    ("temperature", "temperature", 7.0, r"key 'temperature' is 7, but key 'beta' is .* temperature must be 1/beta"),
    ("temperature", "beta", -1.0, r"key 'beta' is -1, but must be > 0"),
    ("isotonic", "y", "above", r"key 'y'\[0\] is 7, but must be finite and in \[0, 1\]"),
    ("histogram", "value", "above", r"key 'value'\[0\] is 7, but must be finite and in \[0, 1\]"),
    ("vector", "w", "nan", r"key 'w'\[0\] is nan, but must be finite"),
    ("matrix", "b", "nan", r"key 'b'\[0\] is nan, but must be finite"),
    ("nw", "correct", "above", r"key 'correct'\[0\] is 7, but must be finite and in \[0, 1\]"),
    ("qats", "calibration_confidence", "above", r"key 'calibration_confidence'\[0\] is 7, but must be finite and in \[0, 1\]"),
    ("histogram", "bins", 10**9, r"key 'bins' is 1000000000, but must be in \[1, 100000\]"),
    ("platt", "converged", "yes", r"key 'converged' is \"yes\", but must be true or false"),
    ("vector", "l2", -1.0, r"key 'l2' is -1, but must be >= 0"),
])
def test_from_dict_validates_every_field(method, key, value, message):
    d = fitted_dict(method)
    if value == "above":
        d[key] = [7.0] + list(d[key][1:])
    elif value == "nan":
        d[key] = [float("nan")] + list(d[key][1:])
    else:
        d[key] = value
    with pytest.raises(ValueError, match=message):
        arcal.Calibrator.from_dict(d)


def test_from_dict_temperature_alone_or_consistent():
    d = fitted_dict("temperature")
    t = d["temperature"]
    del d["beta"]  # temperature alone is enough
    assert arcal.Calibrator.from_dict(d).to_dict()["temperature"] == pytest.approx(t, rel=1e-15)
    d = fitted_dict("temperature")
    assert arcal.Calibrator.from_dict(d).to_dict() == d  # the round trip still holds


def test_audit_refuses_deeply_nested_meta():
    # 100,000 levels segfaulted arcal.audit (nlohmann's recursive parser); the JSON nesting limit applies.
    z, y = make_predictions(200, 3, seed=8)
    meta = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match=r"meta: line 1: arrays and objects nested more than 64 deep"):
        arcal.audit([{"logits": z, "labels": y, "meta": meta}], probes=False, permutations=10)


def test_ctrl_c_stops_a_long_audit():
    # arcal.audit ignored SIGINT (a 3-run audit was killed 120 s later): every stage polls, and the
    # probes' and the diagnostic's worker threads stop with the calling thread.
    from conftest import simulated_trace
    runs = [simulated_trace(6000, 4, seed=s) for s in (11, 12, 13)]
    late = interrupted_after(2.0, lambda: arcal.audit(runs, permutations=2000, probe_restarts=3,
                                                      sensitivity=True, threads=2))
    assert late < 2.0, "KeyboardInterrupt came %.1f s after the signal" % late
    # The module still works after an interrupted audit (no stop latched).
    r = arcal.audit([simulated_trace(300, 3, seed=14)], permutations=50, probes=False, condcal=False)
    assert r["diagnostic"]["tests"]


# ---- Issue 55 (faults, round 3): threads own what they read, and each call owns its interrupt.

def test_metrics_reads_a_private_copy_while_another_thread_writes_the_labels():
    # arcal.metrics read the caller's arrays in place after releasing the GIL; a thread writing
    # out-of-range labels meanwhile killed the interpreter (SIGSEGV). Run in a child process so that
    # a crash is a failed test, not a dead test runner.
    import subprocess
    import sys
    script = """
import threading, numpy as np, arcal
rng = np.random.default_rng(0)
n, k = 20000, 10
p = rng.dirichlet(np.ones(k), n)
y = rng.integers(0, k, n)
stop = False
def writer():
    while not stop:
        y[:] = 10**9
        y[:] = rng.integers(0, k, n)
t = threading.Thread(target=writer)
t.start()
ok = bad = 0
try:
    for _ in range(150):
        try:
            arcal.metrics(y, probs=p, ci=False)
            ok += 1
        except ValueError:
            bad += 1
finally:
    stop = True
    t.join()
print(ok, bad)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, "the interpreter died (%d): %s" % (r.returncode, r.stderr[-2000:])
    ok, bad = map(int, r.stdout.split())
    assert ok + bad == 150


def test_ctrl_c_in_one_thread_leaves_another_threads_audit_alone():
    # One process-wide stop latch: Ctrl-C in the main thread's arcal.audit stopped the workers of a
    # concurrent arcal.audit in another thread too; and one BLAS thread count, restored by whichever
    # audit ended first. Now the other audit completes, with bitwise the result it has alone.
    from conftest import simulated_trace
    other = [simulated_trace(3000, 4, seed=s) for s in (21, 22)]
    kwargs = dict(permutations=400, probe_restarts=1, threads=2)  # about 5 s alone: still running at the signal
    alone = arcal.audit(other, **kwargs)
    box = {}

    def run_other():
        try:
            box["result"] = arcal.audit(other, **kwargs)
        except BaseException as e:  # noqa: BLE001 - the test reports whatever stopped it
            box["error"] = repr(e)

    t = threading.Thread(target=run_other)
    t.start()
    runs = [simulated_trace(6000, 4, seed=s) for s in (11, 12, 13)]
    late = interrupted_after(1.0, lambda: arcal.audit(runs, permutations=2000, probe_restarts=3, sensitivity=True, threads=2))
    t.join()
    assert late < 2.0
    assert "error" not in box, "the other thread's audit was stopped: %s" % box.get("error")
    def numbers(r):
        return ([(x["statistic"], x["p"], x["gap"]) for x in r["diagnostic"]["tests"]],
                [(x["comparison"], x["metric"], x["gains"], x["p"]) for x in r["probes"]["tests"]])
    assert numbers(box["result"]) == numbers(alone)


def test_calibrator_refuses_one_example_and_warns_below_fifty():
    # A calibrator fitted on one example was accepted without a word (isotonic then maps everything
    # to 0 or 1). Two are needed; fewer than 50 warn; one outcome only warns for the binary methods.
    import warnings
    z, y = make_predictions(200, 4, seed=31)
    with pytest.raises(ValueError, match=r"the fitting data has N = 1 example; a calibrator needs at least 2"):
        arcal.Calibrator("isotonic").fit(y[:1], logits=z[:1])
    with pytest.warns(RuntimeWarning, match=r"fitted on only 20 examples \(fewer than 50\)"):
        arcal.Calibrator("temperature").fit(y[:20], logits=z[:20])
    right = z.argmax(axis=1) == y
    with pytest.warns(RuntimeWarning, match=r"every fitting example's top label is correct, so isotonic maps every confidence to 1"):
        arcal.Calibrator("isotonic").fit(y[right][:60], logits=z[right][:60])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arcal.Calibrator("isotonic").fit(y, logits=z)  # 200 examples of both outcomes: silent
