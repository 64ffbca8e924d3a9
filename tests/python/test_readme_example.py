"""README.md's "Audit your own model" block runs as written (issue 53, item 5): on a mixture-of-experts
language model of transformers (a Mixtral built from its config class, random weights, nothing
downloaded) and a test loader of padded documents of unequal length, the block records the routers it
finds, audits the trace with documents as clusters and measures calibration over the whole test set."""
import pathlib
import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def readme_block():
    text = README.read_text()
    section = text[text.index("## Audit your own model"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def padded_documents(batches=6, docs=4, vocab=300, seed=0):
    """Batches of `docs` documents of 8-32 tokens, right-padded: input_ids, attention_mask, and labels (the
    next token, -100 past each document's last token)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(batches):
        lengths = torch.randint(8, 33, (docs,), generator=g)
        t = int(lengths.max())
        ids = torch.zeros(docs, t, dtype=torch.int64)
        mask = torch.zeros(docs, t, dtype=torch.int64)
        labels = torch.full((docs, t), -100, dtype=torch.int64)
        for i, n in enumerate(lengths.tolist()):
            doc = torch.randint(0, vocab, (n,), generator=g)
            ids[i, :n], mask[i, :n], labels[i, :n - 1] = doc, 1, doc[1:]
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


@pytest.mark.parametrize("vocab", [300, 2000])
def test_the_readme_block_runs_as_written(tmp_path, monkeypatch, capsys, vocab):
    """vocab 2000: above 1,024 classes the trace holds the top-k form, and the block runs unchanged."""
    import arcal

    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2)
    model = transformers.MixtralForCausalLM(cfg).eval()
    loader = padded_documents(vocab=vocab)
    monkeypatch.chdir(tmp_path)
    scope = {"model": model, "test_loader": loader}
    exec(compile(readme_block(), "README.md", "exec"), scope)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split(" - ")[0] in ("present", "negligible", "absent", "undetected", "not assessed")
    assert 0 <= float(printed[1].split()[0]) <= 1
    t = arcal.read_trace(str(tmp_path / "trace.npz"))
    assert ("topk_logprobs" in t) == (vocab > 1024) and ("logits" in t) == (vocab <= 1024)
    tokens = sum(int(b["attention_mask"].sum()) - b["attention_mask"].shape[0] for b in loader)  # minus the -100s
    assert t["labels"].shape[0] == tokens
    assert len(set(t["cluster"].tolist())) == sum(b["input_ids"].shape[0] for b in loader)
    assert scope["res"]["integrity"]["runs"][0]["rows"] == tokens
    assert scope["m"]["n"] == tokens and (scope["m"]["classwise_ece"] is None) == (vocab > 1024)
