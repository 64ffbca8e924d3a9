"""arcal.torch_hooks.record_routing on a small mixture-of-experts model built here: gate probabilities
as routing points (two gates with different expert counts: zero-padded), a module's output and an
outside signal as features, the trace file it writes read back and audited, and its errors."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import arcal  # noqa: E402
from arcal.torch_hooks import record_routing  # noqa: E402


class TinyMoE(nn.Module):
    """x [B, T, d] -> logits [B, K]; gate1 routes tokens over 3 experts, gate2 over 2."""

    def __init__(self, d=6, width=12, k=4):
        super().__init__()
        self.embed = nn.Linear(d, width)
        self.gate1 = nn.Sequential(nn.Linear(width, 3), nn.Softmax(dim=-1))
        self.experts1 = nn.ModuleList(nn.Linear(width, width) for _ in range(3))
        self.gate2 = nn.Linear(width, 2)  # logits: recorded with softmax=True below
        self.experts2 = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, k)

    def forward(self, x):
        h = torch.relu(self.embed(x))
        g1 = self.gate1(h)
        h = h + sum(g1[..., e:e + 1] * self.experts1[e](h) for e in range(3))
        g2 = torch.softmax(self.gate2(h), dim=-1)
        h = h + sum(g2[..., e:e + 1] * self.experts2[e](h) for e in range(2))
        return self.head(self.norm(h).mean(dim=1))


@pytest.fixture
def model_and_data():
    torch.manual_seed(0)
    model = TinyMoE().eval()
    x = torch.randn(300, 5, 6)
    y = torch.randint(0, 4, (300,))
    return model, x, y


def test_records_gates_features_and_logits(tmp_path, model_and_data):
    model, x, y = model_and_data
    path = tmp_path / "trace.npz"
    gate2 = ("gate2", lambda out: torch.softmax(out, dim=-1))  # the gate outputs logits
    with torch.no_grad():
        with record_routing(model, path, routing=["gate1", gate2],
                            features={"norm": ("norm", lambda out: out.norm(dim=-1).mean(dim=1))},
                            meta={"run": "tiny"}) as rec:
            for i in range(0, 300, 64):  # batches of 64 (the last one 44)
                model(x[i:i + 64])
                rec.add_labels(y[i:i + 64])
                rec.add_feature("input_norm", x[i:i + 64].norm(dim=(1, 2)))
    tr = arcal.read_trace(str(path))
    with torch.no_grad():  # the same quantities by hand
        logits = model(x)
        h = torch.relu(model.embed(x))
        g1 = model.gate1(h)
        h1 = h + sum(g1[..., e:e + 1] * model.experts1[e](h) for e in range(3))
        g2 = torch.softmax(model.gate2(h1), dim=-1)
        h2 = h1 + sum(g2[..., e:e + 1] * model.experts2[e](h1) for e in range(2))
        norm = model.norm(h2).norm(dim=-1).mean(dim=1)
    np.testing.assert_allclose(tr["logits"], logits.numpy(), rtol=1e-5, atol=1e-6)
    assert np.array_equal(tr["labels"], y.numpy())
    assert tr["routing"].shape == (300, 2, 3) and list(tr["routing_sources"]) == [3, 2]
    np.testing.assert_allclose(tr["routing"][:, 0, :], g1.mean(dim=1).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tr["routing"][:, 1, :2], g2.mean(dim=1).numpy(), rtol=1e-5, atol=1e-6)
    assert not tr["routing"][:, 1, 2].any()  # zero-padded past routing_sources[1] = 2
    assert list(tr["feature_names"]) == ["norm", "input_norm"]
    np.testing.assert_allclose(tr["features"][:, 0], norm.numpy(), rtol=1e-5)
    np.testing.assert_allclose(tr["features"][:, 1], x.norm(dim=(1, 2)).numpy(), rtol=1e-5)
    meta = json.loads(tr["meta"])
    assert meta["run"] == "tiny" and meta["routing_points"] == ["gate1", "gate2"] and meta["model"] == "TinyMoE"


def test_gate_logits_with_softmax_and_audit(tmp_path, model_and_data):
    model, x, y = model_and_data
    with torch.no_grad(), record_routing(model, routing=["gate1", ("gate2", lambda out: out)], softmax=True,
                                         routing_kind="depth") as rec:  # depth: so that rdv applies
        model(x)
        rec.add_labels(y)
    t = rec.arrays()
    np.testing.assert_allclose(t["routing"].sum(axis=2), 1.0, atol=1e-5)
    arcal.write_trace(str(tmp_path / "t.npz"), **t)
    r = arcal.audit([str(tmp_path / "t.npz")], permutations=100, probes=False)
    assert {x["statistic"] for x in r["diagnostic"]["tests"]} == {"re", "rdv"}


def test_hooks_removed_and_nothing_written_on_error(tmp_path, model_and_data):
    model, x, y = model_and_data
    path = tmp_path / "never.npz"
    with pytest.raises(RuntimeError, match="boom"):
        with record_routing(model, path, routing=["gate1"]):
            model(x[:10])
            raise RuntimeError("boom")
    assert not path.exists()
    assert not model.gate1._forward_hooks and not model._forward_hooks


def test_errors(model_and_data):
    model, x, y = model_and_data
    with pytest.raises(ValueError, match="the model has no module 'gate3'"):
        record_routing(model, routing=["gate3"]).__enter__()
    with pytest.raises(ValueError, match="5 labels were added"):
        with record_routing(model, routing=["gate1"]) as rec:
            with torch.no_grad():
                model(x[:10])
            rec.add_labels(y[:5])
        rec.arrays()
    with pytest.raises(ValueError, match="never ran"):
        with record_routing(model) as rec:
            pass
        rec.arrays()


class TinyCausalLM(nn.Module):
    """tokens [B, T] -> next-token logits [B, T, K]; one depth-routing point whose weights over 3
    sources (embedding, two block outputs) are computed per token, as an AttnRes point's are."""

    def __init__(self, vocab=16, width=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.block1 = nn.Linear(width, width)
        self.block2 = nn.Linear(width, width)
        self.route = nn.Sequential(nn.Linear(width, 3), nn.Softmax(dim=-1))
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        v0 = self.embed(tokens)
        v1 = torch.tanh(self.block1(torch.cumsum(v0, dim=1)))  # causal: a prefix sum
        v2 = torch.tanh(self.block2(v1))
        a = self.route(v2)  # [B, T, 3]
        h = a[..., 0:1] * v0 + a[..., 1:2] * v1 + a[..., 2:3] * v2
        return self.head(h)


def test_per_token_recording_writes_the_token_trace_layout_of_arcal_trace(tmp_path):
    torch.manual_seed(1)
    model = TinyCausalLM().eval()
    seq = torch.randint(0, 16, (12, 9))  # 12 sequences of 8 inputs + their next tokens
    path = tmp_path / "tokens.npz"
    with torch.no_grad():
        with record_routing(model, path, routing=["route"], routing_kind="depth", per_token=True) as rec:
            for i in range(0, 12, 5):
                model(seq[i:i + 5, :-1])
                rec.add_labels(seq[i:i + 5, 1:])
        logits = model(seq[:, :-1])
        weights = model.route(torch.tanh(model.block2(torch.tanh(model.block1(torch.cumsum(model.embed(seq[:, :-1]), 1))))))
    tr = arcal.read_trace(str(path))
    # The layout arcal trace writes for a language model (tests/train/test_lm_train.cpp): rows s * T + t.
    assert tr["logits"].shape == (96, 16)
    np.testing.assert_allclose(tr["logits"], logits.reshape(96, 16).numpy(), atol=1e-6)
    assert (tr["labels"] == seq[:, 1:].reshape(-1).numpy()).all()
    assert tr["cluster"].dtype == np.int64 and (tr["cluster"] == np.repeat(np.arange(12), 8)).all()
    assert tr["routing"].shape == (96, 1, 3)
    np.testing.assert_allclose(tr["routing"][:, 0, :], weights.reshape(96, 3).numpy(), atol=1e-6)
    w = weights.reshape(96, 3).numpy()
    np.testing.assert_allclose(tr["routing_entropy"][:, 0], -(w * np.log(w)).sum(1), atol=1e-5)
    np.testing.assert_allclose(tr["routing_depth_mean"][:, 0], w @ np.array([0, 0.5, 1]), atol=1e-6)
    meta = json.loads(str(tr["meta"]))
    assert meta["task"] == "lm" and meta["cluster"] == "sequence" and meta["sequences"] == 12
    # Document ids as clusters, and the errors of a mismatched recording.
    with torch.no_grad():
        with record_routing(model, routing=["route"], per_token=True) as rec:
            model(seq[:4, :-1])
            rec.add_labels(seq[:4, 1:])
            rec.add_clusters([7, 7, 3, 9])
            with pytest.raises(ValueError, match="sequences of one length"):
                model(seq[:4, :-2])
    assert (rec.arrays()["cluster"] == np.repeat([7, 7, 3, 9], 8)).all()
    moe = TinyMoE().eval()
    with pytest.raises(ValueError, match=r"\[B, T, K\]"):
        with torch.no_grad(), record_routing(moe, routing=["gate1"], per_token=True):
            moe(torch.randn(2, 5, 6))
