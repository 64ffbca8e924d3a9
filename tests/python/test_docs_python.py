"""docs/python.md runs as written: its ```python blocks, in order, in one namespace, in a scratch
directory (the example asserts its own verdicts)."""
import os
import re

from conftest import SOURCE


def python_blocks(path):
    with open(path) as f:
        text = f.read()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_docs_python_md_runs(tmp_path, monkeypatch, capsys):
    blocks = python_blocks(os.path.join(SOURCE, "docs", "python.md"))
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "docs_python_md"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/python.md block {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "verdict: severity -> stable negative" in out
    assert (tmp_path / "gated.npz").exists() and (tmp_path / "temperature.json").exists()
    assert (tmp_path / "calibration_report" / "report.html").exists()
    assert (tmp_path / "temperature_report" / "report.html").exists()
