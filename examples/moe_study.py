"""The mixture-of-experts study in one command (issue 53): does a transformers MoE language model's router
say anything about how reliable its next-token predictions are, beyond what the predictions say?

    .venv/bin/python examples/moe_study.py --out runs/moe [--arcal build/arcal] [--minutes 4]
        [--arch mixtral,qwen2_moe] [--seed 0] [--vocab 4096] [--test-tokens 20000] [--topk auto]

Steps, each timed: the corpus (Debian's dict-gcide: one dictionary entry per document, documents of
unequal length, and a fixed seeded document split, the idea of arcal's own LM study in
src/io/text_corpus.cpp, though numpy's shuffle picks other test documents than arcal's), a byte-level
BPE tokenizer trained on the training documents only, then per architecture (transformers' config classes, random init, a few million
parameters): train for --minutes with AdamW on padded batches of whole documents (attention masks,
label -100 at padding and at each document's last token), trace the test documents with
arcal.torch_hooks.record_routing(routing="auto", per_token=True) (each document a cluster), and run
the arcal CLI: `arcal metrics TRACE --json`, `arcal audit TRACE --out DIR/ARCH/audit`, `arcal report`.
Writes DIR/config.json (everything the run depends on), DIR/tokenizer.json, DIR/ARCH/{trace.npz,
m.json, train_log.jsonl, audit/, audit/report/, metrics_report/}, DIR/summary.json, and prints a table.
Documents are cut to --context tokens. The trace covers the first test documents (in the split's order)
until --test-tokens next-token examples (20,000 by default: the audit's probes and permutations grow
with N, 28 s per architecture at 20,000 tokens and K = 258 on one 2-core machine; the whole test split
holds 6,312 documents, up to 0.8 M tokens when cut to 128). Training runs for a time budget, so its
step count depends on the machine: summary.json records the steps, and --steps N replays exactly that
many (the same batches and updates, for a given seed).
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, ".."))
CORPUS = "/usr/share/dictd/gcide.dict.dz"
ARCHS = ("mixtral", "qwen2_moe")
VERDICTS = ("present", "negligible", "absent", "undetected", "not assessed")
SPLIT_SEED = 0x6C1DE  # the corpus' own split, the same for every run seed (src/data/tensor_data.hpp)
PAD, EOS = "<pad>", "<eos>"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path, obj):
    write_atomic(path, json.dumps(obj, indent=2) + "\n")


def read_corpus(dict_path):
    """dictd corpus -> list of documents (one entry each, in file order): the entries the index names
    (headword TAB base-64 offset TAB base-64 length), without dictd's own 00-database-* header entries,
    each span once, as src/io/text_corpus.cpp reads it."""
    index_path = dict_path[:-len(".dict.dz")] + ".index" if dict_path.endswith(".dict.dz") else dict_path + ".index"
    for path in (dict_path, index_path):
        if not os.path.exists(path):
            sys.exit(f"moe_study: {path} is missing: the corpus is Debian's dict-gcide (apt-get install dict-gcide)")
    with open(dict_path, "rb") as f:
        text = gzip.decompress(f.read())  # dictzip is gzip with a random-access table in an extra field
    digits = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}

    def number(s, where):
        v = 0
        for ch in s:
            if ch not in digits:
                sys.exit(f"moe_study: {where}: '{s}' is not a dictd base-64 number")
            v = v * 64 + digits[ch]
        return v

    spans = set()
    with open(index_path, encoding="utf-8", errors="replace") as f:
        for number_, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0].startswith("00-database"):
                continue
            where = f"{index_path}: line {number_}"
            off, length = number(parts[1], where), number(parts[2], where)
            if off + length > len(text):
                sys.exit(f"moe_study: {where}: bytes {off}..{off + length} lie outside the {len(text)}-byte text of "
                         f"{dict_path} (truncated file, or index and text of different versions)")
            if length > 0:
                spans.add((off, length))
    return [text[o:o + n].decode("utf-8", errors="replace").strip() for o, n in sorted(spans)]


def split_documents(n, test_fraction, seed):
    """A fixed, seeded split of document indices: (train, test), each sorted."""
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def train_tokenizer(docs, vocab, path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[PAD, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    tmp = f"{path}.tmp{os.getpid()}"
    tok.save(tmp)
    os.replace(tmp, path)
    return tok


def build_model(arch, vocab, cfg):
    import transformers
    common = dict(vocab_size=vocab, hidden_size=cfg["hidden"], intermediate_size=2 * cfg["hidden"],
                  num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"], num_key_value_heads=cfg["heads"] // 2,
                  num_experts_per_tok=cfg["top_k"], max_position_embeddings=cfg["context"], pad_token_id=0,
                  bos_token_id=None, eos_token_id=1)
    if arch == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(num_local_experts=cfg["experts"], **common))
    if arch == "qwen2_moe":
        return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
            num_experts=cfg["experts"], moe_intermediate_size=2 * cfg["hidden"],
            shared_expert_intermediate_size=2 * cfg["hidden"], **common))
    sys.exit(f"moe_study: --arch {arch} is not one of {', '.join(ARCHS)}")


def encode(tok, docs, context):
    """Documents -> token id lists, each ending with <eos>, cut to `context` tokens."""
    eos = tok.token_to_id(EOS)
    return [(e.ids + [eos])[:context] for e in tok.encode_batch(docs)]


def padded_batch(seqs):
    """Token lists -> input_ids, attention_mask [B, T] (T: the longest) and labels [B, T]: the next token,
    -100 at a document's last token and at padding."""
    import torch
    t = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), t, dtype=torch.int64)
    mask = torch.zeros(len(seqs), t, dtype=torch.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = torch.where(mask[:, 1:] == 1, ids[:, 1:], torch.full_like(ids[:, 1:], -100))
    return ids, mask, labels


def train(model, tok, docs, train_idx, cfg, seed, seconds, steps, log_path):
    """AdamW on padded batches of random training documents until `seconds` pass (or `steps` are done)."""
    import torch
    rng = np.random.default_rng(seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01, betas=(0.9, 0.95))
    model.train()
    start, step, lines = time.time(), 0, []
    last = start
    while (steps is None and time.time() - start < seconds) or (steps is not None and step < steps):
        batch = [docs[i] for i in rng.choice(train_idx, cfg["batch"], replace=False)]
        ids, mask, labels = padded_batch(encode(tok, batch, cfg["context"]))
        lr = cfg["lr"] * min(1.0, (step + 1) / cfg["warmup"])
        for group in opt.param_groups:
            group["lr"] = lr
        out = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
        ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]).float(),
                                               labels.reshape(-1), ignore_index=-100)
        loss = ce + model.config.router_aux_loss_coef * out.aux_loss if out.aux_loss is not None else ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ce = float(ce.detach())
        step += 1
        now = time.time()
        lines.append(json.dumps({"step": step, "loss": round(ce, 5), "lr": lr, "elapsed": round(now - start, 2)}))
        if now - last >= 10 or step == 1:
            log(f"  step {step:5d}  loss {ce:.4f}  elapsed {now - start:6.1f} s")
            last = now
    model.eval()
    write_atomic(log_path, "\n".join(lines) + "\n")
    return step, ce if step else None


def trace(model, tok, docs, test_idx, cfg, path, topk, test_tokens):
    """The first test documents (in split order) until `test_tokens` next-token examples: each a cluster."""
    import torch

    import arcal.torch_hooks as th
    seqs, kept, taken = [], 0, []
    for chunk in range(0, len(test_idx), 256):
        if kept >= test_tokens:
            break
        part = test_idx[chunk:chunk + 256]
        for i, s in zip(part, encode(tok, [docs[i] for i in part], cfg["context"])):
            if len(s) < 2 or kept >= test_tokens:
                continue
            seqs.append(s)
            taken.append(int(i))
            kept += len(s) - 1
    with torch.no_grad(), th.record_routing(model, path, routing="auto", per_token=True, topk=topk,
                                            meta={"study": "examples/moe_study.py", "dataset": "gcide",
                                                  "split": "test"}) as rec:
        for b in range(0, len(seqs), cfg["batch"]):
            ids, mask, labels = padded_batch(seqs[b:b + cfg["batch"]])
            model(input_ids=ids, attention_mask=mask)
            rec.add_labels(labels)
            rec.add_clusters(torch.tensor(taken[b:b + cfg["batch"]]))
    return kept, len(seqs)


def run_cli(arcal, args, stdout_path=None):
    """arcal ARGS (an argument list, no shell); stdout to stdout_path (atomically) when given."""
    proc = subprocess.run([arcal, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"moe_study: `arcal {' '.join(args)}` exited {proc.returncode}:\n{proc.stderr.strip()}")
    if stdout_path:
        write_atomic(stdout_path, proc.stdout)
    return proc.stdout


def find_cli(given):
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            sys.exit(f"moe_study: --arcal {given} is not an executable file")
        return os.path.abspath(given)
    for c in (shutil.which("arcal"), os.path.join(SOURCE, "build", "arcal")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit(f"moe_study: no arcal CLI (not on PATH, not {os.path.join(SOURCE, 'build', 'arcal')}); pass --arcal PATH")


def parse_topk(value):
    if value in ("auto", "none", "None", "full"):
        return None if value in ("none", "None", "full") else "auto"
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--topk {value!r}: 'auto', 'none' (full logits) or an integer k >= 2")
    if k < 2:
        raise argparse.ArgumentTypeError(f"--topk {k}: k must be >= 2")
    return k


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--arcal", help="the arcal CLI (default: on PATH, else build/arcal)")
    ap.add_argument("--minutes", type=float, default=4.0, help="training budget per architecture (4)")
    ap.add_argument("--steps", type=int, help="train exactly this many steps instead (replays a run)")
    ap.add_argument("--arch", default=",".join(ARCHS), help=f"comma-separated: {', '.join(ARCHS)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary size (4096)")
    ap.add_argument("--test-tokens", type=int, default=20000,
                    help="next-token examples traced from the test documents (20000; the audit's cost grows with it)")
    ap.add_argument("--topk", type=parse_topk, default="auto",
                    help="trace outputs: auto (top-32 form when the vocabulary exceeds 1024), none (full logits), or k")
    ap.add_argument("--context", type=int, default=128, help="tokens per document at most (128)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--top-k-experts", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--tokenizer-docs", type=int, default=40000,
                    help="training documents the tokenizer learns from (the first ones of the training split)")
    ap.add_argument("--test-fraction", type=float, default=0.05)
    ap.add_argument("--permutations", type=int, default=2000, help="the audit's diagnostic permutations (2000)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (0: torch's default); on a shared machine 1 avoids OpenMP threads waiting for a "
                         "core another process holds")
    ap.add_argument("--corpus", default=CORPUS)
    a = ap.parse_args(argv)

    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)

    import arcal
    archs = [s.strip() for s in a.arch.split(",") if s.strip()]
    for arch in archs:
        if arch not in ARCHS:
            sys.exit(f"moe_study: --arch {arch} is not one of {', '.join(ARCHS)}")
    cli = find_cli(a.arcal)
    os.makedirs(a.out, exist_ok=True)
    cfg = {"schema": "moe_study.config/1", "out": os.path.abspath(a.out), "arcal": cli, "archs": archs,
           "minutes": a.minutes, "steps": a.steps, "seed": a.seed, "vocab": a.vocab, "test_tokens": a.test_tokens,
           "topk": a.topk, "context": a.context, "batch": a.batch, "hidden": a.hidden, "layers": a.layers,
           "heads": 4, "experts": a.experts, "top_k": a.top_k_experts, "lr": a.lr, "warmup": 50,
           "tokenizer_docs": a.tokenizer_docs, "test_fraction": a.test_fraction, "split_seed": SPLIT_SEED,
           "permutations": a.permutations, "corpus": a.corpus, "torch": torch.__version__,
           "transformers": __import__("transformers").__version__, "tokenizers": __import__("tokenizers").__version__,
           "arcal_version": arcal.__version__, "threads": torch.get_num_threads()}
    write_json(os.path.join(a.out, "config.json"), cfg)
    log("moe_study configuration:")
    for key in ("archs", "minutes", "steps", "seed", "vocab", "test_tokens", "topk", "context", "batch", "hidden",
                "layers", "experts", "top_k", "lr", "permutations", "threads", "arcal"):
        log(f"  {key:14s} {cfg[key]}")

    t0 = time.time()
    docs = read_corpus(a.corpus)
    train_idx, test_idx = split_documents(len(docs), a.test_fraction, SPLIT_SEED)
    corpus_s = time.time() - t0
    log(f"corpus: {len(docs)} documents ({len(train_idx)} train, {len(test_idx)} test), {corpus_s:.1f} s")
    t0 = time.time()
    tok = train_tokenizer([docs[i] for i in train_idx[:a.tokenizer_docs]], a.vocab,
                          os.path.join(a.out, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    tokenizer_s = time.time() - t0
    log(f"tokenizer: byte-level BPE, {vocab} tokens, {tokenizer_s:.1f} s")

    rows = []
    for arch in archs:
        d = os.path.join(a.out, arch)
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(a.seed)
        model = build_model(arch, vocab, cfg)
        params = sum(p.numel() for p in model.parameters())
        log(f"{arch}: {params / 1e6:.2f} M parameters; training ({a.steps} steps)" if a.steps else
            f"{arch}: {params / 1e6:.2f} M parameters; training for {a.minutes} min")
        wall = {}
        t0 = time.time()
        steps, loss = train(model, tok, docs, train_idx, cfg, a.seed, a.minutes * 60, a.steps,
                            os.path.join(d, "train_log.jsonl"))
        wall["train"] = time.time() - t0
        trace_path = os.path.join(d, "trace.npz")
        row = {"arch": arch, "parameters": params, "steps": steps, "final_train_loss": loss,
               "train_minutes": wall["train"] / 60, "trace": trace_path}
        try:
            t0 = time.time()
            try:
                tokens, documents = trace(model, tok, docs, test_idx, cfg, trace_path, a.topk, a.test_tokens)
            except ValueError as e:  # e.g. a CLI/module that does not write the top-k form yet
                raise RuntimeError(f"moe_study: tracing {arch} failed: {e}") from e
            wall["trace"] = time.time() - t0
            row.update(test_tokens=tokens, test_documents=documents)
            log(f"{arch}: trained {steps} steps (last loss {loss if loss is None else round(loss, 4)}); traced "
                f"{tokens} test tokens in {documents} documents, {wall['trace']:.1f} s")
            t0 = time.time()
            m = json.loads(run_cli(cli, ["metrics", trace_path, "--json"], os.path.join(d, "m.json")))
            wall["metrics"] = time.time() - t0
            row.update(accuracy=m["accuracy"], ece=m["ece"], nll=m["nll"], ece_ci=m["ci"].get("ece"))
            audit_dir = os.path.join(d, "audit")
            t0 = time.time()
            run_cli(cli, ["audit", trace_path, "--out", audit_dir, "--force", "--quiet", "--seed", str(a.seed),
                          "--permutations", str(a.permutations)])
            wall["audit"] = time.time() - t0
            with open(os.path.join(audit_dir, "results.json")) as f:
                results = json.load(f)
            verdict = results["verdict"]
            run0 = results["runs"][0]
            row.update(verdict=verdict["answer"], verdict_summary=verdict["summary"],
                       beyond_outputs={k: verdict["beyond_outputs"].get(k) for k in ("test", "status", "p", "effect")},
                       outputs=run0.get("outputs"), class_explained=run0.get("class_explained"),
                       router_entropy=[layer["router_entropy"] for layer in (run0.get("experts") or {}).get("layers", [])])
            t0 = time.time()
            run_cli(cli, ["report", audit_dir, "--quiet", "--force"])
            run_cli(cli, ["report", os.path.join(d, "m.json"), "--out", os.path.join(d, "metrics_report"), "--quiet",
                          "--force"])
            wall["report"] = time.time() - t0
        except RuntimeError as e:
            row["error"] = str(e)
            log(str(e))
        row["wall_seconds"] = {k: round(v, 2) for k, v in wall.items()}
        rows.append(row)
        del model

    summary = {"schema": "moe_study.summary/1", "config": "config.json", "corpus_documents": len(docs),
               "train_documents": len(train_idx), "test_documents": len(test_idx), "vocab": vocab,
               "wall_seconds": {"corpus": round(corpus_s, 2), "tokenizer": round(tokenizer_s, 2)}, "runs": rows}
    write_json(os.path.join(a.out, "summary.json"), summary)
    head = "| arch | params | steps | train min | test tokens | accuracy | ECE | verdict | train s | trace s | " \
           "metrics s | audit s | report s |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        w = r["wall_seconds"]

        def f(v, fmt):
            return format(v, fmt) if isinstance(v, (int, float)) else "—"
        print(f"| {r['arch']} | {r['parameters'] / 1e6:.2f} M | {r['steps']} | {r['train_minutes']:.2f} | "
              f"{r.get('test_tokens', '—')} | {f(r.get('accuracy'), '.4f')} | {f(r.get('ece'), '.4f')} | "
              f"{r.get('verdict', 'error')} | " + " | ".join(f(w.get(k), ".1f") for k in
                                                             ("train", "trace", "metrics", "audit", "report")) + " |")
    print(f"summary: {os.path.join(a.out, 'summary.json')}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
