"""The top-k output form of record_routing (issue 53: a researcher's own MoE language model): over a real
vocabulary a trace cannot hold N x K logits, so the recorder keeps per token the k largest log-softmax
values and their classes, the log-probability at the label, the log normaliser, the entropy and the sum
of squared probabilities of the full softmax (docs/interface.md "The trace file"). Each is checked
against a direct float64 numpy computation from the full logits the same recorder writes with
topk=None on the same inputs; also bf16 and torch.compile'd models, and the choices topk="auto" / k /
None. Only test_topk_trace_is_written_and_read_back needs the C++ trace writer to accept the form."""
import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
th = pytest.importorskip("arcal.torch_hooks")
transformers = pytest.importorskip("transformers")

VOCAB = 1500  # > TOPK_AUTO_CLASSES: topk="auto" takes the top-32 form


def tiny_mixtral(vocab=VOCAB):
    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2)
    return transformers.MixtralForCausalLM(config).eval()


def padded_batches(vocab=VOCAB):
    """Two padded batches of documents of unequal length: (input_ids, attention_mask, labels) with the
    next token as label, -100 at the last real token and at padding (transformers' convention)."""
    g = torch.Generator().manual_seed(1)
    out = []
    for lengths in ([9, 5, 7], [4, 8]):
        t = max(lengths)
        ids = torch.zeros(len(lengths), t, dtype=torch.int64)
        mask = torch.zeros(len(lengths), t, dtype=torch.int64)
        for i, n in enumerate(lengths):
            ids[i, :n] = torch.randint(0, vocab, (n,), generator=g)
            mask[i, :n] = 1
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = torch.where(mask[:, 1:] == 1, ids[:, 1:], torch.full_like(ids[:, 1:], -100))
        out.append((ids, mask, labels))
    return out


def record(model, topk, labels_when="after", batches=None):
    """labels_when: "after" each forward, "before" it, or "end" (all at once after the last batch)."""
    batches = batches or padded_batches()
    with torch.no_grad(), th.record_routing(model, None, routing="auto", per_token=True, topk=topk) as rec:
        for ids, mask, labels in batches:
            if labels_when == "before":
                rec.add_labels(labels)
            model(input_ids=ids, attention_mask=mask)
            if labels_when == "after":
                rec.add_labels(labels)
        if labels_when == "end":
            rec.add_labels(torch.cat([lab[mask == 1] for _, mask, lab in batches]))
    return rec.arrays()


def reference(logits, labels, k):
    """float64 numpy: what the top-k form must hold, from the full logits [N, K]."""
    z = logits.astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    log_normalizer = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    logp = z - log_normalizer[:, None]
    p = np.exp(logp)
    order = np.argsort(-logp, axis=1, kind="stable")[:, :k]
    return {"topk_logprobs": np.take_along_axis(logp, order, axis=1), "topk_indices": order,
            "label_logprob": logp[np.arange(len(labels)), labels], "log_normalizer": log_normalizer,
            "predictive_entropy": -(p * logp).sum(axis=1), "prob_sq_sum": (p * p).sum(axis=1)}


def check_against_full(top, full, k):
    ref = reference(full["logits"], full["labels"], k)
    assert top["topk_logprobs"].dtype == np.float32 and top["topk_logprobs"].shape == (len(full["labels"]), k)
    assert top["topk_indices"].dtype == np.int64 and int(top["num_classes"]) == full["logits"].shape[1]
    # 1e-5: the recorder works in float32 (logsumexp over 1500 classes, |log p| < 12), the reference in
    # float64 from the same float32 logits.
    for name in ("topk_logprobs", "label_logprob", "log_normalizer", "predictive_entropy", "prob_sq_sum"):
        np.testing.assert_allclose(top[name], ref[name], atol=1e-5, rtol=1e-5, err_msg=name)
        assert top[name].dtype == np.float32, name
    # Indices agree wherever the values are not tied within float32 rounding.
    same = top["topk_indices"] == ref["topk_indices"]
    gaps = np.abs(np.diff(ref["topk_logprobs"], axis=1))
    tied = np.zeros_like(same)
    tied[:, :-1] |= gaps < 1e-5
    tied[:, 1:] |= gaps < 1e-5
    assert np.all(same | tied)
    assert np.all(np.diff(top["topk_logprobs"], axis=1) <= 0)
    for key in ("labels", "cluster", "routing", "routing_selected", "routing_entropy"):
        np.testing.assert_array_equal(top[key], full[key], err_msg=key)


def test_topk_form_matches_the_full_logits():
    model = tiny_mixtral()
    full = record(model, None)
    assert "logits" in full and "topk_logprobs" not in full
    assert json.loads(str(full["meta"]))["outputs"] == {"form": "full", "classes": VOCAB}
    # 8 + 4 + 6 + 3 + 7 real tokens with a next token: the last of each document and padding are dropped.
    assert full["logits"].shape == (28, VOCAB)
    for topk, k in (("auto", th.TOPK_AUTO_K), (5, 5)):
        top = record(model, topk)
        assert "logits" not in top and "probs" not in top
        assert json.loads(str(top["meta"]))["outputs"] == {"form": "topk", "k": k, "classes": VOCAB}
        check_against_full(top, full, k)
    # Labels added before each forward, or all at once at the end (the logits are held until then).
    for when in ("before", "end"):
        check_against_full(record(model, 4, labels_when=when), full, 4)


def test_rows_cross_storage_blocks_and_arrays_can_be_read_twice(monkeypatch):
    """The recorder stores the summaries in blocks of rows (_RowStore): blocks of 5 rows split every
    batch; arrays() twice, and more batches after it, give the same rows as one recording."""
    model = tiny_mixtral()
    want = record(model, 4)
    monkeypatch.setattr(th._RowStore, "BLOCK", 5)
    batches = padded_batches()
    with torch.no_grad(), th.record_routing(model, None, routing="auto", per_token=True, topk=4) as rec:
        ids, mask, labels = batches[0]
        model(input_ids=ids, attention_mask=mask)
        rec.add_labels(labels)
        first = rec.arrays()
        assert first["topk_indices"].dtype == np.int64
        ids, mask, labels = batches[1]
        model(input_ids=ids, attention_mask=mask)
        rec.add_labels(labels)
    for a in (rec.arrays(), rec.arrays()):
        for name in ("topk_logprobs", "topk_indices", "label_logprob", "log_normalizer", "predictive_entropy",
                     "prob_sq_sum", "labels", "cluster"):
            np.testing.assert_array_equal(a[name], want[name], err_msg=name)
    n = len(first["labels"])
    np.testing.assert_array_equal(first["topk_indices"], want["topk_indices"][:n])


def test_topk_choice_and_refusals():
    small = tiny_mixtral(vocab=300)
    a = record(small, "auto", batches=padded_batches(300))
    assert "logits" in a and json.loads(str(a["meta"]))["outputs"]["form"] == "full"  # K <= 1024
    assert "topk_logprobs" in record(small, 2, batches=padded_batches(300))  # forced
    for bad in (1, 0, True, "top", 2.5):
        with pytest.raises(ValueError, match="topk is"):
            th.record_routing(small, None, routing="auto", per_token=True, topk=bad).__enter__()
    with pytest.raises(ValueError, match="k < K"):
        record(small, 300, batches=padded_batches(300))
    # A label outside [0, K) is refused when it is paired with its batch, naming it.
    ids, mask, labels = padded_batches(300)[0]
    with pytest.raises(ValueError, match="label 300 .* not in \\[0, K\\)"):
        with torch.no_grad(), th.record_routing(small, None, routing="auto", per_token=True, topk=4) as rec:
            small(input_ids=ids, attention_mask=mask)
            rec.add_labels(torch.where(labels == -100, labels, torch.full_like(labels, 300)))


def test_bf16_mixtral_routing_rows_and_finite_topk():
    model = tiny_mixtral().to(torch.bfloat16)
    a = record(model, "auto")
    # Rows renormalised in float32 from bf16 (ROW_SUM_TOLERANCE): they sum to 1 well within 1e-3.
    np.testing.assert_allclose(a["routing"].sum(axis=2), 1.0, atol=1e-3)
    for name in ("topk_logprobs", "label_logprob", "log_normalizer", "predictive_entropy", "prob_sq_sum"):
        assert np.all(np.isfinite(a[name])), name
    assert np.all(a["topk_logprobs"] <= 0) and np.all(a["prob_sq_sum"] <= 1 + 1e-6)
    assert json.loads(str(a["meta"]))["routing_rows_renormalised_max_deviation"] < 2e-2


def test_torch_compiled_model_records_as_the_eager_one():
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("torch.compile's inductor backend needs a C compiler (gcc) on the CPU")
    model = tiny_mixtral()
    eager = record(model, 8)
    torch._dynamo.reset()
    # dynamic=False with two distinct batch shapes: two small graphs; the hooks run in eager Python
    # around the compiled forward (torch.compile keeps module hooks).
    compiled = torch.compile(model, dynamic=False)
    try:
        got = record(compiled, 8)
    except Exception as e:  # noqa: BLE001 - a missing toolchain piece is reported, not hidden
        if "compiler" in str(e).lower() or "CppCompileError" in type(e).__name__:
            pytest.skip(f"torch.compile failed on this machine's C toolchain: {type(e).__name__}: {e}")
        raise
    for name in ("topk_logprobs", "label_logprob", "log_normalizer", "predictive_entropy", "prob_sq_sum",
                 "routing"):
        np.testing.assert_allclose(got[name], eager[name], atol=1e-4, err_msg=name)  # fused kernels round differently
    np.testing.assert_array_equal(got["labels"], eager["labels"])


def test_topk_trace_is_written_and_read_back(tmp_path, cli):
    """Needs the C++ trace writer/reader with the top-k form (write_trace accepting topk_logprobs, ...)."""
    import arcal
    model = tiny_mixtral()
    a = record(model, 6)
    path = tmp_path / "topk.npz"
    arcal._arcal.write_trace(str(path), **a)
    back = arcal.read_trace(str(path))
    for name in ("topk_logprobs", "topk_indices", "label_logprob", "log_normalizer", "predictive_entropy",
                 "prob_sq_sum", "labels", "cluster"):
        np.testing.assert_array_equal(np.asarray(back[name]), a[name], err_msg=name)
    assert int(np.asarray(back["num_classes"])) == VOCAB
    m = cli("metrics", path, "--json", "--bootstrap", "0").json()
    assert m["n"] == len(a["labels"])
    full = record(model, None)
    want_nll = -np.mean(reference(full["logits"], full["labels"], 6)["label_logprob"])
    assert m["nll"] == pytest.approx(want_nll, rel=1e-5)


class Head(torch.nn.Module):
    """A classifier that returns the logits it is given and runs one router: top-k form without an LM."""

    def __init__(self):
        super().__init__()
        self.moe = torch.nn.Module()
        self.moe.router = torch.nn.Linear(4, 3)
        self.moe.experts = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, h, logits):
        self.moe.router(h)
        return logits


def test_masked_classes_and_non_finite_logits():
    model = Head()
    g = torch.Generator().manual_seed(3)
    z = torch.randn(20, 40, generator=g, dtype=torch.float64) * 4  # float64 logits are summarised in float64
    z[:5, 10:] = -torch.inf  # masked classes: p = 0, no nan in the entropy
    y = torch.randint(0, 10, (20,), generator=g)
    with torch.no_grad(), th.record_routing(model, None, routing="auto", topk=4) as rec:
        model(torch.randn(20, 4, generator=g), z)
        rec.add_labels(y)
    a = rec.arrays()
    zn = z.numpy()
    lz = np.log(np.exp(zn - zn.max(1, keepdims=True)).sum(1)) + zn.max(1)
    logp = zn - lz[:, None]
    p = np.exp(logp)
    np.testing.assert_allclose(a["log_normalizer"], lz, rtol=1e-6)
    np.testing.assert_allclose(a["predictive_entropy"], -(p * np.where(p > 0, logp, 0)).sum(1), atol=1e-6)
    np.testing.assert_allclose(a["label_logprob"], logp[np.arange(20), y.numpy()], atol=1e-6)
    assert np.all(np.isfinite(a["predictive_entropy"])) and np.all(np.isfinite(a["topk_logprobs"]))
    z[3, 2] = torch.nan
    with pytest.raises(ValueError, match="not finite in row 3"):
        with torch.no_grad(), th.record_routing(model, None, routing="auto", topk=4) as rec:
            model(torch.randn(20, 4, generator=g), z)


def test_kernel_and_torch_paths_agree(monkeypatch):
    """float32 CPU logits go through arcal's kernel (src/ops/topk_summary.hpp), everything else through
    torch's ops: on the same float32 logits (a third of the classes masked in some rows, rows picked out
    of order, ties in the top k) both give the same classes in the same order and values within float32
    rounding, and both refuse a NaN naming its row."""
    g = torch.Generator().manual_seed(5)
    z = torch.randn(300, 2000, generator=g) * 3
    z[:40, ::3] = -torch.inf
    z[50, 40:] = z[50, 40:].clamp(max=5.0)
    z[50, :40] = 9.0  # 40 tied classes at the top: the earlier ones first
    rows = torch.tensor([299, 0, 50, 7, 7, 120])
    fast = th._topk_summaries(z, 32, rows)
    monkeypatch.setattr(th, "_FORCE_TORCH_TOPK", True)
    ref = th._topk_summaries(z, 32, rows)
    np.testing.assert_array_equal(fast["topk_indices"].numpy()[2], np.arange(32))
    ties_ref = ref["topk_indices"].numpy()[2]
    assert set(ties_ref) <= set(range(40))  # torch.topk orders ties as it likes; the kernel by class
    keep = np.arange(6) != 2
    np.testing.assert_array_equal(fast["topk_indices"].numpy()[keep], ref["topk_indices"].numpy()[keep])
    for name in ("topk_logprobs", "log_normalizer", "predictive_entropy", "prob_sq_sum"):
        np.testing.assert_allclose(fast[name].numpy(), ref[name].numpy(), rtol=2e-6, atol=2e-5, err_msg=name)
    # The whole recorder on both paths: a NaN is refused naming its row.
    monkeypatch.setattr(th, "_FORCE_TORCH_TOPK", False)
    model = Head()
    bad = torch.randn(20, 1500, generator=g)
    bad[11, 700] = torch.nan
    for force in (False, True):
        monkeypatch.setattr(th, "_FORCE_TORCH_TOPK", force)
        with pytest.raises(ValueError, match="not finite in row 11"):
            with torch.no_grad(), th.record_routing(model, None, routing="auto", topk=4) as rec:
                model(torch.randn(20, 4, generator=g), bad)
