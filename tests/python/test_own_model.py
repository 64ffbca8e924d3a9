"""Your own model (issue 25): a small torch.nn vision transformer with nn.MultiheadAttention and a
top-2-of-4 MoE router, and a plain classifier, built and trained here on synthetic images, traced with
arcal.torch_hooks.record_routing and audited, measured and plotted from Python. Each test fails on the
code before the issue: the recorder's false "ran twice", bf16 rows refused at exit, silent layouts,
letter-by-letter routing names, the entropy of the token-mean gate, depth variance over experts, a plain
classifier with no way to a reliability diagram, tensors and binary predictions refused by metrics."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import arcal  # noqa: E402
from arcal.torch_hooks import record_routing  # noqa: E402


class Router(nn.Module):
    """Top-2-of-4 router: returns (probabilities renormalised over the two chosen experts, logits)."""

    def __init__(self, d, experts=4, k=2):
        super().__init__()
        self.proj = nn.Linear(d, experts)
        self.k = k

    def forward(self, h):
        logits = self.proj(h)
        top = logits.topk(self.k, dim=-1)
        gates = torch.zeros_like(logits).scatter(-1, top.indices, torch.softmax(top.values, dim=-1))
        return gates, logits


class MoEViT(nn.Module):
    """Images [B, 1, 12, 12] -> 9 patch tokens of 16 pixels -> attention -> MoE MLP -> logits [B, K]."""

    def __init__(self, d=16, classes=4, experts=4, seq_first_router=False):
        super().__init__()
        self.embed = nn.Linear(16, d)
        self.pos = nn.Parameter(torch.zeros(1, 9, d))
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.router = Router(d, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                     for _ in range(experts))
        self.head = nn.Linear(d, classes)
        self.seq_first_router = seq_first_router

    def tokens(self, x):
        b = x.shape[0]
        p = x.reshape(b, 1, 3, 4, 3, 4).permute(0, 2, 4, 1, 3, 5).reshape(b, 9, 16)
        return self.embed(p) + self.pos

    def forward(self, x):
        h = self.tokens(x)
        h = h + self.attn(h, h, h, need_weights=False)[0]
        if self.seq_first_router:  # a router written for [T, B, d] inputs
            gates, _ = self.router(h.transpose(0, 1))
            gates = gates.transpose(0, 1)
        else:
            gates, _ = self.router(h)
        h = h + sum(gates[..., e:e + 1] * self.experts[e](h) for e in range(len(self.experts)))
        return self.head(h.mean(dim=1))


def synthetic_images(n, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 1, 12, 12, generator=g) * 0.8
    for c in range(classes):  # a class-specific bright quadrant
        r, q = divmod(c, 2)
        x[y == c, 0, r * 6:(r + 1) * 6, q * 6:(q + 1) * 6] += 1.0
    return x, y


def train(model, epochs, seed):
    """Adam on 1,200 synthetic images (batches of 100); returns the model in eval mode."""
    x, y = synthetic_images(1200, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(epochs):
        for i in range(0, 1200, 100):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[i:i + 100]), y[i:i + 100]).backward()
            opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    model = train(MoEViT(), epochs=3, seed=1)
    xt, yt = synthetic_images(600, seed=2)
    return model, xt, yt


@pytest.fixture(scope="module")
def plain():
    """A plain classifier (no routing): an MLP on the same synthetic images, its test logits and labels."""
    torch.manual_seed(1)
    clf = train(nn.Sequential(nn.Flatten(), nn.Linear(144, 32), nn.ReLU(), nn.Linear(32, 4)), epochs=5, seed=3)
    xt, yt = synthetic_images(600, seed=4)
    return clf(xt), yt  # logits that still require grad: arcal takes them as they are


def record(model, x, y, **kw):
    with torch.no_grad(), record_routing(model, **kw) as rec:
        for i in range(0, x.shape[0], 128):
            model(x[i:i + 128])
            rec.add_labels(y[i:i + 128])
    return rec.arrays()


def test_one_module_two_tensors(trained):
    # The router's probabilities as routing and its logits as a feature used to fail with a false
    # "module 'router' ran twice in one forward".
    model, x, y = trained
    t = record(model, x, y, routing=("router", lambda o: o[0]),
               features={"router_logit": ("router", lambda o: o[1])})
    assert t["routing"].shape == (600, 1, 4) and list(t["feature_names"]) == ["router_logit_%d" % e for e in range(4)]
    with torch.no_grad():
        gates, logits = model.router(model.tokens(x) + model.attn(model.tokens(x), model.tokens(x), model.tokens(x),
                                                                     need_weights=False)[0])
    np.testing.assert_allclose(t["routing"][:, 0, :], gates.mean(dim=1).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t["features"], logits.mean(dim=1).numpy(), rtol=1e-5, atol=1e-5)


def test_routing_given_as_one_string(trained):
    # routing="router.proj" used to be iterated letter by letter ("the model has no module 'r'").
    model, x, y = trained
    t = record(model, x[:100], y[:100], routing="router.proj", softmax=True)
    assert t["routing"].shape == (100, 1, 4)


def test_per_token_entropy_not_the_entropy_of_the_mean(trained):
    # shared/method.md §3: entropy per token, then averaged. The recorder used to store only the
    # token-mean gate, whose entropy is larger (0.936 vs 0.662 on the model).
    model, x, y = trained
    t = record(model, x, y, routing=("router", lambda o: o[0]))
    with torch.no_grad():
        h = model.tokens(x)
        h = h + model.attn(h, h, h, need_weights=False)[0]
        g = model.router(h)[0].double()
    per_token = -(g * torch.log(g.clamp_min(1e-30))).sum(-1).mean(1).numpy()
    np.testing.assert_allclose(t["routing_entropy"][:, 0], per_token, rtol=1e-4, atol=1e-5)
    gm = g.mean(1)
    of_mean = -(gm * torch.log(gm.clamp_min(1e-30))).sum(-1).numpy()
    assert np.mean(of_mean) > np.mean(per_token) + 0.05  # the quantity it used to store instead
    assert str(t["routing_kind"]) == "unordered" and "routing_depth_var" not in t


def test_depth_kind_stores_depth_moments(trained):
    model, x, y = trained
    t = record(model, x[:64], y[:64], routing=("router", lambda o: o[0]), routing_kind="depth")
    assert str(t["routing_kind"]) == "depth"
    assert t["routing_depth_mean"].shape == (64, 1) and t["routing_depth_var"].shape == (64, 1)
    with pytest.raises(ValueError, match="routing_kind is 'experts'"):
        record_routing(model, routing="router.proj", routing_kind="experts").__enter__()


def test_bf16_model_is_recorded(trained, tmp_path):
    # A bf16 model's gate rows sum to 0.9994-1.0007 and write_trace refused them at exit, losing the
    # recording. Accumulated in float32 and renormalised within the bf16 tolerance.
    model, x, y = trained
    m16 = MoEViT()
    m16.load_state_dict(model.state_dict())
    m16 = m16.to(torch.bfloat16).eval()
    path = tmp_path / "bf16.npz"
    with torch.no_grad(), record_routing(m16, path, routing=("router", lambda o: o[0])) as rec:
        for i in range(0, 600, 128):
            m16(x[i:i + 128].to(torch.bfloat16))
            rec.add_labels(y[i:i + 128])
    tr = arcal.read_trace(str(path))
    np.testing.assert_allclose(tr["routing"][:, 0, :4].sum(axis=1), 1.0, atol=1e-5)
    assert json.loads(str(tr["meta"]))["routing_rows_renormalised_max_deviation"] > 0


def test_layouts(trained):
    model, x, y = trained
    # flattened [B*T, E]: refused in auto (example- or token-major cannot be told), with the fix
    flat = ("router", lambda o: o[0].reshape(-1, 4))
    with pytest.raises(ValueError, match=r"tokens flattened into the first axis.*layout="):
        record(model, x[:64], y[:64], routing=flat)
    t = record(model, x[:64], y[:64], routing=flat, layout="flat")
    ref = record(model, x[:64], y[:64], routing=("router", lambda o: o[0]))
    np.testing.assert_allclose(t["routing"], ref["routing"], rtol=1e-6)
    np.testing.assert_allclose(t["routing_entropy"], ref["routing_entropy"], rtol=1e-6)
    # sequence-first [T, B, E] with T = 9 != B: unambiguous, taken as such
    seq = ("router", lambda o: o[0].transpose(0, 1))
    np.testing.assert_allclose(record(model, x[:64], y[:64], routing=seq)["routing"], ref["routing"], rtol=1e-6)
    # with B = T = 9 both readings fit: refused in auto, right with layout="seq_first"
    with pytest.raises(ValueError, match="both of its first two axes equal the batch size 9"):
        record(model, x[:9], y[:9], routing=seq)
    t9 = record(model, x[:9], y[:9], routing=seq, layout={"router": "seq_first"})
    ref9 = record(model, x[:9], y[:9], routing=("router", lambda o: o[0]), layout="batch_first")
    np.testing.assert_allclose(t9["routing"], ref9["routing"], rtol=1e-6)


def test_traced_and_compiled_models(trained):
    model, x, y = trained
    traced = torch.jit.trace(model, x[:4], check_trace=False)
    with pytest.raises(ValueError, match="TorchScript module .* record the eager torch.nn.Module"):
        record_routing(traced, routing="router").__enter__()

    class Compiled(nn.Module):  # what torch.compile returns: the eager model under `_orig_mod`
        def __init__(self, m):
            super().__init__()
            self._orig_mod = m

        def forward(self, inp):
            return self._orig_mod(inp)

    t = record(Compiled(model), x[:32], y[:32], routing=("router", lambda o: o[0]))
    ref = record(model, x[:32], y[:32], routing=("router", lambda o: o[0]))
    np.testing.assert_allclose(t["routing"], ref["routing"])


def test_audit_offers_only_what_applies(trained):
    model, x, y = trained
    t = record(model, x, y, routing=("router", lambda o: o[0]))
    r = arcal.audit([t], permutations=200, probes=False, condcal=False)
    assert {d["statistic"] for d in r["diagnostic"]["tests"]} == {"re"}  # no depth variance over experts
    with pytest.raises(ValueError, match="routing_kind is 'unordered'"):
        arcal.audit([t], stats="re,rdv", permutations=50, probes=False, condcal=False)


def test_plain_classifier_metrics_and_reliability_diagram(plain):
    # A plain classifier (logits and labels only): the audit says where its calibration is, and the
    # reliability diagram's data comes back (drawn when matplotlib is installed).
    logits, y = plain
    with pytest.raises(ValueError, match=r"logits and labels only .*reliability_diagram"):
        arcal.audit([{"logits": logits.detach().numpy(), "labels": y.numpy()}], permutations=50)
    m = arcal.metrics(y, logits=logits)  # torch tensors accepted
    d = arcal.reliability_diagram(y, logits=logits)
    assert d["ece"] == pytest.approx(m["ece"])
    assert int(d["n"].sum()) == 600
    ok = d["n"] > 0
    rel = [r for r in m["reliability"]]
    assert list(d["n"]) == [r["n"] for r in rel]
    # the band: Binomial(n, c) / n quantiles, against scipy's (the smallest k whose cdf reaches q)
    stats = pytest.importorskip("scipy.stats")
    for k in np.flatnonzero(ok):
        lo, hi = stats.binom.ppf([0.025, 0.975], d["n"][k], d["confidence"][k]) / d["n"][k]
        assert d["band_low"][k] == pytest.approx(lo, abs=1e-12) and d["band_high"][k] == pytest.approx(hi, abs=1e-12)
    try:
        import matplotlib  # noqa: F401
        assert d["plotted"]
    except ImportError:
        assert not d["plotted"] and "matplotlib" in d["why_not"]


def test_plain_classifier_gets_a_report(cli, plain, tmp_path):
    # `arcal report` used to read audit results only, so a classifier without routing had no report.
    # Now the JSON of `arcal metrics --json` / `arcal calibrate --json` (or arcal.metrics' dict) renders
    # into one: every metric with its interval and the reliability diagram with its band.
    import csv
    import json

    logits, y = plain
    m = arcal.metrics(y, logits=logits, bootstrap=200)
    rep = arcal.report(m, out=tmp_path / "rep")
    assert rep["html"].endswith("report.html") and len(rep["figures"]) == 2
    assert ("rejected" if m["consistency"]["p_top_label"] < 0.05 else "not rejected") in rep["verdict"]
    html = open(rep["html"]).read()
    assert "data:image/svg+xml;base64," in html and "Reliability diagram" in html
    rows = {r["metric"]: r for r in csv.DictReader(open(tmp_path / "rep" / "tables" / "metrics.csv"))}
    ece = m["bias_corrected"]["ece"]
    assert rows["ECE"]["bias-corrected"] == f"{ece:.4f}" and rows["ECE"]["value (plug-in)"] == f"{m['ece']:.4f}"
    assert rows["ECE"]["95 % CI"] == "[{:.4f}, {:.4f}]".format(*m["ci"]["ece"])
    assert rows["NLL"]["value (plug-in)"] == f"{m['nll']:.4f}" and rows["NLL"]["bias-corrected"] == "-"
    # the band of the report's bins table (C++) against the Python band (tested against scipy above)
    d = arcal.reliability_diagram(y, logits=logits, plot=False)
    bins = list(csv.DictReader(open(tmp_path / "rep" / "tables" / "reliability.csv")))
    assert [int(b["n"]) for b in bins] == [int(v) for v in d["n"] if v > 0]
    for b in bins:
        k = int(b["bin"])
        lo, hi = (float(x) for x in b["calibrated 95 % band"].strip("[]").split(","))
        assert lo == pytest.approx(d["band_low"][k], abs=5e-5) and hi == pytest.approx(d["band_high"][k], abs=5e-5)
    with pytest.raises(ValueError, match="needs out="):
        arcal.report(m)
    # the CLI path: metrics --json and calibrate --json print what arcal report reads
    path = tmp_path / "plain.npz"
    arcal.write_trace(str(path), logits=logits.detach().numpy(), labels=y.numpy())
    r = cli("metrics", path, "--json", "--bootstrap", "100")
    assert r.code == 0, r.err
    (tmp_path / "m.json").write_text(r.out)
    r = cli("report", tmp_path / "m.json")
    assert r.code == 0, r.err
    assert (tmp_path / "m_report" / "report.md").exists() and "ECE-15" in r.out
    r = cli("calibrate", "--fit", path, "--apply", path, "--method", "temperature", "--out", tmp_path / "cal.npz",
            "--json", "--bootstrap", "100")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    (tmp_path / "c.json").write_text(r.out)
    r = cli("report", tmp_path / "c.json", "--out", tmp_path / "crep")
    assert r.code == 0, r.err
    cal = {row["metric"]: row for row in csv.DictReader(open(tmp_path / "crep" / "tables" / "calibration.csv"))}
    assert cal["NLL"]["before"] == f"{doc['before']['nll']:.4f}" and cal["NLL"]["after"] == f"{doc['after']['nll']:.4f}"
    assert "temperature" in r.out and "→" in r.out
    # a document of another kind is refused, naming the three it reads
    (tmp_path / "x.json").write_text(json.dumps({"schema": "arcal.simulate/1"}))
    r = cli("report", tmp_path / "x.json")
    assert r.code == 2 and "arcal.metrics/1" in r.err and "arcal.calibrate/1" in r.err and "arcal.simulate/1" in r.err
    assert not (tmp_path / "x_report").exists()


def test_metrics_accepts_what_researchers_hold():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(2000, 5, generator=g) * 2
    y = torch.randint(0, 5, (2000,), generator=g)
    ref = arcal.metrics(y.numpy(), logits=z.double().numpy(), ci=False)
    # bf16 (no numpy dtype), requires_grad, non-contiguous
    zb = (z.to(torch.bfloat16).float().requires_grad_(True) * 1).to(torch.bfloat16)
    got = arcal.metrics(y, logits=zb, ci=False)
    ref_b = arcal.metrics(y.numpy(), logits=zb.detach().double().numpy(), ci=False)
    assert got["ece"] == ref_b["ece"]
    assert arcal.metrics(y, logits=z.t().contiguous().t(), ci=False)["ece"] == pytest.approx(ref["ece"], abs=1e-12)
    # positional (labels, probs), and a binary problem as one column
    p = torch.softmax(z.double(), dim=1)
    assert arcal.metrics(y, p, ci=False)["ece"] == pytest.approx(ref["ece"], abs=1e-9)
    pb = torch.sigmoid(z[:, 0].double())
    yb = (torch.rand(2000, generator=g, dtype=torch.float64) < pb).long()
    two = torch.stack([1 - pb, pb], dim=1)
    assert arcal.metrics(yb, pb, ci=False)["ece"] == pytest.approx(arcal.metrics(yb, two, ci=False)["ece"], abs=1e-12)
    assert arcal.metrics(yb, logits=z[:, 0], ci=False)["ece"] == pytest.approx(
        arcal.metrics(yb, two, ci=False)["ece"], abs=1e-6)
    # a wrong type names the argument and its type, never the values
    with pytest.raises(TypeError) as e:
        arcal.metrics(y, probs=["a"] * 2000)
    assert "probs must be an array of numbers" in str(e.value) and "'a'" not in str(e.value)
    with pytest.raises(ValueError, match="labels has dtype float32, but must be an integer type"):
        arcal.metrics(torch.rand(2000), probs=p)  # float labels are refused, never rounded


def test_cli_plain_classifier_gets_a_reliability_diagram(cli, plain, tmp_path):
    # `arcal audit` on logits and labels only used to refuse with "unknown statistic 're' (available:
    # none)" and nothing else; now it names the way to the calibration, and `arcal metrics --figures`
    # draws the diagram with the same bins and band as the Python call.
    logits, y = plain
    path = tmp_path / "plain.npz"
    arcal.write_trace(str(path), logits=logits.detach().numpy(), labels=y.numpy())
    r = cli("audit", path, "--out", tmp_path / "aud", "--permutations", "50")
    assert r.code == 2 and "logits and labels only" in r.err and "--figures" in r.err
    assert not (tmp_path / "aud").exists()
    r = cli("metrics", path, "--bootstrap", "0", "--figures", tmp_path / "fig")
    assert r.code == 0, r.err
    assert (tmp_path / "fig" / "reliability.svg").stat().st_size > 1000
    rows = [list(map(float, line.split())) for line in open(tmp_path / "fig" / "reliability.dat")
            if line.strip() and not line.startswith("#")]
    d = arcal.reliability_diagram(y, logits=logits, plot=False)
    ok = d["n"] > 0
    got = np.array([row[:5] for row in rows])
    np.testing.assert_allclose(got[:, 0], d["confidence"][ok], rtol=1e-5)
    np.testing.assert_allclose(got[:, 1], d["accuracy"][ok], rtol=1e-5)
    np.testing.assert_array_equal(got[:, 2], d["n"][ok])
    np.testing.assert_allclose(got[:, 3], d["band_low"][ok], atol=1e-5)
    np.testing.assert_allclose(got[:, 4], d["band_high"][ok], atol=1e-5)
    # a directory of the user's is not written into
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    r = cli("metrics", path, "--bootstrap", "0", "--figures", tmp_path / "mine")
    assert r.code == 2 and "thesis.tex" in r.err
    # before/after calibration: two panels, the second on the calibrated probabilities
    r = cli("calibrate", path, "--method", "platt", "--out", tmp_path / "cal.npz", "--figures", tmp_path / "calfig")
    assert r.code == 0, r.err
    blocks = [b for b in open(tmp_path / "calfig" / "reliability.dat").read().split("\n\n\n") if b.strip()]
    assert len(blocks) == 2 and "before" in blocks[0] and "after platt" in blocks[1]


@pytest.mark.parametrize("method", ["platt", "isotonic", "histogram", "nw"])
def test_confidence_only_calibrators_keep_the_prediction(trained, method):
    # shared/method.md §5: argmax is never changed. Platt, isotonic and histogram changed the predicted
    # class of 2-3 % of examples (accuracy moved).
    model, x, y = trained
    with torch.no_grad():
        z = model(x).double().numpy()
    cal = arcal.Calibrator(method).fit(y.numpy()[:300], logits=z[:300])
    p = cal.predict_proba(logits=z[300:])
    assert np.array_equal(p.argmax(axis=1), z[300:].argmax(axis=1))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)


def test_a_sound_fit_does_not_warn(trained):
    # Calibrator.fit warns (RuntimeWarning) when the fit should not be trusted: an optimiser out of
    # iterations, or an NLL-fitted calibrator worse than none on its own data (C++ test
    # Calibrators.FitWarningNamesNonConvergenceAndAWorseNll). A sound fit must stay silent.
    import warnings
    model, x, y = trained
    with torch.no_grad():
        z = model(x).double().numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # (not qats: its 500-iteration limit is reached on this small set, and it says so)
        for method in ("temperature", "vector", "matrix", "platt", "isotonic", "histogram", "nw"):
            arcal.Calibrator(method).fit(y.numpy(), logits=z)
