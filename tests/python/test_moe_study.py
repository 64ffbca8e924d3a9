"""examples/moe_study.py end to end at tiny settings (issue 53): the dict-gcide corpus, a BPE tokenizer, a
transformers Mixtral trained for a few seconds, its test documents traced with record_routing, then
`arcal metrics`, `arcal audit` and `arcal report` through the CLI. Checks what summary.json and
config.json promise, not the numbers (a few seconds of training). Skipped without the corpus."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ARCAL, BUILD, SOURCE

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

CORPUS = "/usr/share/dictd/gcide.dict.dz"
VERDICTS = ("present", "negligible", "absent", "undetected", "not assessed")  # docs/interface.md, `verdict.answer`


@pytest.mark.skipif(not os.path.exists(CORPUS), reason=f"{CORPUS} missing (apt-get install dict-gcide)")
def test_moe_study_runs_end_to_end(tmp_path):
    if not os.path.exists(ARCAL):
        pytest.skip(f"{ARCAL} not built")
    out = tmp_path / "moe"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), os.path.join(BUILD, "python")) if p)
    # --topk 8: the top-k form (at a 256-token vocabulary "auto" would keep the full logits) through the CLI.
    proc = subprocess.run([sys.executable, os.path.join(SOURCE, "examples", "moe_study.py"), "--out", str(out),
                           "--arcal", ARCAL, "--steps", "4", "--arch", "mixtral", "--vocab", "256",
                           "--test-tokens", "600", "--topk", "8", "--tokenizer-docs", "2000", "--hidden", "32",
                           "--layers", "2", "--batch", "4", "--context", "64", "--permutations", "200"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["archs"] == ["mixtral"] and config["steps"] == 4 and config["seed"] == 0
    (run,) = summary["runs"]
    for key in ("parameters", "steps", "train_minutes", "test_tokens", "accuracy", "ece", "verdict", "wall_seconds"):
        assert key in run, key
    assert run["steps"] == 4 and run["test_tokens"] >= 600 and 0 <= run["accuracy"] <= 1
    assert run["verdict"] in VERDICTS
    # A vocabulary is read in the reduced output form; "beyond the outputs" is the full-logit probe comparison
    # (the exact null does not run on token traces).
    assert run["outputs"].startswith("reduced (the top 8 of 258 classes")
    assert run["beyond_outputs"]["test"].startswith("probes.")
    assert run["class_explained"] is None or -1 < run["class_explained"] <= 1
    assert set(run["wall_seconds"]) == {"train", "trace", "metrics", "audit", "report"}
    for f in ("mixtral/trace.npz", "mixtral/m.json", "mixtral/audit/results.json", "mixtral/audit/report/report.html",
              "tokenizer.json", "mixtral/train_log.jsonl"):
        assert (out / f).exists(), f
    assert "| mixtral |" in proc.stdout
    with np.load(out / "mixtral" / "trace.npz") as trace:
        assert "topk_logprobs" in trace.files and "logits" not in trace.files
        assert json.loads(str(trace["meta"]))["outputs"] == {"form": "topk", "k": 8, "classes": 258}
    # The steps and seed replay: the same training log.
    first = (out / "mixtral" / "train_log.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in first] == [1, 2, 3, 4]


def test_missing_corpus_is_named(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), os.path.join(BUILD, "python")) if p)
    proc = subprocess.run([sys.executable, os.path.join(SOURCE, "examples", "moe_study.py"), "--out",
                           str(tmp_path / "x"), "--arcal", sys.executable, "--corpus", str(tmp_path / "none.dict.dz")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    assert "none.dict.dz is missing" in proc.stderr and "apt-get install dict-gcide" in proc.stderr
