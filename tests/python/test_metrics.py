"""arcal.metrics: the same dict as `arcal metrics --json` on the same data, against NumPy's
computation of the same definitions (bench/reference/metrics_numpy.py), input dtypes, errors, and the
GIL released while it computes."""
import threading
import time

import numpy as np
import pytest

import arcal
import metrics_numpy
from conftest import make_predictions, softmax

KEYS = ["accuracy", "ece", "mce", "rmsce", "ada_ece", "classwise_ece", "debiased_ece", "smece", "smece_sigma", "nll",
        "brier", "auroc"]


def test_same_dict_as_cli_json(cli, tmp_path):
    z, y = make_predictions(3000, 5, seed=4)
    f = tmp_path / "t.npz"
    np.savez(f, logits=z, labels=y)
    want = cli("metrics", f, "--json", "--bootstrap", 50, "--seed", 3).json()
    got = arcal.metrics(y, logits=z, bootstrap=50, seed=3, smooth=True)  # the CLI's JSON has the smooth diagram
    want.pop("file")
    # Exact equality: both run the same library code on the same float32 logits (softmax in double),
    # and the module's dict is the library's JSON; a drift in keys or values is a bug.
    assert got == want


def test_probs_input_matches_cli_on_probs_file(cli, tmp_path):
    z, y = make_predictions(2000, 4, seed=5)
    p = softmax(z)
    f = tmp_path / "p.npz"
    np.savez(f, probs=p, labels=y)
    want = cli("metrics", f, "--json", "--bootstrap", 20).json()
    want.pop("file")
    assert arcal.metrics(y, probs=p, bootstrap=20, smooth=True) == want


def test_values_match_numpy_reference():
    z, y = make_predictions(5000, 7, seed=6)
    p = softmax(z)
    ref = metrics_numpy.metrics(p, y, 15)
    got = arcal.metrics(y, probs=p, ci=False)
    for k in KEYS:
        # 1e-9 relative: the same double arithmetic up to summation order.
        assert got[k] == pytest.approx(ref[k], rel=1e-9, abs=1e-12), k
    assert got["ci"]["ece"] is None  # ci=False: no intervals


def test_ece_by_hand_numpy():
    # An independent few-line ECE: 15 equal-width bins of the top-label confidence.
    z, y = make_predictions(4000, 3, seed=7)
    p = softmax(z)
    c, a = p.max(axis=1), (p.argmax(axis=1) == y).astype(float)
    b = np.minimum((c * 15).astype(int), 14)
    ece = sum(abs(a[b == i].mean() - c[b == i].mean()) * (b == i).mean() for i in range(15) if (b == i).any())
    assert arcal.metrics(y, probs=p, ci=False)["ece"] == pytest.approx(ece, rel=1e-9)


@pytest.mark.parametrize("label_dtype", [np.int64, np.int32, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("logit_dtype", [np.float64, np.float32, np.float16])
def test_interop_dtypes(label_dtype, logit_dtype):
    z, y = make_predictions(500, 6, seed=8, dtype=logit_dtype)
    got = arcal.metrics(y.astype(label_dtype), logits=z, ci=False)
    want = arcal.metrics(y, logits=z.astype(np.float64), ci=False)
    assert got == want  # every dtype is widened exactly to what float64 / int64 holds


def test_bfloat16_stored_as_float32_and_torch_tensors():
    torch = pytest.importorskip("torch")
    z, y = make_predictions(400, 5, seed=9)
    zb = torch.from_numpy(z).to(torch.bfloat16).float()  # bfloat16 values held in float32
    got = arcal.metrics(torch.from_numpy(y), logits=zb, ci=False)  # tensors go through np.asarray
    want = arcal.metrics(y, logits=zb.numpy().astype(np.float64), ci=False)
    assert got == want


def test_non_contiguous_and_big_endian_inputs():
    z, y = make_predictions(300, 4, seed=10, dtype=np.float64)
    p = softmax(z)
    want = arcal.metrics(y, probs=p, ci=False)
    assert arcal.metrics(y, probs=np.asfortranarray(p), ci=False) == want
    assert arcal.metrics(y.astype(">i8"), probs=p.astype(">f8"), ci=False) == want
    wide = np.zeros((300, 8))
    wide[:, ::2] = p
    assert arcal.metrics(y, probs=wide[:, ::2], ci=False) == want


@pytest.mark.parametrize("mutate, message", [
    (lambda y, p: (np.where(np.arange(len(y)) == 5, 4, y), p), "labels[5] is 4, but must be in [0, 3]"),
    (lambda y, p: (y, np.where(np.arange(p.size).reshape(p.shape) == 13, np.nan, p)), "probs[13] is nan"),
    (lambda y, p: (y, p * 0.9), "probs row 0 sums to 0.9"),
    (lambda y, p: (y[:-1], p), "labels has 199 entries, but probs has N = 200 rows"),
    (lambda y, p: (y.astype(float), p), "labels has dtype float64, but must be an integer type"),
    (lambda y, p: (y, p[:, :, None]), "probs has shape (200, 4, 1), but must be [N, K]"),  # [N]: binary (test_own_model)
    (lambda y, p: (y, p.astype(int)), "probs has dtype int64, but must be a float type"),
])
def test_bad_input_raises_value_error_naming_array_and_index(mutate, message):
    z, y = make_predictions(200, 4, seed=11)
    yy, pp = mutate(y, softmax(z))
    with pytest.raises(ValueError) as e:
        arcal.metrics(yy, probs=pp)
    assert message in str(e.value)


def test_nan_logit_message_names_the_index():
    z, y = make_predictions(20, 4, seed=1)
    z[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"logits\[3, 1\] is nan, but must be finite"):
        arcal.metrics(y, logits=z)


def test_exactly_one_of_logits_and_probs():
    z, y = make_predictions(20, 4, seed=1)
    with pytest.raises(ValueError, match="exactly one of logits= and probs="):
        arcal.metrics(y, logits=z, probs=softmax(z))
    with pytest.raises(ValueError, match="exactly one"):
        arcal.metrics(y)


def test_help_is_useful():
    doc = arcal.metrics.__doc__
    for word in ["labels", "logits", "probs", "bins", "ci", "seed", "ValueError", "arcal metrics --json", "ece"]:
        assert word in doc
    assert "kw_only" not in doc and "metrics(labels" in doc


def test_gil_is_released_during_the_computation():
    z, y = make_predictions(200000, 20, seed=12)
    p = softmax(z)
    done = []
    worker = threading.Thread(target=lambda: done.append(arcal.metrics(y, probs=p, bootstrap=200)))
    ticks = [time.perf_counter()]
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    elapsed = ticks[-1] - ticks[0]
    assert done and elapsed > 0.3, "the computation was too short to tell"
    # The main thread kept running: no gap near the computation's length. (With the GIL held the
    # whole time, one gap would be the whole computation.)
    assert max(np.diff(ticks)) < 0.5 * elapsed


def test_cluster_bootstrap_counts_copies_once():
    """Each of 200 predictions repeated 10 times in one cluster: the cluster interval is the interval of
    the 200 distinct predictions, about sqrt(10) times the naive interval over the 2,000 rows."""
    rng = np.random.default_rng(4)
    c = rng.uniform(0.55, 0.95, 200)
    y = (rng.uniform(size=200) >= c).astype(np.int64)  # class 0 predicted, correct with probability c
    probs = np.stack([c, 1 - c], 1)
    base = arcal.metrics(y, probs, bootstrap=2000)
    rep_p, rep_y, cl = np.repeat(probs, 10, 0), np.repeat(y, 10), np.repeat(np.arange(200), 10)
    naive = arcal.metrics(rep_y, rep_p, bootstrap=2000)
    clustered = arcal.metrics(rep_y, rep_p, bootstrap=2000, cluster=cl)
    width = lambda m: m["ci"]["accuracy"][1] - m["ci"]["accuracy"][0]
    assert clustered["clusters"] == 200 and "clusters" not in naive
    assert abs(width(clustered) / width(base) - 1) < 0.15
    assert abs(width(clustered) / width(naive) - np.sqrt(10)) < 0.6
    assert clustered["consistency"]["p_top_label"] is None
    with pytest.raises(ValueError, match="cluster has dtype"):
        arcal.metrics(rep_y, rep_p, cluster=cl.astype(float))
    with pytest.raises(ValueError, match="cluster has 5 entries"):
        arcal.metrics(rep_y, rep_p, cluster=cl[:5])
