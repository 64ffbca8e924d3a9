#!/usr/bin/env python3
"""Training-throughput benchmark: arcal's C++ trainer against an independent PyTorch (Python)
implementation of the same AR-ViT-tiny recipe, same batch, same threads, in one run: the reference in
eager mode and under torch.compile (the loss function compiled whole, default mode; compilation happens
in warm-up steps that are not timed).

The Python side trains the reference model of tests/reference/attnres_ref.py (written from
method.md, stacking and RMS-normalising every source at every routing point, as a straightforward
implementation does) with the same loss (CE + 0.5 SB-ECE), AdamW, crop+flip augmentation and
Fashion-MNIST batches. Both sides time optimizer steps only (data loading and evaluation excluded).

Both precisions in one run (--precision fp32 bf16, the default): arcal's --precision bf16 (autocast of
the forward pass, routing softmax and loss in fp32) against the reference under
torch.autocast("cpu", dtype=torch.bfloat16) around its forward pass, the loss in fp32 likewise.

Usage: bench_train.py [--arcal build/arcal] [--steps 60] [--threads 1] [--residual full]
                      [--precision fp32 bf16] [--reference eager compile] [--repeats 1]
Prints images/s of each and the ratios arcal / eager and arcal / compiled per precision. With --repeats R the two sides
alternate R times per precision (arcal, reference, arcal, ...), each pair's ratio is printed, and the
median of the pair ratios closes the precision: on a shared virtual machine the reference's speed
alone moves by tens of percent between runs, so one pair is one sample.

--side-by-side (the default study's condition, `arcal run` with [execution] parallel = 2): the Full
model and its standard twin train at the same time, one thread each, first arcal's two, then the
reference's two; --repeats R alternates the two sides R times. Each side's rates give the default
study's training makespan (six models of --study-images images each, AttnRes seeds 0-2 then the
twins 0-2 taken in that order by two slots, as `arcal run` schedules them), and the ratio
arcal / reference of the makespans; the median over the repeats closes the precision.
"""
import argparse
import os
import sys

# OpenBLAS keeps its own thread pool that torch.set_num_threads does not reach: pin it before torch
# loads, for both sides (arcal pins it itself via openblas_set_num_threads).
_t = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
os.environ["OPENBLAS_NUM_THREADS"] = _t
# Same GEMM kernels on both sides: arcal re-executes itself with OpenBLAS's native kernels when
# OpenBLAS falls back to the generic Prescott ones (ops/torch/compute_threads.hpp); give Python's torch the same
# choice (and arcal, through the inherited environment, the same value) unless the user set one.
if "OPENBLAS_CORETYPE" not in os.environ:
    try:
        _flags = set(open("/proc/cpuinfo").read().split())
    except OSError:
        _flags = set()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= _flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= _flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"

import gzip
import json
import subprocess
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import attnres_ref  # noqa: E402

sys.path.insert(0, HERE)
from slots import slot_makespan  # noqa: E402  (arcal run's slot schedule)

FMNIST = "/usr/share/datasets/fashion-mnist"


def load_fmnist():
    with gzip.open(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


def init_params(mode, depth=6, dim=64, classes=10, patch=7, mlp=4):
    g = torch.Generator().manual_seed(0)
    P = {}

    def normal(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    P["patch_embed.weight"] = normal(dim, 1, patch, patch)
    P["patch_embed.bias"] = torch.zeros(dim)
    P["cls_token"] = normal(1, 1, dim)
    P["pos_embed"] = normal(1, (28 // patch) ** 2 + 1, dim)
    for l in range(2 * depth):
        P[f"norms.{l}.weight"] = torch.ones(dim)
        P[f"norms.{l}.bias"] = torch.zeros(dim)
    for b in range(depth):
        P[f"attn{b}.qkv.weight"] = normal(3 * dim, dim)
        P[f"attn{b}.qkv.bias"] = torch.zeros(3 * dim)
        P[f"attn{b}.proj.weight"] = normal(dim, dim)
        P[f"attn{b}.proj.bias"] = torch.zeros(dim)
        P[f"mlp{b}.fc1.weight"] = normal(mlp * dim, dim)
        P[f"mlp{b}.fc1.bias"] = torch.zeros(mlp * dim)
        P[f"mlp{b}.fc2.weight"] = normal(dim, mlp * dim)
        P[f"mlp{b}.fc2.bias"] = torch.zeros(dim)
    P["final_norm.weight"] = torch.ones(dim)
    P["final_norm.bias"] = torch.zeros(dim)
    P["head.weight"] = normal(classes, dim)
    P["head.bias"] = torch.zeros(classes)
    if mode != 0:
        P["pseudo_query"] = torch.zeros(2 * depth + 1, dim)
        P["key_gain"] = torch.ones(2 * depth + 1, dim)
    return {k: v.requires_grad_(True) for k, v in P.items()}


def augment(x, pad=2):
    B = x.shape[0]
    fill = -0.2860 / 0.3530
    padded = F.pad(x, (pad, pad, pad, pad), value=fill)
    out = torch.empty_like(x)
    dy = torch.randint(0, 2 * pad + 1, (B,))
    dx = torch.randint(0, 2 * pad + 1, (B,))
    flip = torch.rand(B) < 0.5
    for b in range(B):
        crop = padded[b, :, dy[b]:dy[b] + 28, dx[b]:dx[b] + 28]
        out[b] = crop.flip(2) if flip[b] else crop
    return out


def python_throughput(mode, steps, batch, threads, precision="fp32", compiled=False, warmup=3):
    """Images/s of the reference's optimizer steps; with compiled, the forward and loss under
    torch.compile, after `warmup` untimed steps (compilation) that eager mode runs too."""
    torch.set_num_threads(threads)
    x, y = load_fmnist()
    P = init_params(mode)
    opt = torch.optim.AdamW(list(P.values()), lr=1e-3, weight_decay=0.05)
    cfg = [64, 6, 4, 7, mode, 2, 1e-6]

    def loss_fn(P, xb, yb):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits, _ = attnres_ref.forward(P, xb, cfg)
        logits = logits.float()
        return F.cross_entropy(logits, yb) + 0.5 * attnres_ref.sb_ece(logits, yb, 15, 0.01)

    step_loss = torch.compile(loss_fn) if compiled else loss_fn
    perm = torch.randperm(x.shape[0])
    elapsed = 0.0
    for s in range(steps + warmup):
        idx = perm[s * batch:(s + 1) * batch]
        t0 = time.perf_counter()
        xb = augment(x[idx])
        loss = step_loss(P, xb, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if s >= warmup:
            elapsed += time.perf_counter() - t0
    return steps * batch / elapsed


def arcal_throughput(binary, residual, steps, batch, threads, precision="fp32"):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run")
        subprocess.run([binary, "train", "--residual", residual, "--max-steps", str(steps), "--batch-size", str(batch),
                        "--threads", str(threads), "--precision", precision, "--quiet", "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f)["images_per_second"]


def _reference_worker(mode, steps, batch, threads, precision, queue):
    queue.put((mode, python_throughput(mode, steps, batch, threads, precision)))


def side_by_side(binary, steps, batch, threads, precision):
    """Images/s of (Full, standard) trained at the same time: arcal's pair, then the reference's."""
    import multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        procs = []
        for residual in ("full", "standard"):
            out = os.path.join(d, residual)
            procs.append(subprocess.Popen([binary, "train", "--residual", residual, "--max-steps", str(steps),
                                           "--batch-size", str(batch), "--threads", str(threads), "--precision",
                                           precision, "--quiet", "--out", out], stdout=subprocess.DEVNULL))
        for pr in procs:
            if pr.wait() != 0:
                sys.exit(f"arcal train exited with {pr.returncode}")
        cpp = []
        for residual in ("full", "standard"):
            with open(os.path.join(d, residual, "summary.json")) as f:
                cpp.append(json.load(f)["images_per_second"])
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_reference_worker, args=(mode, steps, batch, threads, precision, queue))
               for mode in (1, 0)]
    for w in workers:
        w.start()
    got = dict(queue.get() for _ in workers)
    for w in workers:
        w.join()
    return cpp, [got[1], got[0]]


def study_makespan(rate_full, rate_standard, images, slots=2):
    """Training makespan of the default study: AttnRes seeds 0-2, then twins 0-2, each job to the
    first free slot (arcal run's order)."""
    return slot_makespan([images / rate_full] * 3 + [images / rate_standard] * 3, slots)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arcal", default=os.path.join(HERE, "..", "build", "arcal"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--residual", default="full", choices=["full", "block", "standard"])
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--reference", nargs="+", default=["eager", "compile"], choices=["eager", "compile"],
                    help="the PyTorch reference's modes (one-model comparison)")
    ap.add_argument("--repeats", type=int, default=1, help="alternating (arcal, reference) pairs per precision")
    ap.add_argument("--side-by-side", action="store_true",
                    help="Full and standard at the same time on each side; the default study's makespans")
    ap.add_argument("--study-images", type=int, default=4450 * 128,
                    help="images per training of the study (default: 10 epochs x 445 steps x 128)")
    a = ap.parse_args()
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    if a.side_by_side:
        print(f"AR-ViT-tiny Full and standard side by side, batch {a.batch}, {a.threads} thread(s) each, "
              f"{a.steps} steps, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(OpenBLAS default)')}")
        for precision in a.precision:
            ratios = []
            for _ in range(a.repeats):
                cpp, py = side_by_side(a.arcal, a.steps, a.batch, a.threads, precision)
                m_cpp = study_makespan(cpp[0], cpp[1], a.study_images)
                m_py = study_makespan(py[0], py[1], a.study_images)
                ratios.append(m_cpp / m_py)
                print(f"  {precision}: arcal Full {cpp[0]:7.1f} + standard {cpp[1]:7.1f} images/s; reference Full "
                      f"{py[0]:7.1f} + standard {py[1]:7.1f} images/s; study trainings {m_cpp:6.0f} s against "
                      f"{m_py:6.0f} s: {m_cpp / m_py:.3f}", flush=True)
            if a.repeats > 1:
                print(f"  {precision}: median makespan ratio over {a.repeats} repeats {float(np.median(ratios)):.3f} "
                      f"(range {min(ratios):.3f}-{max(ratios):.3f})", flush=True)
        return
    mode = {"standard": 0, "full": 1, "block": 2}[a.residual]
    print(f"AR-ViT-tiny {a.residual}, batch {a.batch}, {a.threads} thread(s), {a.steps} steps, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(OpenBLAS default)')} on both sides")
    print(f"torch {torch.__version__}; reference modes: {', '.join(a.reference)}")
    for precision in a.precision:
        ratios = {m: [] for m in a.reference}
        for _ in range(a.repeats):
            cpp = arcal_throughput(a.arcal, a.residual, a.steps, a.batch, a.threads, precision)
            line = f"  {precision}: arcal (C++/LibTorch) {cpp:8.1f} images/s"
            for m in a.reference:
                py = python_throughput(mode, a.steps, a.batch, a.threads, precision, compiled=m == "compile")
                ratios[m].append(cpp / py)
                line += f"; PyTorch {m} {py:8.1f} images/s, ratio {cpp / py:.2f}x"
            print(line, flush=True)
        if a.repeats > 1:
            for m in a.reference:
                r = ratios[m]
                print(f"  {precision}: against {m}, median ratio over {a.repeats} pairs {float(np.median(r)):.2f}x "
                      f"(range {min(r):.2f}-{max(r):.2f}x)", flush=True)


if __name__ == "__main__":
    main()
