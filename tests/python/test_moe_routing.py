"""record_routing(routing="auto") on mixture-of-experts models (issue 53, item 2 in part): the routers of
transformers' Mixtral, Qwen2-MoE and OLMoE (built from their config classes, random weights, nothing
downloaded) and of a plain nn.Module MoE are found, one routing point per layer named by module path;
the recorded weights are the dense router distribution, equal to the softmax of the router logits the
model itself returns (output_router_logits=True); logits and probabilities are told apart; a model
without a router, or with two candidates, is refused with a message that says what to pass."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
th = pytest.importorskip("arcal.torch_hooks")
transformers = pytest.importorskip("transformers")


def tiny(kind):
    torch.manual_seed(0)
    common = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, num_experts_per_tok=2)
    if kind == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(num_local_experts=4, **common)).eval()
    if kind == "qwen2_moe":
        return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
            num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=32, **common)).eval()
    return transformers.OlmoeForCausalLM(transformers.OlmoeConfig(num_experts=4, eos_token_id=None, **common)).eval()


@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe", "olmoe"])
def test_transformers_routers_are_found_and_recorded_as_the_dense_distribution(kind):
    model = tiny(kind)
    assert th.find_routers(model) == [("model.layers.0.mlp.gate", 4), ("model.layers.1.mlp.gate", 4)]
    x = torch.randint(0, 300, (3, 10), generator=torch.Generator().manual_seed(1))
    with th.record_routing(model, None, routing="auto", per_token=True) as rec:
        with torch.no_grad():
            out = model(x, output_router_logits=True)
        rec.add_labels(torch.roll(x, -1, dims=1))
    a = rec.arrays()
    assert a["routing"].shape == (30, 2, 4) and list(a["routing_sources"]) == [4, 4]
    meta = json.loads(str(a["meta"]))
    assert meta["routing_points"] == ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    router = meta["routers"]["model.layers.0.mlp.gate"]
    assert router["experts"] == 4 and router["output"] == "logits"
    assert router["selection"] == "top-2 weights returned by the router"
    for layer in range(2):  # the model's own router logits, [B*T, E] example-major
        ref = torch.softmax(out.router_logits[layer].float(), dim=-1).numpy()
        np.testing.assert_allclose(a["routing"][:, layer, :], ref, atol=1e-6)
    assert list(a["cluster"]) == list(np.repeat(np.arange(3), 10))
    # The experts the model used: its top-2 of the dense distribution with their gate weights (Mixtral and
    # OLMoE renormalise them to sum 1 where configured; Qwen2-MoE does not by default), 0 elsewhere.
    sel = a["routing_selected"]
    assert sel.shape == a["routing"].shape
    assert np.all((sel > 0).sum(axis=2) == 2)
    top2 = np.sort(a["routing"], axis=2)[:, :, -2:]
    got = np.sort(sel, axis=2)[:, :, -2:]
    renorm = bool(getattr(model.config, "norm_topk_prob", True))
    want = top2 / top2.sum(axis=2, keepdims=True) if renorm else top2
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert "routing_selected" in meta["statistics_read"] and "selection" in meta["routers"]["model.layers.0.mlp.gate"]


class PlainMoE(torch.nn.Module):
    """A classifier with one MoE block per layer under nested names (blocks.N.moe.router): the router is a
    Linear that emits logits, the experts a ModuleList; a Linear 'proj' of another width stays out."""

    def __init__(self, d=16, experts=3, layers=2, classes=5, probs=False):
        super().__init__()
        self.probs = probs
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            block = torch.nn.Module()
            block.moe = torch.nn.Module()
            block.moe.router = torch.nn.Sequential(torch.nn.Linear(d, experts), torch.nn.Softmax(-1)) if probs \
                else torch.nn.Linear(d, experts)
            block.moe.experts = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(experts))
            block.moe.proj = torch.nn.Linear(d, d)
            self.blocks.append(block)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x):
        for block in self.blocks:
            g = block.moe.router(x)
            w = g if self.probs else torch.softmax(g, -1)
            x = x + sum(w[:, e:e + 1] * ex(x) for e, ex in enumerate(block.moe.experts))
        return self.head(x)


def test_a_plain_module_moe_with_nested_names_and_logits_or_probabilities():
    torch.manual_seed(0)
    for probs in (False, True):
        model = PlainMoE(probs=probs)
        if probs:  # a Sequential router has no width of its own: find_routers finds none, and says so
            with pytest.raises(ValueError, match="found no router"):
                th.record_routing(model, None, routing="auto").__enter__()
            continue
        assert th.find_routers(model) == [("blocks.0.moe.router", 3), ("blocks.1.moe.router", 3)]
        x = torch.randn(8, 16)
        with th.record_routing(model, None, routing="auto") as rec:
            with torch.no_grad():
                model(x)
            rec.add_labels(torch.zeros(8, dtype=torch.int64))
        a = rec.arrays()
        want = torch.softmax(model.blocks[0].moe.router(x), -1).detach().numpy()
        np.testing.assert_allclose(a["routing"][:, 0, :3], want, atol=1e-6)
        assert json.loads(str(a["meta"]))["routers"]["blocks.0.moe.router"]["output"] == "logits"
        assert "routing_selected" not in a  # a dense mixture: every expert is used with its dense weight


def test_probabilities_are_recorded_as_given_and_ambiguity_is_refused():
    torch.manual_seed(0)
    model = PlainMoE()
    x = torch.randn(6, 16)
    # A router module that already emits probabilities (softmax="auto" tells them apart).
    with th.record_routing(model, None, routing=[("blocks.0.moe.router", lambda o: torch.softmax(o, -1))],
                           softmax="auto") as rec:
        with torch.no_grad():
            model(x)
        rec.add_labels(torch.zeros(6, dtype=torch.int64))
    assert json.loads(str(rec.arrays()["meta"]))["routers"]["blocks.0.moe.router"]["output"] == "probabilities"
    # Two children as wide as the experts are many, neither named like a router: refused, naming both.
    model.blocks[0].moe.proj = torch.nn.Linear(16, 3)
    model.blocks[0].moe.router2 = model.blocks[0].moe.router
    del model.blocks[0].moe.router
    with pytest.raises(ValueError, match="several children of width 3"):
        th.find_routers(model)


def test_a_model_without_routers_is_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="routing='auto' found no router.*pass routing="):
        th.record_routing(torch.nn.Linear(4, 3), None, routing="auto").__enter__()


def test_padded_documents_keep_only_their_tokens():
    """Documents of unequal length in one padded batch (issue 53): tokens whose attention mask is 0 are not
    examples, label -100 (transformers' "no target": the last token of a document) drops the position, each
    document is one cluster, and every kept row equals the row of the document run alone."""
    model = tiny("mixtral")
    g = torch.Generator().manual_seed(3)
    docs = [torch.randint(0, 300, (10,), generator=g), torch.randint(0, 300, (6,), generator=g)]
    ids = torch.zeros(2, 10, dtype=torch.int64)
    mask = torch.zeros(2, 10, dtype=torch.int64)
    labels = torch.full((2, 10), -100, dtype=torch.int64)
    for i, d in enumerate(docs):
        ids[i, :len(d)] = d
        mask[i, :len(d)] = 1
        labels[i, :len(d) - 1] = d[1:]
    with th.record_routing(model, None, routing="auto", per_token=True) as rec:
        with torch.no_grad():
            model(ids, attention_mask=mask)
        rec.add_labels(labels)
    a = rec.arrays()
    assert a["logits"].shape == (9 + 5, 300)
    assert list(a["cluster"]) == [0] * 9 + [1] * 5
    assert list(a["labels"]) == docs[0][1:].tolist() + docs[1][1:].tolist()
    meta = json.loads(str(a["meta"]))
    assert meta["ignored_labels"] == 2 and "attention_mask" in meta
    alone = []
    for d in docs:
        with th.record_routing(model, None, routing="auto", per_token=True) as one:
            with torch.no_grad():
                model(d[None])
            one.add_labels(torch.zeros(1, len(d), dtype=torch.int64))
        alone.append(one.arrays())
    want_routing = np.concatenate([alone[0]["routing"][:9], alone[1]["routing"][:5]])
    np.testing.assert_allclose(a["routing"], want_routing, atol=1e-5)
    want_logits = np.concatenate([alone[0]["logits"][:9], alone[1]["logits"][:5]])
    np.testing.assert_allclose(a["logits"], want_logits, atol=1e-4)
    # A mask that does not match the logits is refused, naming both shapes.
    with pytest.raises(ValueError, match="attention mask has shape"):
        with th.record_routing(model, None, routing="auto", per_token=True) as rec:
            with torch.no_grad():
                model(ids, attention_mask=mask[:, :5].contiguous().repeat(1, 2)[:, :9])
