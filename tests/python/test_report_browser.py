"""What a person sees of each report kind (issue 56), in Debian's headless Chromium at 1,400 px: no
broken image, every figure drawn with data, no text overflowing its box, the page height within a
bound. The check runs inside the page (a script appended to a copy of report.html writes its findings
into the DOM, which `chromium --dump-dom` prints), so it measures the layout the browser made.

Every report kind is made here, small: an audit of simulated traces, a classifier's metrics, a
calibrator's before/after, a study (`arcal run`: a 3-step ViT on Fashion-MNIST, trace, metrics, audit,
report), a language model's study (a 2-step ar-lm-tiny on dict-gcide, its token trace audited with
whole sequences as clusters) and an intervention on that model (`arcal intervene`, then `arcal report` of
its JSON). `python tests/python/test_report_browser.py REPORT.html ...` checks any
report.html (the default study's, for one)."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import run_cli

CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome") if os.path.exists(p)), None)
WIDTH = 1400

CHECK = """
<script>
window.addEventListener('load', () => {
  const out = {broken: [], empty: [], overflow: [], height: document.documentElement.scrollHeight, figures: 0};
  for (const img of document.querySelectorAll('img')) {
    out.figures += 1;
    if (!img.complete || img.naturalWidth === 0) out.broken.push(img.alt || img.src.slice(0, 60));
    else if (img.naturalWidth < 50 || img.naturalHeight < 50) out.empty.push(img.alt || img.src.slice(0, 60));
  }
  // Text boxes whose content is wider than the box (tables scroll in their own block and are exempt).
  for (const el of document.querySelectorAll('p, h1, h2, h3, figcaption, summary, li, nav')) {
    if (el.scrollWidth > el.clientWidth + 2) out.overflow.push(el.tagName + ': ' + el.textContent.slice(0, 80));
  }
  if (document.documentElement.scrollWidth > window.innerWidth + 2) out.overflow.push('page wider than the window');
  // An audit report's first screens: everything above its appendix heading.
  const appendix = [...document.querySelectorAll('h2')].find(h => h.textContent.startsWith('Appendix'));
  out.before_appendix = appendix ? Math.round(appendix.getBoundingClientRect().top + window.scrollY) : out.height;
  const pre = document.createElement('pre');
  pre.id = 'arcal-browser-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def browser_check(html, work):
    """The in-page findings for one report.html (a copy with the check appended; images stay inline)."""
    os.makedirs(work, exist_ok=True)
    page = os.path.join(work, "checked.html")
    text = open(html, encoding="utf-8").read()
    open(page, "w", encoding="utf-8").write(text.replace("</body>", CHECK + "</body>"))
    # Not the sanitizer runtime a sanitized build's pytest preloads (chromium hangs under it).
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS")}
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=%d,1000" % WIDTH, "--virtual-time-budget=10000", "--dump-dom", "file://" + page],
                       capture_output=True, text=True, timeout=180, env=env)
    m = re.search(r'<pre id="arcal-browser-check">(.*?)</pre>', p.stdout, re.S)
    assert m, "chromium printed no check result (exit %d): %s" % (p.returncode, p.stderr[-500:])
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def expect_readable(found, max_height, max_first=None):
    """max_first: a bound on the page above the appendix (an audit report's first screens)."""
    assert found["figures"] > 0, "no figure"
    assert not found["broken"], "broken images: %s" % found["broken"]
    assert not found["empty"], "figures without data: %s" % found["empty"]
    assert not found["overflow"], "text overflowing its box: %s" % found["overflow"]
    assert found["height"] <= max_height, "page %d px tall, bound %d" % (found["height"], max_height)
    if max_first is not None:
        assert found["before_appendix"] <= max_first, "%d px before the appendix, bound %d" % (found["before_appendix"], max_first)


needs_browser = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("ARCAL_REQUIRE_BROWSER"),
                                   reason="no chromium (scripts/test.sh installs Debian's chromium)")


@needs_browser
def test_audit_report_reads_in_a_browser(tmp_path):
    traces = []
    for s in range(3):
        f = str(tmp_path / ("sim%d.npz" % s))
        assert run_cli("simulate", "--out", f, "--n", "1500", "--classes", "10", "--seed", str(s)).code == 0
        traces.append(f)
    a = run_cli("audit", *traces, "--out", str(tmp_path / "audit"), "--permutations", "300", "--probe-restarts", "1",
                "--sensitivity", "--sensitivity-draws", "1", "--sensitivity-effects", "0.01,0.02", "--exact-null",
                "--null-replicates", "5", "--quiet")
    assert a.code == 0, a.err
    assert run_cli("report", str(tmp_path / "audit")).code == 0
    expect_readable(browser_check(str(tmp_path / "audit" / "report" / "report.html"), str(tmp_path / "chk")), 16000, 3000)


@needs_browser
def test_metrics_and_calibrate_reports_read_in_a_browser(tmp_path):
    f = str(tmp_path / "sim.npz")
    assert run_cli("simulate", "--out", f, "--n", "4000", "--classes", "5", "--seed", "3").code == 0
    m = run_cli("metrics", f, "--json")
    assert m.code == 0, m.err
    open(tmp_path / "m.json", "w").write(m.out)
    assert run_cli("report", str(tmp_path / "m.json"), "--out", str(tmp_path / "m_rep")).code == 0
    expect_readable(browser_check(str(tmp_path / "m_rep" / "report.html"), str(tmp_path / "chk_m")), 5000)
    c = run_cli("calibrate", f, "--method", "temperature", "--out", str(tmp_path / "cal.npz"), "--json")
    assert c.code == 0, c.err
    open(tmp_path / "c.json", "w").write(c.out)
    assert run_cli("report", str(tmp_path / "c.json"), "--out", str(tmp_path / "c_rep")).code == 0
    expect_readable(browser_check(str(tmp_path / "c_rep" / "report.html"), str(tmp_path / "chk_c")), 5000)


STUDY = """name = "browser"
[data]
datasets = ["{dataset}"]
[model]
presets = ["{preset}"]
residuals = ["{residual}"]
standard_twin = false
{context}
[train]
seeds = [0, 1]
max_steps = {steps}
train_subset = {subset}
batch_size = {batch}
{val}
[trace]
sequences = 24
[audit]
permutations = 200
probe_restarts = 1
probe_repeats = 2
sensitivity = false
exact_null = false
"""


def study_report(tmp_path, **keys):
    toml = tmp_path / "study.toml"
    toml.write_text(STUDY.format(**keys))
    r = run_cli("run", "--config", str(toml), "--out", str(tmp_path / "study"))
    assert r.code == 0, r.err[-2000:]
    return str(tmp_path / "study" / "report" / "report.html")


@needs_browser
def test_study_report_reads_in_a_browser(tmp_path):
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        pytest.skip("needs Debian's dataset-fashion-mnist")
    html = study_report(tmp_path, dataset="fashion-mnist", preset="ar-vit-tiny", residual="full", context="", steps=3,
                        subset=512, batch=64, val="")
    expect_readable(browser_check(html, str(tmp_path / "chk")), 14000, 3000)


@needs_browser
def test_language_model_study_report_reads_in_a_browser(tmp_path):
    if not os.path.exists("/usr/share/dictd/gcide.dict.dz"):
        pytest.skip("needs Debian's dict-gcide")
    html = study_report(tmp_path, dataset="gcide", preset="ar-lm-tiny", residual="block", context="context = 16", steps=2,
                        subset=64, batch=8, val="val_fraction = 0.002")
    expect_readable(browser_check(html, str(tmp_path / "chk")), 14000, 3000)
    # The intervention report of one of its runs (arcal intervene --out, then arcal report of the JSON).
    run_dir = sorted((tmp_path / "study" / "runs").iterdir())[0]
    iv = tmp_path / "iv.json"
    r = run_cli("intervene", "--run", str(run_dir), "--out", str(iv), "--subset", "6", "--bootstrap", "20", "--quiet")
    assert r.code == 0, r.err[-2000:]
    r = run_cli("report", str(iv), "--out", str(tmp_path / "iv_rep"))
    assert r.code == 0, r.err[-2000:]
    found = browser_check(str(tmp_path / "iv_rep" / "report.html"), str(tmp_path / "chk_iv"))
    expect_readable(found, 6000)


if __name__ == "__main__":
    if CHROMIUM is None:
        sys.exit("no chromium")
    status = 0
    for html in sys.argv[1:]:
        work = os.path.join(os.path.dirname(os.path.abspath(html)), ".browser-check")
        found = browser_check(html, work)
        shutil.rmtree(work, ignore_errors=True)
        print(html, json.dumps(found))
        status |= bool(found["broken"] or found["empty"] or found["overflow"])
    sys.exit(status)


def moe_topk_trace(path, n=2000, K=600, k=32, experts=8, points=3, seed=0):
    """A mixture-of-experts token trace in the top-k form (docs/interface.md): documents of 40 tokens,
    a dense router distribution per layer and the top-2 experts the model used."""
    import numpy as np
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2, (n, K))
    z[:, :50] += 2
    lp = z - np.log(np.exp(z).sum(1, keepdims=True))
    p = np.exp(lp)
    labels = np.array([rng.choice(K, p=row) for row in p])
    idx = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    r = rng.dirichlet(np.ones(experts) * 0.5, (n, points)).astype(np.float32)
    sel = np.zeros_like(r)
    top2 = np.argsort(-r, axis=2)[:, :, :2]
    np.put_along_axis(sel, top2, np.take_along_axis(r, top2, axis=2), axis=2)
    meta = {"routing_points": ["model.layers.%d.mlp.gate" % i for i in range(points)]}
    np.savez(path, topk_logprobs=np.take_along_axis(lp, idx, 1).astype(np.float32), topk_indices=idx,
             label_logprob=lp[np.arange(n), labels].astype(np.float32), log_normalizer=np.log(np.exp(z).sum(1)).astype(np.float32),
             predictive_entropy=(-(p * lp).sum(1)).astype(np.float32), prob_sq_sum=(p * p).sum(1).astype(np.float32),
             num_classes=np.array(K), labels=labels, routing=r, routing_sources=np.full(points, experts, np.int32),
             routing_kind=np.array("unordered"), routing_selected=sel, cluster=np.arange(n) // 40, meta=np.array(json.dumps(meta)))


@needs_browser
def test_mixture_of_experts_report_reads_in_a_browser(tmp_path):
    """Issue 53: an expert-routing audit's report has the expert view in expert words (no AttnRes
    'embedding'/'source' axes), the reduced output form said, and reads in a browser."""
    f = str(tmp_path / "moe.npz")
    moe_topk_trace(f)
    a = run_cli("audit", f, "--out", str(tmp_path / "audit"), "--permutations", "200", "--probe-restarts", "1", "--quiet")
    assert a.code == 0, a.err
    assert run_cli("report", str(tmp_path / "audit")).code == 0
    html = open(str(tmp_path / "audit" / "report" / "report.html"), encoding="utf-8").read()
    assert "Experts: load, router entropy and calibration per expert" in html
    assert "model.layers.2.mlp.gate" in html and "reduced (the top 32 of 600 classes" in html
    assert "embedding" not in html and "past the point" not in html
    gp = open(str(tmp_path / "audit" / "report" / "figures" / "expert_load.gp"), encoding="utf-8").read()
    assert "set xlabel 'expert'" in gp and "xtics 0,1" in gp and "with image pixels" in gp
    rows = open(str(tmp_path / "audit" / "report" / "tables" / "experts.csv"), encoding="utf-8").read().splitlines()
    assert len(rows) == 1 + 3 * 8
    expect_readable(browser_check(str(tmp_path / "audit" / "report" / "report.html"), str(tmp_path / "chk")), 16000, 4500)
