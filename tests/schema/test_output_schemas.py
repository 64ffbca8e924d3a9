"""Every JSON output of arcal, produced by the real commands on small inputs, against its schema in
docs/schema (draft 2020-12), and the output conventions: a --json command prints exactly one JSON
document on stdout and nothing else, logs go to stderr, --quiet silences them. Each schema also
rejects a wrong `schema` version and a missing required key, so a schema that accepts anything fails
here. The audit's and `arcal run`'s results.json are checked by their own tests.

Inputs: `arcal simulate` traces, a random q/k/v file, one 2-step training run on the embedded
Fashion-MNIST (skipped without Debian's dataset-fashion-mnist), a 1-seed sweep study. About 30 s on
two cores. Run: ARCAL_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/schema
"""
import copy
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import arcal_schemas

SOURCE = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("ARCAL_BUILD_DIR", SOURCE / "build"))
ARCAL = BUILD / "arcal"
FMNIST = pathlib.Path("/usr/share/datasets/fashion-mnist")

pytestmark = pytest.mark.skipif(not ARCAL.exists(), reason=f"{ARCAL} not built")


def run(*args, cwd, code=0):
    p = subprocess.run([str(ARCAL), *map(str, args)], capture_output=True, text=True, cwd=cwd)
    assert p.returncode == code, f"arcal {' '.join(map(str, args))}: exit {p.returncode}\n{p.stderr}"
    return p


def one_document(p):
    """stdout of a --json command: exactly one JSON document (json.loads refuses any other text)."""
    doc = json.loads(p.stdout)
    assert isinstance(doc, dict), "a --json output is one object"
    return doc


def read_json(path):
    return json.loads(pathlib.Path(path).read_text())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("schemas")
    rng = np.random.default_rng(0)
    np.savez(d / "qkv.npz", q=rng.normal(size=(2, 16, 8)).astype(np.float32),
             k=rng.normal(size=(2, 128, 8)).astype(np.float32), v=rng.normal(size=(2, 128, 8)).astype(np.float32))
    np.savez(d / "qkv2d.npz", q=rng.normal(size=(16, 8)).astype(np.float32),
             k=rng.normal(size=(128, 8)).astype(np.float32), v=rng.normal(size=(128, 8)).astype(np.float32),
             chunk_starts=np.array([0, 1, 40, 90], np.int64))
    return d


@pytest.fixture(scope="module")
def outputs(work):
    """name -> (schema file, document) for every output that needs no training."""
    out = {}
    p = run("simulate", "--out", "sim.npz", "--n", "600", "--classes", "4", "--points", "3", "--effect-nats", "0.01",
            "--json", cwd=work)
    out["simulate --json"] = ("simulate.schema.json", one_document(p))
    run("simulate", "--out", "sim2.npz", "--n", "400", "--classes", "4", "--points", "3", "--seed", "2", cwd=work)
    # 20 bins on a confident model: the low-confidence bins are empty (null means).
    p = run("metrics", "sim.npz", "--json", "--bins", "20", "--bootstrap", "50", cwd=work)
    out["metrics --json"] = ("metrics.schema.json", one_document(p))
    p = run("metrics", "sim.npz", "--json", "--bootstrap", "0", cwd=work)
    out["metrics --json --bootstrap 0"] = ("metrics.schema.json", one_document(p))
    p = run("calibrate", "--fit", "sim.npz", "--apply", "sim2.npz", "--method", "temperature", "--out", "cal.npz",
            "--save", "cal.json", "--bootstrap", "20", "--json", cwd=work)
    out["calibrate --json"] = ("calibrate.schema.json", one_document(p))
    out["calibrate --save"] = ("calibrator.schema.json", read_json(work / "cal.json"))
    p = run("cedar", "--qkv", "qkv.npz", "--chunk-size", "16", "--budget", "2", "--error-target", "0.1", "--vs-dense",
            "--out", "o.npz", "--json", cwd=work)
    out["cedar --json --vs-dense"] = ("cedar.schema.json", one_document(p))
    p = run("cedar", "--qkv", "qkv2d.npz", "--method", "topk", "--budget", "1", "--causal", "--out", "o2.npz", "--json",
            cwd=work)
    out["cedar --json (chunk_starts)"] = ("cedar.schema.json", one_document(p))
    p = run("train", "--dry-run", "--json", cwd=work)
    out["train --dry-run --json"] = ("train_dry_run.schema.json", one_document(p))
    p = run("train", "--dry-run", "--json", "--dataset", "cifar10", "--model", "ar-swin-tiny", "--residual", "standard",
            cwd=work)
    out["train --dry-run --json (swin, standard)"] = ("train_dry_run.schema.json", one_document(p))
    p = run("train", "--dry-run", "--json", "--dataset", "gcide", "--model", "ar-lm-tiny", "--residual", "block", cwd=work)
    out["train --dry-run --json (language model)"] = ("train_dry_run.schema.json", one_document(p))
    (work / "study.toml").write_text('name = "tiny"\n[model]\nresiduals = ["full", "block"]\n[train]\nseeds = [0]\n')
    for mode in ("--list", "--dry-run"):
        p = run("sweep", "--config", "study.toml", "--out", "sweep", mode, "--json", cwd=work)
        out[f"sweep {mode} --json"] = ("sweep.schema.json", one_document(p))
    return out


@pytest.fixture(scope="module")
def trained(work):
    """name -> (schema file, document) for a 2-step run and everything that reads it."""
    if not (FMNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("needs Debian's dataset-fashion-mnist")
    out = {}
    common = ["--train-subset", "256", "--batch-size", "64", "--epochs", "2", "--threads", "1"]
    p = run("train", *common, "--max-steps", "2", "--out", "run", "--json", cwd=work)
    summary = one_document(p)
    assert summary == read_json(work / "run" / "summary.json"), "--json prints summary.json"
    assert "arcal train: run" in p.stderr, "the resolved configuration is a log: stderr"
    out["train --json"] = ("train_summary.schema.json", summary)
    # A resume that changes a setting records it in config.json (resume_overrides); --quiet: no log lines.
    p = run("train", "--resume", "--max-steps", "5", "--override", "max_steps", "--out", "run", "--json", "--quiet",
            cwd=work)
    assert p.stderr == "", "--quiet leaves stderr to errors"
    out["train --resume --json"] = ("train_summary.schema.json", one_document(p))
    out["RUN/summary.json"] = ("train_summary.schema.json", read_json(work / "run" / "summary.json"))
    config = read_json(work / "run" / "config.json")
    assert config["resume_overrides"][0]["changes"] == {"max_steps": {"from": 2, "to": 5}}
    out["RUN/config.json"] = ("train_config.schema.json", config)
    lines = (work / "run" / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 4, 5]  # 4 steps per epoch; each invocation's end
    for i, line in enumerate(lines):
        out[f"RUN/log.jsonl line {i + 1}"] = ("train_log.schema.json", json.loads(line))
    p = run("intervene", "--run", "run", "--out", "iv.json", "--subset", "48", "--bootstrap", "20", "--json", cwd=work)
    out["intervene --json"] = ("intervene.schema.json", one_document(p))
    assert out["intervene --json"][1] == read_json(work / "iv.json"), "--json prints the --out file"
    p = run("cedar-study", "--out", "study", "--keys", "256", "--chunk-size", "32", "--queries", "16", "--dim", "8",
            "--heads", "1", "--dispersions", "0.1,0.8", "--temperatures", "1", "--query-clusters", "1", "--budgets", "1,2",
            "--error-targets", "0.1", "--no-figure", "--run", "run", "--model-subset", "32", "--model-budgets", "1",
            "--bootstrap", "20", "--json", cwd=work)
    out["cedar-study --json"] = ("cedar_study.schema.json", one_document(p))
    out["cedar-study results.json"] = ("cedar_study.schema.json", read_json(work / "study" / "results.json"))
    return out


@pytest.fixture(scope="module")
def trained_lm(work):
    """The language model's outputs: a 2-step ar-lm-tiny run, its token trace's metrics (cluster bootstrap)."""
    if not pathlib.Path("/usr/share/dictd/gcide.dict.dz").exists():
        pytest.skip("needs Debian's dict-gcide")
    out = {}
    p = run("train", "--dataset", "gcide", "--model", "ar-lm-tiny", "--residual", "block", "--context", "16",
            "--train-subset", "64", "--batch-size", "8", "--max-steps", "2", "--val-fraction", "0.002", "--out", "lm",
            "--json", "--quiet", cwd=work)
    out["train --json (language model)"] = ("train_summary.schema.json", one_document(p))
    out["RUN/config.json (language model)"] = ("train_config.schema.json", read_json(work / "lm" / "config.json"))
    for i, line in enumerate((work / "lm" / "log.jsonl").read_text().splitlines()):
        out[f"RUN/log.jsonl (language model) line {i + 1}"] = ("train_log.schema.json", json.loads(line))
    run("trace", "--run", "lm", "--sequences", "20", "--out", "lm.npz", "--quiet", cwd=work)
    p = run("metrics", "lm.npz", "--json", "--bootstrap", "50", cwd=work)
    out["metrics --json (token trace)"] = ("metrics.schema.json", one_document(p))
    assert out["metrics --json (token trace)"][1]["clusters"] == 20
    assert "test_bits_per_byte" in out["train --json (language model)"][1]
    p = run("intervene", "--run", "lm", "--out", "lm_iv.json", "--subset", "6", "--bootstrap", "20", "--json", cwd=work)
    out["intervene --json (language model)"] = ("intervene.schema.json", one_document(p))
    assert out["intervene --json (language model)"][1]["unit"] == "token"
    assert out["intervene --json (language model)"][1]["clusters"] == 6
    # Context 32 is past the learned positions of a context-16 model: listed as skipped, not run.
    p = run("cedar-lm", "--run", "lm", "--out", "cedar_lm", "--contexts", "16,32", "--budgets", "1", "--chunk", "4",
            "--tokens", "64", "--timing-contexts", "16", "--bootstrap", "20", "--threads", "1", "--json", cwd=work)
    out["cedar-lm --json"] = ("cedar_lm.schema.json", one_document(p))
    out["cedar-lm results.json"] = ("cedar_lm.schema.json", read_json(work / "cedar_lm" / "results.json"))
    assert out["cedar-lm --json"][1]["skipped_contexts"] == [32]
    return out


def test_language_model_outputs_match_their_schemas(trained_lm):
    check_all(trained_lm)


def check_all(docs):
    failures = []
    for what, (name, doc) in docs.items():
        errs = arcal_schemas.errors(doc, name)
        if errs:
            failures.append(f"{what} vs {name}: " + "; ".join(errs[:5]))
    assert not failures, "\n".join(failures)


def test_outputs_without_training_match_their_schemas(outputs):
    check_all(outputs)


def test_training_outputs_match_their_schemas(trained):
    check_all(trained)


# Schemas of outputs that other tests produce and check (the audit's and arcal run's results.json).
CHECKED_ELSEWHERE = {"audit.schema.json"}
# Checked by test_language_model_outputs_match_their_schemas (it needs Debian's dict-gcide).
CHECKED_ELSEWHERE |= {"cedar_lm.schema.json"}


def test_every_schema_is_exercised(outputs, trained):
    used = {name for name, _ in list(outputs.values()) + list(trained.values())}
    used.add("model_config.schema.json")  # a component: reached through train_config, train_dry_run, cedar_study
    missing = set(arcal_schemas.names()) - used - CHECKED_ELSEWHERE
    assert not missing, f"schemas in docs/schema that no output is checked against: {sorted(missing)}"
    for name in used:
        assert name in arcal_schemas.SCHEMAS, f"docs/schema/{name} is missing"


def negative_cases(name, doc):
    """(what, broken document) pairs that the schema must refuse."""
    cases = []
    schema = arcal_schemas.SCHEMAS[name]
    if "schema" in doc:
        for wrong in (doc["schema"].rsplit("/", 1)[0] + "/2", "arcal.other/1", None):
            bad = copy.deepcopy(doc)
            bad["schema"] = wrong
            cases.append((f"schema {wrong!r}", bad))
    for key in schema.get("required", []):
        if key != "schema":
            bad = copy.deepcopy(doc)
            del bad[key]
            cases.append((f"without {key!r}", bad))
            break
    if schema.get("additionalProperties") is False:
        bad = copy.deepcopy(doc)
        bad["unexpected_key"] = 1
        cases.append(("with an unknown key", bad))
    return cases


def test_schemas_refuse_wrong_versions_and_missing_keys(outputs, trained):
    docs = {}
    for what, (name, doc) in list(outputs.items()) + list(trained.items()):
        docs.setdefault(name, doc)  # one document per schema
    docs["model_config.schema.json"] = trained["RUN/config.json"][1]["model"]
    accepted = []
    for name, doc in sorted(docs.items()):
        assert not arcal_schemas.errors(doc, name), name
        cases = negative_cases(name, doc)
        assert len(cases) >= (4 if "schema" in doc else 1), name
        for what, bad in cases:
            if not arcal_schemas.errors(bad, name):
                accepted.append(f"{name} accepts a document {what}")
    assert not accepted, "\n".join(accepted)


def test_metrics_reliability_rows(outputs):
    m = outputs["metrics --json"][1]
    rows = m["reliability"]
    assert len(rows) == m["bins"] == 20
    empty = [r for r in rows if r["n"] == 0]
    full = [r for r in rows if r["n"] > 0]
    assert empty and full, "the test needs empty and non-empty bins"
    for r in empty:
        assert r["confidence"] is None and r["accuracy"] is None and r["conf"] is None and r["acc"] is None
    for r in full:
        assert r["conf"] == r["confidence"] and r["acc"] == r["accuracy"], "the deprecated keys repeat the new ones"
    assert sum(r["n"] for r in rows) == m["n"]
    # An empty bin written as 0 (the old form) is refused.
    bad = copy.deepcopy(m)
    next(r for r in bad["reliability"] if r["n"] == 0)["confidence"] = 0.0
    assert arcal_schemas.errors(bad, "metrics.schema.json")
    # The embedded copies (calibrate's before/after) are the same object without `file`.
    cal = outputs["calibrate --json"][1]
    assert "file" not in cal["before"] and cal["before"]["schema"] == "arcal.metrics/1"


def test_sweep_rows(outputs):
    listed = outputs["sweep --list --json"][1]
    sized = outputs["sweep --dry-run --json"][1]
    assert listed["total_runs"] == len(listed["runs"]) == 3  # full, block, standard twin
    assert not listed["dry_run"] and sized["dry_run"]
    assert all(r["status"] == "to train" for r in listed["runs"])
    assert [r["id"] for r in listed["runs"]] == [r["id"] for r in sized["runs"]]


def test_run_config_reader_accepts_old_runs_and_names_a_wrong_version(work, trained):
    old = work / "run_old"
    shutil.copytree(work / "run", old)
    config = read_json(old / "config.json")
    del config["schema"]  # as written before the key existed
    (old / "config.json").write_text(json.dumps(config))
    run("intervene", "--run", old, "--out", "iv_old.json", "--subset", "24", "--bootstrap", "10", "--quiet", cwd=work)
    config["schema"] = "arcal.train_config/2"
    (old / "config.json").write_text(json.dumps(config))
    p = run("intervene", "--run", old, "--out", "iv_new.json", "--subset", "24", "--bootstrap", "10", cwd=work, code=2)
    assert 'schema is "arcal.train_config/2", but this arcal reads "arcal.train_config/1"' in p.stderr, p.stderr
    assert not (work / "iv_new.json").exists()
