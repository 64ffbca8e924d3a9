"""What recording a mixture-of-experts language model costs (issue 53): time beside the plain forward, and
memory at a real vocabulary.

usage: PYTHONPATH=build/python .venv/bin/python bench/bench_moe_recording.py [--arcal build/arcal]
           [--repeats 5] [--batches 12] [--vocab 4096] [--tokens 1000000] [--classes 32000] [--threads 1]
           [--csv F] [--skip-overhead] [--skip-memory]

(1) Overhead: a transformers Mixtral (random init, a few million parameters, vocabulary --vocab) runs
forward over a fixed set of padded batches of documents of unequal length (attention masks), without
hooks and inside record_routing(routing="auto", per_token=True) with add_labels per batch, once with
topk="auto" (at --vocab 4096 > 1024 the top-32 form: the per-token top-k summaries are part of the
cost) and once with topk=None (full logits, copied to the CPU per batch); the three are interleaved
--repeats times and the medians compared (goal: ratio <= 1.10). arrays() (the trace's assembly, once
at the end) is timed on its own.
(2) Memory: a child process records a synthetic stream of --tokens tokens at K = --classes (random
logits made per batch of 1024 tokens by a trivial module with one router, so no N x K array ever
exists), in the top-k form, and writes the trace; its peak RSS (getrusage RUSAGE_SELF ru_maxrss) is
the number (goal < 2 GB). Then a small wrapper process (no torch) runs `arcal metrics TRACE --json` and
reports that process's peak RSS (RUSAGE_CHILDREN: its only child); a build whose trace reader does not know the top-k
form rejects the file, and that part is reported as skipped with the CLI's message.
Prints a markdown table; --csv F also writes it as CSV.
"""
import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, ".."))


# Model sizes of the overhead measurement: the recording's per-token cost is fixed by the vocabulary (a
# softmax, a top-k and two sums over K), so its share of the forward falls as the model grows.
SIZES = {"small": dict(hidden_size=128, intermediate_size=256, num_attention_heads=4),
         "medium": dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8)}


def mixtral(vocab, size="small"):
    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=vocab, num_hidden_layers=4, num_key_value_heads=2,
                                        num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=256,
                                        **SIZES[size])
    return transformers.MixtralForCausalLM(config).eval()


def fixed_batches(vocab, count, batch=8, seed=1):
    """`count` padded batches of `batch` documents of 16..128 tokens: (input_ids, attention_mask, labels)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        lengths = torch.randint(16, 129, (batch,), generator=g).tolist()
        t = max(lengths)
        ids = torch.zeros(batch, t, dtype=torch.int64)
        mask = torch.zeros(batch, t, dtype=torch.int64)
        for i, n in enumerate(lengths):
            ids[i, :n] = torch.randint(0, vocab, (n,), generator=g)
            mask[i, :n] = 1
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = torch.where(mask[:, 1:] == 1, ids[:, 1:], torch.full_like(ids[:, 1:], -100))
        out.append((ids, mask, labels))
    return out


def overhead(a, size):
    import torch

    import arcal.torch_hooks as th
    model = mixtral(a.vocab, size)
    params = sum(p.numel() for p in model.parameters())
    batches = fixed_batches(a.vocab, a.batches)
    tokens = sum(int(m.sum()) for _, m, _ in batches)

    def plain():
        t0 = time.perf_counter()
        with torch.no_grad():
            for ids, mask, _ in batches:
                model(input_ids=ids, attention_mask=mask)
        return time.perf_counter() - t0

    def recorded(form):
        # "auto-torch": the top-k form with the summaries on torch's ops instead of arcal's kernel
        # (src/ops/topk_summary.hpp), the kernel's reference, measured beside it.
        th._FORCE_TORCH_TOPK = form == "auto-torch"
        topk = "auto" if form == "auto-torch" else form
        t0 = time.perf_counter()
        with torch.no_grad(), th.record_routing(model, None, routing="auto", per_token=True, topk=topk) as rec:
            for ids, mask, labels in batches:
                model(input_ids=ids, attention_mask=mask)
                rec.add_labels(labels)
        t1 = time.perf_counter()
        arr = rec.arrays()
        th._FORCE_TORCH_TOPK = False
        return t1 - t0, time.perf_counter() - t1, arr

    forms = {"auto": "topk", "auto-torch": "topk", None: "full"}
    plain()  # warm-up: allocator, kernels
    for topk in forms:
        recorded(topk)
    base, rec_s, asm_s, meta = [], {f: [] for f in forms}, {f: [] for f in forms}, {}
    for r in range(a.repeats):  # interleaved, so that load from elsewhere falls on every variant alike
        base.append(plain())
        for topk in forms:
            s, asm, arr = recorded(topk)
            rec_s[topk].append(s)
            asm_s[topk].append(asm)
            meta[topk] = json.loads(str(arr["meta"]))["outputs"]
        print(f"  repeat {r + 1}/{a.repeats}: plain {base[-1]:.3f} s, recorded top-k {rec_s['auto'][-1]:.3f} s "
              f"(torch ops {rec_s['auto-torch'][-1]:.3f} s), full {rec_s[None][-1]:.3f} s", file=sys.stderr)
    mb = statistics.median(base)
    rows = [("overhead: params", f"{params / 1e6:.2f} M"), ("overhead: tokens per pass", tokens),
            ("overhead: plain forward, median s", f"{mb:.3f}"), ("overhead: tokens/s plain", f"{tokens / mb:,.0f}")]
    rows = [(f"{size} model, " + k, v) for k, v in rows]
    for topk in forms:
        o = meta[topk]
        name = f"top-{o['k']} of K={o['classes']}" if o["form"] == "topk" else f"full logits, K={o['classes']}"
        if topk == "auto-torch":
            name += ", summaries on torch ops"
        mr = statistics.median(rec_s[topk])
        rows += [(f"{size} model, overhead: recorded ({name}), median s", f"{mr:.3f}"),
                 (f"{size} model, overhead: ratio ({name}; goal <= 1.10)", f"{mr / mb:.3f}"),
                 (f"{size} model, overhead: tokens/s recorded ({name})", f"{tokens / mr:,.0f}"),
                 (f"{size} model, overhead: per-token cost of recording ({name}), µs",
                  f"{1e6 * (mr - mb) / tokens:.1f}"),
                 (f"{size} model, overhead: arrays() ({name}), median s", f"{statistics.median(asm_s[topk]):.3f}")]
    return rows


# The memory child: a trivial module whose forward runs one router (a Linear beside 4 experts) on its
# input and returns the logits it is handed, so record_routing has a routing point and the logits of one
# batch are the only [tokens, K] tensor alive.
CHILD = r'''
import json, os, resource, subprocess, sys, time
import torch
import arcal.torch_hooks as th

tokens, classes, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(int(sys.argv[5]))

class Stream(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.moe = torch.nn.Module()
        self.moe.router = torch.nn.Linear(16, 4)
        self.moe.experts = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, h, logits):   # h [B, T, 16], logits [B, T, K]
        self.moe.router(h)
        return logits

torch.manual_seed(0)
model = Stream()
g = torch.Generator().manual_seed(1)
b, t = 8, 128                       # 1024 tokens per batch
t0 = time.time()
make_s = 0.0
with torch.no_grad(), th.record_routing(model, None, routing="auto", per_token=True) as rec:
    done = 0
    while done < tokens:
        n = min(b, (tokens - done + t - 1) // t)
        t1 = time.time()
        z = torch.empty(n, t, classes).normal_(0.0, 3.0, generator=g)   # in place: one [n, t, K] buffer
        h = torch.randn(n, t, 16, generator=g)
        y = torch.randint(0, classes, (n, t), generator=g)
        make_s += time.time() - t1
        model(h, z)
        rec.add_labels(y)
        del z                       # the model's logits die with the batch, as in a real forward loop
        done += n * t
record_s = time.time() - t0
out = {"tokens": done, "record_s": record_s - make_s, "make_s": make_s}
t0 = time.time()
arr = rec.arrays()
out["arrays_s"] = time.time() - t0
out["arrays_mb"] = sum(v.nbytes for v in arr.values() if hasattr(v, "nbytes")) / 2**20
del arr
t0 = time.time()
try:
    rec.write(path)
    out["write_s"] = time.time() - t0
    out["trace_mb"] = os.path.getsize(path) / 2**20
except Exception as e:
    out["write_error"] = str(e).splitlines()[0][:300]
out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
'''

# `arcal metrics` is started from this small process (no torch): a child's ru_maxrss counts what it
# inherited at fork, so started from the recording process it would report that process's peak.
METRICS = r'''
import json, resource, subprocess, sys, time
t0 = time.time()
p = subprocess.run([sys.argv[1], "metrics", sys.argv[2], "--json"], capture_output=True, text=True)
out = {"metrics_s": time.time() - t0, "wrapper_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if p.returncode == 0:
    out["metrics_maxrss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    m = json.loads(p.stdout)
    out["metrics_n"], out["metrics_nll"] = m["n"], m["nll"]
else:
    out["metrics_error"] = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:300]
print(json.dumps(out))
'''


def memory(a, cli):
    tmp = tempfile.mkdtemp(prefix="arcal_moe_bench_")
    try:
        path = os.path.join(tmp, "stream.npz")
        p = subprocess.run([sys.executable, "-c", CHILD, str(a.tokens), str(a.classes), path, "",
                            str(a.threads)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"bench_moe_recording: the recording child failed:\n{p.stderr[-3000:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        if "write_error" not in r and cli:
            q = subprocess.run([sys.executable, "-c", METRICS, cli, path], capture_output=True, text=True)
            if q.returncode != 0:
                raise SystemExit(f"bench_moe_recording: the metrics wrapper failed:\n{q.stderr[-3000:]}")
            r.update(json.loads(q.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [("memory: tokens x classes", f"{r['tokens']:,} x {a.classes:,}"),
            ("memory: recording s (without making the logits)", f"{r['record_s']:.1f}"),
            ("memory: making the random logits s", f"{r['make_s']:.1f}"), ("memory: arrays() s", f"{r['arrays_s']:.1f}"),
            ("memory: arrays MB", f"{r['arrays_mb']:.0f}"),
            ("memory: recording peak RSS MB (goal < 2048)", f"{r['maxrss_mb']:.0f}")]
    if "write_error" in r:
        rows.append(("memory: write", f"skipped: {r['write_error']}"))
    else:
        rows += [("memory: write s", f"{r['write_s']:.1f}"), ("memory: trace MB", f"{r['trace_mb']:.0f}")]
        if "metrics_maxrss_mb" in r:
            rows += [("memory: arcal metrics s", f"{r['metrics_s']:.1f}"),
                     ("memory: arcal metrics peak RSS MB", f"{r['metrics_maxrss_mb']:.0f}"),
                     ("memory: arcal metrics n, nll", f"{r['metrics_n']}, {r['metrics_nll']:.4f}")]
        elif cli:
            rows.append(("memory: arcal metrics", f"skipped: the CLI rejects the file: {r.get('metrics_error')}"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arcal", default=os.path.join(SOURCE, "build", "arcal"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=1000000)
    ap.add_argument("--classes", type=int, default=32000)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared 2-core machine a second OpenMP thread that loses its core "
                         "to another process made the top-k summaries 10x slower, 1.5 s against 0.16 s per batch)")
    ap.add_argument("--csv")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--sizes", default="small,medium",
                    help="model sizes of the overhead rows: small (hidden 128, ~4 M parameters at --vocab 4096), "
                         "medium (hidden 512, 57 M); comma-separated")
    a = ap.parse_args()
    cli = a.arcal if os.path.isfile(a.arcal) else None
    if cli is None:
        print(f"({a.arcal} not found: no `arcal metrics` memory row)", file=sys.stderr)
    import torch
    torch.set_num_threads(a.threads)
    rows = [("machine", f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads")]
    if not a.skip_overhead:
        for size in a.sizes.split(","):
            if size not in SIZES:
                sys.exit(f"bench_moe_recording: --sizes: unknown size '{size}' (choose from {', '.join(SIZES)})")
            rows += overhead(a, size)
    if not a.skip_memory:
        rows += memory(a, cli)
    print("| quantity | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    if a.csv:
        tmp = a.csv + ".tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["quantity", "value"])
            w.writerows(rows)
        os.replace(tmp, a.csv)


if __name__ == "__main__":
    main()
