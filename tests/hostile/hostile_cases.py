#!/usr/bin/env python3
"""The bad-input regression suite of issue 13: runs `arcal` on every hostile case (corrupt and crafted
files, wrong dtypes and shapes, NaN logits, labels out of range, empty splits, bad flags, odd paths,
concurrent runs, signals), checks each exit code and message, and writes the table of docs/hostile_cases.md.

usage: hostile_cases.py --arcal BUILD/arcal --work DIR --table docs/hostile_cases.md [--update] [--only SUBSTR]

Every case states the exit code it must give and a piece of its message; the table records the first
line of stderr (paths under the work directory shown as $W; pids, hosts, times and step numbers that
vary between runs shown as PID, HOST, TIME, N). Without --update the committed table must equal the
one this run produces (the test fails on drift and prints the difference); with --update the table
is rewritten. Exit status: 0 all cases pass and the table matches, 1 otherwise, 77 (ctest: skipped)
when Debian's dataset-fashion-mnist is not installed.
"""
import argparse
import difflib
import gzip
import io
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import warnings
import zipfile

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"


class Runner:
    def __init__(self, arcal, work, committed=""):
        self.arcal = arcal
        self.work = work
        self.rows = []
        self.failures = []
        self.skipped = []
        self.area = ""
        self.n = 0
        self.committed = committed.splitlines()
        # An arcal built with -fsanitize=address (scripts/asan.sh) reserves terabytes of address space
        # for ASan's shadow memory, so it cannot start under `ulimit -v` at all.
        ldd = subprocess.run(["ldd", arcal], capture_output=True, text=True).stdout
        self.sanitized = "libasan" in ldd

    def keep_committed_row(self, what, why):
        """Case `what` cannot run in this build: its committed row stands in the table unchanged and the
        run says so (SKIPPED), so the rest of the table is still compared."""
        self.n += 1
        row = next((line for line in self.committed if line.startswith("| %d |" % self.n) and what in line), None)
        if row is None:
            self.failures.append("case %d (%s): cannot run here (%s) and has no committed row" % (self.n, what, why))
            return
        self.rows.append(row)
        self.skipped.append("case %d (%s): %s" % (self.n, what, why))

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def norm(self, s):
        s = s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")  # a non-UTF-8 path as \\xff
        s = s.replace(self.work, "$W")
        s = s.replace(self.arcal, "arcal")
        s = re.sub(r"pid \d+", "pid PID", s)
        s = s.replace("host " + socket.gethostname(), "host HOST")
        s = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "TIME", s)
        s = re.sub(r"after step \d+ of \d+", "after step N of N", s)
        s = re.sub(r"is at step \d+", "is at step N", s)
        s = re.sub(r"\.tmp\.\d+(-\d+)?", ".tmp.PID", s)
        s = re.sub(r"\.tmp-\d+(-\d+)?", ".tmp-PID", s)
        s = re.sub(r"process \d+-\d+", "process PID", s)
        return s

    def show_cmd(self, argv):
        """The command as a shell would take it, with the work directory as $W (in double quotes where
        the argument needs quoting, so $W still expands)."""
        if argv and argv[0].startswith("("):
            return " ".join(argv)
        out = []
        for a in argv:
            a = self.norm(a)
            if a == "" or re.search(r"[\s'\"\\;|&`]", a):
                a = '"' + a.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'
            out.append(a.replace("\n", "\\n"))
        return " ".join(["arcal"] + out)

    def show_raw(self, argv):
        return self.show_cmd(argv)

    def record(self, what, argv, code, err, want_code, want_text, extra_ok=True, extra_why="", out="", then=""):
        self.n += 1
        # The last line: arcal's own message (signal notices and warnings come before it); for a
        # success without one, the last line of stdout.
        first = next((line for line in reversed(err.splitlines()) if line.strip()), "")
        if not first and code == 0:
            first = next((line.strip() for line in reversed(out.splitlines()) if line.strip()), "")
        first = self.norm(first)
        ok = code == want_code and (want_text is None or want_text in err) and extra_ok
        if not ok:
            self.failures.append("case %d (%s): exit %s (want %s), stderr: %s%s" % (
                self.n, what, code, want_code, err.strip()[:600], " / " + extra_why if extra_why else ""))
        msg = first.replace("|", "\\|")
        cmd = "`%s`" % self.show_cmd(argv).replace("|", "\\|").replace("`", "'") + (", then " + then if then else "")
        self.rows.append("| %d | %s | %s | %s | %s | %s |" % (self.n, self.area, what, cmd, code, msg))

    def run(self, what, argv, want_code, want_text, timeout=300, check=None, env=None):
        try:
            p = subprocess.run([self.arcal] + argv, capture_output=True, text=True, timeout=timeout, env=env,
                               errors="replace")
            code, err, out = p.returncode, p.stderr, p.stdout
        except subprocess.TimeoutExpired:
            code, err, out = "timeout", "(no exit within %d s)" % timeout, ""
        extra_ok, why = True, ""
        if check is not None:
            why = check(code, out, err) or ""
            extra_ok = not why
        self.record(what, argv, code, err, want_code, want_text, extra_ok, why, out)
        return code, out, err


# ---------------------------------------------------------------- input files

def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def raw_npy(header, data=b""):
    h = header.encode("latin1")
    h = h + b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def write_zip(path, members, compress=False, declared=None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(name, data)
    if declared is not None:  # replace the declared uncompressed size of every member
        b = bytearray(open(path, "rb").read())
        for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
            i = 0
            while (i := b.find(sig, i)) >= 0:
                struct.pack_into("<I", b, i + off, declared)
                i += 4
        open(path, "wb").write(bytes(b))


def trace(n=40, k=3, routing=False, seed=0):
    rng = np.random.default_rng(seed)
    a = {"logits": rng.standard_normal((n, k)).astype(np.float32), "labels": np.arange(n, dtype=np.int64) % k}
    if routing:
        p, s = 2, 3
        src = np.array([2, 3], dtype=np.int32)
        r = np.zeros((n, p, s), dtype=np.float32)
        for j in range(p):
            w = rng.random((n, src[j])) + 0.1
            r[:, j, : src[j]] = w / w.sum(1, keepdims=True)
        a.update(routing=r, routing_sources=src)
    return a


def topk_trace(n=40, k_all=50, k=4, seed=0):
    """The top-k output form (docs/interface.md) of a random trace over k_all classes."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, k_all)) * 2
    lp = z - np.log(np.exp(z).sum(1, keepdims=True))
    idx = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    labels = idx[:, 0].copy()
    labels[::3] = idx[::3, 1]
    p = np.exp(lp)
    return {"topk_logprobs": np.take_along_axis(lp, idx, 1).astype(np.float32), "topk_indices": idx.astype(np.int64),
            "label_logprob": lp[np.arange(n), labels].astype(np.float32),
            "log_normalizer": np.log(np.exp(z).sum(1)).astype(np.float32),
            "predictive_entropy": (-(p * lp).sum(1)).astype(np.float32), "prob_sq_sum": (p * p).sum(1).astype(np.float32),
            "num_classes": np.array(k_all), "labels": labels.astype(np.int64)}


def save(path, arrays, compress=False):
    (np.savez_compressed if compress else np.savez)(path, **arrays)
    return path


def idx_files(d, prefix, n, h, w, img_magic=2051, pixels=None, labels=None):
    os.makedirs(d, exist_ok=True)
    img = struct.pack(">IIII", img_magic, n, h, w) + (pixels if pixels is not None else bytes(n * h * w))
    lab = struct.pack(">II", 2049, n) + (labels if labels is not None else bytes(i % 10 for i in range(n)))
    open(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), "wb").write(gzip.compress(img, mtime=0))
    open(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), "wb").write(gzip.compress(lab, mtime=0))


def stderr_of(proc, timeout=120):
    """The stderr of a started process once it ends (killed after `timeout` seconds)."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


def wait_for(path, timeout=240, proc=None):
    t0 = time.time()
    while not os.path.exists(path):
        if proc is not None and proc.poll() is not None:
            return False
        if time.time() - t0 > timeout:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------- the cases

def files_cases(r):
    r.area = "npz files"
    W = r.path
    good = save(W("good.npz"), trace())
    data = open(good, "rb").read()
    open(W("trunc.npz"), "wb").write(data[: len(data) // 2])
    r.run("truncated npz", ["metrics", W("trunc.npz")], 2, "cannot open as a zip archive")
    open(W("random.npz"), "wb").write(bytes(range(256)) * 4)
    r.run("not a zip archive", ["metrics", W("random.npz")], 2, "cannot open as a zip archive")
    open(W("empty.npz"), "wb").write(b"")
    r.run("empty file", ["metrics", W("empty.npz")], 2, "empty.npz")
    r.run("missing file", ["metrics", W("missing.npz")], 2, "missing.npz")
    os.makedirs(W("adir.npz"), exist_ok=True)
    r.run("a directory instead of a file", ["metrics", W("adir.npz")], 2, "adir.npz")
    lab = npy_bytes(np.zeros(2, dtype=np.int64))
    write_zip(W("overflow.npz"), [("logits.npy", raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }")),
                                  ("labels.npy", lab)])
    r.run("npy shape product overflows 64 bits", ["metrics", W("overflow.npz")], 2, "overflows 64 bits")
    write_zip(W("huge.npz"), [("logits.npy", raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000), }")),
                              ("labels.npy", lab)])
    r.run("npy shape of 8 TB", ["metrics", W("huge.npz")], 2, "more than the limit")
    write_zip(W("declared.npz"), [("logits.npy", npy_bytes(np.zeros((2, 2))))], declared=0xFFFFFFF0)
    r.run("zip member declares 4 GB it cannot hold", ["metrics", W("declared.npz")], 2, "cannot produce")
    bomb = npy_bytes(np.zeros((2, 2))) + bytes(50 << 20)
    write_zip(W("bomb.npz"), [("logits.npy", bomb), ("labels.npy", lab)], compress=True)
    r.run("deflate bomb within the array limit: extra data refused", ["metrics", W("bomb.npz")], 2, "more than the header's shape needs")
    env = dict(os.environ, ARCAL_MAX_ARRAY_BYTES=str(16 << 20))
    r.run("deflate bomb beyond ARCAL_MAX_ARRAY_BYTES", ["metrics", W("bomb.npz")], 2, "more than the limit", env=env)
    # A member that inflates past what it declares.
    write_zip(W("lying.npz"), [("logits.npy", npy_bytes(np.zeros((2, 2)))), ("labels.npy", lab)], compress=True)
    b = bytearray(open(W("lying.npz"), "rb").read())
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = b.find(sig)
        struct.pack_into("<I", b, i + off, 64)
    open(W("lying.npz"), "wb").write(bytes(b))
    r.run("member inflates past its declared size", ["metrics", W("lying.npz")], 2, "lying.npz")
    # Big-endian and Fortran-order arrays are read since issue 16 (numpy writes both): a valid one is
    # converted, a big-endian one whose data does not fill its shape is refused like any other.
    write_zip(W("be.npz"), [("logits.npy", raw_npy("{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }", bytes(32))),
                            ("labels.npy", lab)])
    r.run("big-endian dtype (converted)", ["metrics", W("be.npz")], 0, "")
    for what, descr, text in [("big-endian dtype with too much data", ">f8", "data is 64 bytes"), ("object (pickled) dtype", "|O", "never unpickled"),
                              ("complex dtype", "<c16", "unsupported dtype"),
                              ("unicode dtype of 10^15 characters", "<U999999999999999", "more characters per element")]:
        write_zip(W("dt.npz"), [("logits.npy", raw_npy("{'descr': '%s', 'fortran_order': False, 'shape': (2, 2), }" % descr, bytes(64))),
                                ("labels.npy", lab)])
        r.run(what, ["metrics", W("dt.npz")], 2, text)
    write_zip(W("fortran.npz"), [("logits.npy", raw_npy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", bytes(32))),
                                 ("labels.npy", lab)])
    r.run("Fortran-order array (transposed to C order)", ["metrics", W("fortran.npz")], 0, "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate, which is the point
        write_zip(W("dup.npz"), [("labels.npy", lab), ("labels.npy", lab)])
    r.run("member name appears twice", ["metrics", W("dup.npz")], 2, "dup.npz")
    write_zip(W("txt.npz"), [("notes.txt", b"hello")])
    r.run("member that is not .npy", ["metrics", W("txt.npz")], 2, "not a .npy file")
    a = trace()
    a["logits"] = np.zeros((40, 3), dtype=np.float32)
    write_zip(W("trunc_member.npz"), [("logits.npy", npy_bytes(a["logits"])[:-10]), ("labels.npy", npy_bytes(a["labels"]))])
    r.run("npy data shorter than its shape", ["metrics", W("trunc_member.npz")], 2, "but the header's shape needs")

    r.area = "trace arrays"
    cases = []
    a = trace(); a["logits"] = a["logits"].astype(np.int32); cases.append(("logits of integer dtype", a, "must be float32 or float64"))
    a = trace(); a["labels"] = a["labels"].astype(np.float64); cases.append(("labels of float dtype", a, "must be int64 or int32"))
    a = trace(); a["logits"] = a["logits"][:, 0].copy(); cases.append(("logits 1-D", a, "must be [N, K]"))
    a = trace(); a["labels"] = a["labels"][:-1]; cases.append(("labels shorter than logits", a, "labels has 39 entries"))
    a = trace(); a["probs"] = np.full((40, 3), 1 / 3); cases.append(("both logits and probs", a, "has both"))
    a = trace(); del a["logits"]; cases.append(("neither logits nor probs", a, "has neither"))
    a = trace(); del a["labels"]; cases.append(("no labels", a, "no 'labels'"))
    a = trace(); a["logits"][3, 1] = np.nan; cases.append(("NaN logit", a, "logits[3, 1] is nan"))
    a = trace(); a["logits"][0, 2] = np.inf; cases.append(("infinite logit", a, "logits[0, 2] is inf"))
    a = trace(); a["labels"][5] = 3; cases.append(("label equal to K", a, "labels[5] is 3"))
    a = trace(); a["labels"][7] = -1; cases.append(("negative label", a, "labels[7] is -1"))
    a = trace(); del a["logits"]; a["probs"] = np.full((40, 3), 0.3); cases.append(("probs rows not summing to 1", a, "sums to 0.9"))
    a = trace(); del a["logits"]; p = np.full((40, 3), 0.5); p[:, 2] = 0.0; p[1, 0] = -0.5; p[1, 1] = 1.5
    cases.append(("negative probability", a | {"probs": p}, "probs[1, 0] is -0.5"))
    a = trace(routing=True); del a["routing_sources"]; cases.append(("routing without routing_sources", a, "no 'routing_sources'"))
    a = trace(routing=True); a["routing"][2, 1, 0] += 0.5; cases.append(("routing row not summing to 1", a, "routing[2, 1, :3] sums to"))
    a = trace(routing=True); a["routing_sources"] = np.array([2, 9], dtype=np.int32); cases.append(("routing_sources beyond S", a, "routing_sources[1] is 9"))
    a = trace(routing=True); a["routing_cls"] = a["routing"][:, :1]; cases.append(("routing_cls of another shape", a, "routing_cls has shape"))
    a = trace(); a["features"] = np.zeros((40, 2)); a["features"][4, 1] = np.nan; cases.append(("NaN feature", a, "features[4, 1] is nan"))
    a = trace(); a["features"] = np.zeros((40, 2)); a["feature_names"] = np.array(["a"]); cases.append(("feature_names count", a, "feature_names has 1 names"))
    a = trace(); a["logits"] = np.zeros((0, 3), dtype=np.float32); a["labels"] = np.zeros(0, dtype=np.int64)
    cases.append(("empty trace (N = 0)", a, "no examples"))
    a = trace(); a["logits"] = a["logits"][:, :1].copy(); a["labels"][:] = 0; cases.append(("one class (K = 1)", a, "must be >= 2"))
    a = trace(); a["meta"] = np.array(["a", "b"]); cases.append(("meta not a 0-d string", a, "meta has shape"))
    a = trace(); a["cluster"] = np.arange(39); cases.append(("cluster of the wrong length", a, "cluster has 39 entries"))
    a = trace(); a["cluster"] = np.zeros(40, dtype=np.int64); a["cluster"][6] = -3; cases.append(("negative cluster id", a, "cluster[6] is -3"))
    a = trace(); a["cluster"] = np.zeros(40); cases.append(("float cluster ids", a, "cluster has dtype"))
    # The top-k output form of a large vocabulary (issue 53).
    a = topk_trace(); a["topk_logprobs"][2, :] = a["topk_logprobs"][2, ::-1]; cases.append(("top-k row not descending", a, "topk_logprobs[2, 1]"))
    a = topk_trace(); a["topk_indices"][4, 1] = a["topk_indices"][4, 0]; cases.append(("top-k class named twice", a, "names class"))
    a = topk_trace(); del a["num_classes"]; cases.append(("top-k without num_classes", a, "no 'num_classes'"))
    a = topk_trace(); del a["prob_sq_sum"]; cases.append(("top-k without prob_sq_sum", a, "no 'prob_sq_sum'"))
    a = topk_trace(); a["label_logprob"][6] = 0.0; cases.append(("label_logprob not the label's entry", a, "label_logprob[6]"))
    a = topk_trace() | {"logits": trace()["logits"]}; cases.append(("logits beside the top-k form", a, "give exactly one output form"))
    a = trace(); a["topk_indices"] = np.zeros((40, 2), dtype=np.int64); cases.append(("top-k array without topk_logprobs", a, "no 'topk_logprobs'"))
    for i, (what, arrays, text) in enumerate(cases):
        f = save(W("t%02d.npz" % i), arrays)
        r.run(what, ["metrics", f], 2, text)
    f = save(W("topk_ok.npz"), topk_trace())
    r.run("calibrator on a top-k trace", ["calibrate", f, "--method", "temperature", "--out", W("cal_topk.npz")], 2, "needs every class's probability")
    # An invalid code point (a UTF-16 surrogate) in a string array.
    write_zip(W("surrogate.npz"), [("logits.npy", npy_bytes(trace()["logits"])), ("labels.npy", npy_bytes(trace()["labels"])),
                                   ("meta.npy", raw_npy("{'descr': '<U1', 'fortran_order': False, 'shape': (), }", b"\x00\xd8\x00\x00"))])
    r.run("surrogate code point in meta", ["metrics", W("surrogate.npz")], 2, "invalid code point")


def flag_cases(r):
    r.area = "flags"
    W = r.path
    good = save(W("good.npz"), trace())
    r.run("metrics --bins 0", ["metrics", good, "--bins", "0"], 2, "--bins")
    r.run("metrics --seed -1", ["metrics", good, "--seed", "-1"], 2, "is not a seed")
    r.run("metrics --bootstrap -5", ["metrics", good, "--bootstrap", "-5"], 2, "outside [0, 1000000]")
    r.run("train --batch-size 0", ["train", "--batch-size", "0", "--out", W("r_bs")], 2, "--batch-size: 0 is outside [1, 65536]")
    r.run("train --train-subset -5 (was: all data)", ["train", "--train-subset", "-5", "--out", W("r_ts")], 2, "--train-subset: -5 is outside")
    r.run("train --epochs 0", ["train", "--epochs", "0", "--out", W("r_ep")], 2, "--epochs: 0 is outside")
    r.run("train --lr 0", ["train", "--lr", "0", "--out", W("r_lr")], 2, "--lr: 0 is outside (0, 10]")
    r.run("train --lr nan", ["train", "--lr", "nan", "--out", W("r_lr")], 2, "--lr: nan is outside")
    r.run("train --lr inf", ["train", "--lr", "inf", "--out", W("r_lr")], 2, "--lr: inf is outside")
    r.run("train --lr abc", ["train", "--lr", "abc", "--out", W("r_lr")], 2, "--lr")
    r.run("train --threads 0", ["train", "--threads", "0", "--out", W("r_th")], 2, "--threads: 0 is outside")
    r.run("train --epochs 2^32 + 1", ["train", "--epochs", "4294967297", "--out", W("r_ep")], 2, "--epochs")
    r.run("train --override without --resume", ["train", "--override", "lr", "--lr", "0.1", "--out", W("r_ov")], 2, "only applies with --resume")
    r.run("trace --batch-size 0 (was: hang)", ["trace", "--run", W("nowhere"), "--batch-size", "0", "--out", W("x.npz")], 2,
          "--batch-size: 0 is outside", timeout=60)
    r.run("intervene --subset -1 (was: all data)", ["intervene", "--run", W("nowhere"), "--subset", "-1", "--out", W("x.json")], 2,
          "--subset: -1 is outside")
    r.run("audit --permutations 0", ["audit", good, "--permutations", "0", "--out", W("a0")], 2, "--permutations: 0 is outside")
    r.run("audit --alpha nan (CLI11's Range lets NaN through)", ["audit", good, "--alpha", "nan", "--out", W("a1")], 2,
          "--alpha: nan is outside")
    r.run("audit --null-group-size 0", ["audit", good, "--null-group-size", "0", "--out", W("a2")], 2,
          "--null-group-size: 0 is outside [2, 10]")
    r.run("audit --null-group-size -3", ["audit", good, "--null-group-size", "-3", "--out", W("a2")], 2,
          "--null-group-size: -3 is outside [2, 10]")
    r.run("audit --null-group-size nan", ["audit", good, "--null-group-size", "nan", "--out", W("a2")], 2,
          "--null-group-size: 'nan' is not an integer")
    r.run("audit --correction-ridge -2 (-1: chosen by inner CV)", ["audit", good, "--correction-ridge", "-2", "--out", W("a3")], 2,
          "--correction-ridge: -2 is outside [-1, 1e+09]")
    r.run("audit --correction-ridge nan", ["audit", good, "--correction-ridge", "nan", "--out", W("a3")], 2,
          "--correction-ridge: nan is outside")
    r.run("audit --probe-repeats 0", ["audit", good, "--probe-repeats", "0", "--out", W("a4")], 2,
          "--probe-repeats: 0 is outside [1, 100]")
    r.run("simulate --effect-nats inf", ["simulate", "--effect-nats", "inf", "--out", W("s.npz")], 2, "--effect-nats: inf is outside")
    r.run("simulate --n 1", ["simulate", "--n", "1", "--out", W("s.npz")], 2, "--n")
    r.run("simulate beyond the memory limit", ["simulate", "--n", "100000000", "--classes", "100000", "--out", W("s.npz")], 2,
          "more than the limit")
    r.run("run --parallel 300", ["run", "--parallel", "300", "--print-config"], 2, "--parallel")
    r.run("sweep --index -1", ["sweep", "--config", W("x.toml"), "--index", "-1"], 2, "--index")
    r.run("unknown flag", ["metrics", good, "--binz", "3"], 2, "--binz")
    r.run("unknown subcommand", ["frobnicate"], 2, "frobnicate")
    r.run("no subcommand", [], 2, "subcommand")


def toml_cases(r):
    r.area = "study TOML"
    W = r.path

    def study(name, text):
        open(W(name), "w").write(text)
        return W(name)

    r.run("arrays nested 20,000 deep (was: segfault)", ["run", "--config", study("deep.toml", "x = " + "[" * 20000 + "]" * 20000 + "\n"),
                                                        "--print-config"], 2, "nested more than 64 deep", timeout=60)
    r.run("inline tables nested 20,000 deep", ["run", "--config", study("deep2.toml", "x = " + "{a=" * 20000 + "1" + "}" * 20000 + "\n"),
                                               "--print-config"], 2, "nested more than 64 deep", timeout=60)
    r.run("array of 1.4 M elements (was: > 60 s; now the size limit)", ["run", "--config", study("long.toml", "[train]\nseeds = [" + ",".join(["1"] * 1400000) + "]\n"),
                                                     "--print-config"], 2, "more than the limit", timeout=60)
    r.run("array of 20,000 elements", ["run", "--config", study("long2.toml", "[train]\nseeds = [" + ",".join(str(i) for i in range(20000)) + "]\n"),
                                       "--print-config"], 2, "more than 10000 elements", timeout=60)
    r.run("dotted key of 200 parts", ["run", "--config", study("dots.toml", "a" + ".a" * 200 + " = 1\n"), "--print-config"], 2, "parts")
    r.run("unknown key", ["run", "--config", study("unk.toml", "[train]\nepoch = 3\n"), "--print-config"], 2, "unknown key 'epoch' in [train]")
    r.run("epochs = 2^32 + 1 (was: wrapped to 1)", ["run", "--config", study("big.toml", "[train]\nepochs = 4294967297\n"), "--print-config"], 2,
          "[train] epochs must be an integer in [1, 100000]")
    r.run("epochs as a string", ["run", "--config", study("str.toml", "[train]\nepochs = \"3\"\n"), "--print-config"], 2, "must be an integer")
    r.run("negative train_subset", ["run", "--config", study("neg.toml", "[train]\ntrain_subset = -5\n"), "--print-config"], 2, "train_subset")
    r.run("name '..' (a directory outside runs/)", ["run", "--config", study("dd.toml", "name = \"..\"\n"), "--print-config"], 2, "name must be")
    r.run("unknown preset", ["run", "--config", study("pre.toml", "[model]\npresets = [\"ar-vit-huge\"]\n"), "--print-config"], 2,
          "is not a known preset")
    r.run("study file of 2 MiB", ["run", "--config", study("large.toml", "# " + "x" * (2 << 20) + "\n"), "--print-config"], 2, "more than the limit")
    r.run("invalid TOML", ["run", "--config", study("syntax.toml", "[train\nseeds = [1,\n"), "--print-config"], 2, "is not valid TOML")
    q = study("quote.toml", '[data]\ndata_dir = "/data/a \\"b\\"\\nc"\n')

    def roundtrip(code, out, err):
        if code != 0:
            return "print-config failed"
        open(W("printed.toml"), "w").write(out)
        p = subprocess.run([r.arcal, "run", "--config", W("printed.toml"), "--print-config"], capture_output=True, text=True)
        return "" if p.returncode == 0 and p.stdout == out else "printed study does not read back: " + p.stderr
    r.run("data_dir with quotes and a newline: printed study reads back", ["run", "--config", q, "--print-config"], 0, None, check=roundtrip)


def report_cases(r):
    r.area = "report"
    W = r.path
    # A real results.json: arcal audit over a simulated trace (diagnostic and AR-CondCal, no probes).
    subprocess.run([r.arcal, "simulate", "--out", W("rep_sim.npz"), "--n", "600", "--classes", "3", "--points", "2"],
                   check=True, capture_output=True)
    subprocess.run([r.arcal, "audit", W("rep_sim.npz"), "--out", W("rep_ok"), "--permutations", "50", "--no-probes", "--quiet"],
                   check=True, capture_output=True)
    good_doc = json.load(open(W("rep_ok", "results.json")))
    results_doc = lambda: json.loads(json.dumps(good_doc))
    doc = results_doc()
    doc["diagnostic"]["tests"][0]["p"] = "0.2"
    os.makedirs(W("rep_type"), exist_ok=True)
    json.dump(doc, open(W("rep_type", "results.json"), "w"))
    r.run("results.json with a p-value as a string (was: 'nan' and a partial directory)", ["report", W("rep_type")], 2,
          "(/diagnostic/tests/0/p) type must be number",
          check=lambda c, o, e: "" if not os.path.exists(W("rep_type", "report")) else "a report directory was left")
    doc = results_doc()
    doc["runs"][0]["reliability"] = {"n": "many"}
    os.makedirs(W("rep_type2"), exist_ok=True)
    json.dump(doc, open(W("rep_type2", "results.json"), "w"))
    r.run("results.json with reliability rows as an object", ["report", W("rep_type2")], 2, "(/runs/0/reliability) type must be array")
    doc = results_doc()
    # A complete exact_null section but for the one value of the wrong type.
    en = {"variants": ["confidence"], "group_size": 5, "replicates": 9, "seed": 0, "seconds": 0.0,
          "refit": {"restarts": 1, "max_epochs": 1, "patience": 1, "batch_size": 8, "lr": 0.01, "warm_start": True}}
    doc["exact_null"] = dict(en, runs={"run": "x"}, pooled=[])
    os.makedirs(W("rep_type3"), exist_ok=True)
    json.dump(doc, open(W("rep_type3", "results.json"), "w"))
    r.run("results.json with exact-null runs as an object", ["report", W("rep_type3")], 2, "(/exact_null/runs) type must be array",
          check=lambda c, o, e: "" if not os.path.exists(W("rep_type3", "report")) else "a report directory was left")
    doc = results_doc()
    doc["exact_null"] = dict(en, runs=[], pooled=[], model_based={"pooled": 3, "runs": []})
    os.makedirs(W("rep_type4"), exist_ok=True)
    json.dump(doc, open(W("rep_type4", "results.json"), "w"))
    r.run("results.json with the model-based null's pooled rows as a number", ["report", W("rep_type4")], 2,
          "(/exact_null/model_based/pooled) type must be array")
    os.makedirs(W("rep_deep"), exist_ok=True)
    open(W("rep_deep", "results.json"), "w").write('{"schema": "arcal.audit/1", "diagnostic": ' + "[" * 100000 + "]" * 100000 + "}")
    r.run("results.json nested 100,000 deep", ["report", W("rep_deep")], 2, "nested more than 64 deep")
    os.makedirs(W("rep_bad"), exist_ok=True)
    open(W("rep_bad", "results.json"), "w").write('{"schema": ')
    r.run("results.json not JSON", ["report", W("rep_bad")], 2, "is not valid JSON")
    r.run("report --out equal to DIR (would replace the input)", ["report", W("rep_ok"), "--out", W("rep_ok")], 2, "would contain the input")
    os.makedirs(W("precious"), exist_ok=True)
    open(W("precious", "notes.txt"), "w").write("mine")
    r.run("report --out onto a directory that is not a report", ["report", W("rep_ok"), "--out", W("precious")], 2, "was not made by arcal report",
          check=lambda c, o, e: "" if os.path.exists(W("precious", "notes.txt")) else "notes.txt was deleted")
    evil = W("rep'; touch INJECTED; echo '")
    os.makedirs(evil, exist_ok=True)
    shutil.copy(W("rep_ok", "results.json"), os.path.join(evil, "results.json"))

    def no_injection(code, out, err):
        bad = [p for p in (W("INJECTED"), os.path.join(os.getcwd(), "INJECTED"), os.path.join(evil, "report", "figures", "INJECTED"))
               if os.path.exists(p)]
        if bad:
            return "the shell ran: " + ", ".join(bad)
        return "" if os.path.exists(os.path.join(evil, "report", "report.html")) else "no report written"
    r.run("report DIR with a quote and shell command in its name (was: injection)", ["report", evil], 0, None, check=no_injection)
    nl = W("odd dir\nwith newline")
    os.makedirs(nl, exist_ok=True)
    shutil.copy(W("rep_ok", "results.json"), os.path.join(nl, "results.json"))
    r.run("report DIR with a space and a newline in its name", ["report", nl], 0, None,
          check=lambda c, o, e: "" if os.path.exists(os.path.join(nl, "report", "report.html")) else "no report written")
    os.makedirs(W("rep_nognuplot"), exist_ok=True)
    shutil.copy(W("rep_ok", "results.json"), W("rep_nognuplot", "results.json"))
    r.run("gnuplot not installed: a failure while working, no partial report", ["report", W("rep_nognuplot")], 1, "cannot start gnuplot",
          env=dict(os.environ, PATH="/nonexistent"),
          check=lambda c, o, e: "" if os.listdir(W("rep_nognuplot")) == ["results.json"] else "left: %s" % os.listdir(W("rep_nognuplot")))


def path_cases(r):
    r.area = "outputs"
    W = r.path
    good = save(W("in.npz"), trace(200, 3))
    before = open(good, "rb").read()
    same = lambda c, o, e: "" if open(good, "rb").read() == before else "the input changed"
    r.run("calibrate --out equal to its input (was: input destroyed)", ["calibrate", good, "--method", "temperature", "--out", good], 2,
          "writing it would destroy the input", check=same)
    os.makedirs(W("sub"), exist_ok=True)
    r.run("calibrate --out the input by another path", ["calibrate", good, "--method", "temperature", "--out", W("sub", "..", "in.npz")], 2,
          "is the input", check=same)
    if os.path.lexists(W("link.npz")):
        os.remove(W("link.npz"))
    os.symlink(good, W("link.npz"))
    r.run("calibrate --out a symlink to its input", ["calibrate", good, "--method", "temperature", "--out", W("link.npz")], 2,
          "is the input", check=same)
    os.link(good, W("hard.npz")) if not os.path.exists(W("hard.npz")) else None
    r.run("calibrate --out a hard link to its input", ["calibrate", good, "--method", "temperature", "--out", W("hard.npz")], 2,
          "is the input", check=same)
    open(W("exists.npz"), "wb").write(b"keep me")
    r.run("calibrate --out onto an existing file", ["calibrate", good, "--method", "temperature", "--out", W("exists.npz")], 2,
          "pass --force", check=lambda c, o, e: "" if open(W("exists.npz"), "rb").read() == b"keep me" else "the file changed")
    r.run("calibrate --out onto an existing file with --force", ["calibrate", good, "--method", "temperature", "--out", W("exists.npz"),
                                                                 "--force"], 0, None)
    r.run("simulate --out a directory", ["simulate", "--out", W("sub"), "--n", "100", "--classes", "3"], 2, "is a directory")
    odd = W("a b'c\nd.npz")
    r.run("simulate --out with a space, quote and newline", ["simulate", "--out", odd, "--n", "200", "--classes", "3"], 0, None)
    r.run("metrics on that file", ["metrics", odd], 0, None)
    open(W("afile"), "w").write("x")
    r.run("train --out onto an existing file (was: exit 1, no message)", ["train", "--max-steps", "1", "--out", W("afile")], 2,
          "exists and is not a directory")
    r.run("audit on a simulated trace", ["audit", odd, "--out", W("aud"), "--permutations", "50", "--no-probes", "--no-condcal"], 0, None)
    r.run("audit --out holding an earlier audit", ["audit", odd, "--out", W("aud"), "--permutations", "50", "--no-probes", "--no-condcal"], 2,
          "pass --force")


def cedar_cases(r):
    r.area = "cedar"
    W = r.path
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 6, 8)).astype(np.float32)
    k = rng.standard_normal((2, 40, 8)).astype(np.float32)
    v = rng.standard_normal((2, 40, 8)).astype(np.float32)
    good = save(W("qkv.npz"), {"q": q, "k": k, "v": v})
    before = open(good, "rb").read()
    same = lambda c, o, e: "" if open(good, "rb").read() == before else "the input changed"
    out = W("attn.npz")
    no_out = lambda c, o, e: "" if not os.path.exists(out) else "an output was written"
    # --json: the text summary prints timings, which would make the table differ between runs.
    r.run("cedar on a valid q/k/v file", ["cedar", "--qkv", good, "--chunk-size", "8", "--budget", "2", "--out", out, "--json"], 0, None,
          check=lambda c, o, e: "" if c != 0 or json.loads(o).get("schema") == "arcal.cedar/1" else "no arcal.cedar/1 JSON")
    os.remove(out)
    r.run("cedar: k and v of different shapes", ["cedar", "--qkv", save(W("qkv_kv.npz"), {"q": q, "k": k, "v": v[:, :39]}),
                                                 "--out", out], 2, "they must match", check=no_out)
    r.run("cedar: q of another head width", ["cedar", "--qkv", save(W("qkv_d.npz"), {"q": q[:, :, :4].copy(), "k": k, "v": v}),
                                             "--out", out], 2, "head width d = 4", check=no_out)
    qn = q.copy()
    qn[1, 4, 2] = np.nan
    r.run("cedar: NaN in q", ["cedar", "--qkv", save(W("qkv_nan.npz"), {"q": qn, "k": k, "v": v}), "--out", out], 2,
          "q[1, 4, 2] is nan, but must be finite", check=no_out)
    r.run("cedar: int64 k", ["cedar", "--qkv", save(W("qkv_int.npz"), {"q": q, "k": k.astype(np.int64), "v": v}), "--out", out], 2,
          "but must be float32", check=no_out)
    r.run("cedar: q 1-D", ["cedar", "--qkv", save(W("qkv_1d.npz"), {"q": q.ravel(), "k": k, "v": v}), "--out", out], 2,
          "must be [H, Nq, d] or [Nq, d]", check=no_out)
    r.run("cedar: chunk_starts not increasing",
          ["cedar", "--qkv", save(W("qkv_starts.npz"), {"q": q, "k": k, "v": v, "chunk_starts": np.array([0, 20, 10], np.int64)}),
           "--out", out], 2, "chunk_starts[2] is 10", check=no_out)
    r.run("cedar --chunk-size 0", ["cedar", "--qkv", good, "--chunk-size", "0", "--out", out], 2, "--chunk-size: 0 is outside",
          check=no_out)
    r.run("cedar --error-target nan", ["cedar", "--qkv", good, "--error-target", "nan", "--out", out], 2,
          "--error-target: nan is outside", check=no_out)
    r.run("cedar --budget -1", ["cedar", "--qkv", good, "--budget", "-1", "--out", out], 2, "--budget: -1 is outside", check=no_out)
    r.run("cedar --method topk --budget 0 (keeps no key)", ["cedar", "--qkv", good, "--method", "topk", "--budget", "0", "--out", out],
          2, "keeps no key", check=no_out)
    r.run("cedar --out equal to --qkv", ["cedar", "--qkv", good, "--out", good], 2, "writing it would destroy the input", check=same)
    if os.path.lexists(W("qkv_link.npz")):
        os.remove(W("qkv_link.npz"))
    os.symlink(good, W("qkv_link.npz"))
    r.run("cedar --out a symlink to --qkv", ["cedar", "--qkv", good, "--out", W("qkv_link.npz")], 2, "is the input", check=same)
    open(W("taken.npz"), "wb").write(b"keep me")
    r.run("cedar --out onto an existing file", ["cedar", "--qkv", good, "--out", W("taken.npz")], 2, "pass --force",
          check=lambda c, o, e: "" if open(W("taken.npz"), "rb").read() == b"keep me" else "the file changed")
    tiny = ["--keys", "64", "--chunk-size", "16", "--queries", "4", "--dim", "4", "--heads", "1", "--dispersions", "0.1",
            "--temperatures", "1", "--query-clusters", "1", "--budgets", "1", "--error-targets", "0.5", "--no-figure", "--threads", "1"]
    r.run("cedar-study --chunk-size 0", ["cedar-study", "--out", W("cs0"), "--chunk-size", "0"], 2, "--chunk-size: 0 is outside",
          check=lambda c, o, e: "" if not os.path.exists(W("cs0")) else "an output directory was created")
    r.run("cedar-study --budgets 0", ["cedar-study", "--out", W("cs1"), "--budgets", "1,0"], 2, "--budgets: 0 is outside")
    r.run("cedar-study --temperatures nan", ["cedar-study", "--out", W("cs2"), "--temperatures", "nan"], 2,
          "--temperatures: nan is outside")
    r.run("cedar-study --budgets above the chunk count", ["cedar-study", "--out", W("cs3"), "--keys", "64", "--chunk-size", "16",
                                                                "--budgets", "5"], 2,
          "budgets[0] is 5")
    r.run("cedar-study q/k/v beyond the array limit",
          ["cedar-study", "--out", W("cs4"), "--heads", "64", "--keys", "1048576", "--dim", "4096"], 2, "more than the limit",
          check=lambda c, o, e: "" if not os.path.exists(W("cs4")) else "an output directory was created")
    open(W("csfile"), "w").write("x")
    r.run("cedar-study --out an existing file", ["cedar-study", "--out", W("csfile")] + tiny, 2, "exists and is not a directory")
    r.run("cedar-study, a tiny grid", ["cedar-study", "--out", W("cs")] + tiny, 0, None)
    r.run("cedar-study --out holding an earlier study", ["cedar-study", "--out", W("cs")] + tiny, 2, "pass --force")
    r.run("cedar-study --run a missing directory", ["cedar-study", "--out", W("cs5"), "--run", W("nowhere")] + tiny, 2, "--run")
    r.area = "flags"
    r.run("train --patch 3 (does not divide 28)", ["train", "--patch", "3", "--dry-run"], 2, "patch 3 must divide the image size")
    r.run("train --patch -1", ["train", "--patch", "-1", "--dry-run"], 2, "--patch: -1 is outside")
    r.run("train --patch on a Swin preset", ["train", "--model", "ar-swin-tiny", "--dataset", "cifar10", "--patch", "4", "--dry-run"],
          2, "applies to the ViT presets")


def data_cases(r):
    r.area = "datasets"
    W = r.path
    d = W("data_magic")
    idx_files(d, "train", 4, 28, 28, img_magic=2049)
    idx_files(d, "t10k", 4, 28, 28)
    r.run("IDX with a wrong magic number", ["train", "--data-dir", d, "--max-steps", "1", "--out", W("r_d1")], 2, "magic number is 2049")
    d = W("data_count")
    idx_files(d, "train", 4000000000, 28, 28, pixels=b"", labels=b"")
    idx_files(d, "t10k", 4, 28, 28)
    r.run("IDX header promising 4 billion images", ["train", "--data-dir", d, "--max-steps", "1", "--out", W("r_d2")], 2, "exceed the limit")
    d = W("data_size")
    idx_files(d, "train", 4, 0, 28)
    idx_files(d, "t10k", 4, 28, 28)
    r.run("IDX images of 0 rows", ["train", "--data-dir", d, "--max-steps", "1", "--out", W("r_d3")], 2, "outside [1, 4096]")
    d = W("data_label")
    idx_files(d, "train", 4, 28, 28, labels=bytes([0, 1, 12, 3]))
    idx_files(d, "t10k", 4, 28, 28)
    r.run("IDX label out of range", ["train", "--data-dir", d, "--max-steps", "1", "--out", W("r_d4")], 2, "labels[2] is 12")
    d = W("data_empty_test")
    idx_files(d, "train", 256, 28, 28)
    idx_files(d, "t10k", 0, 28, 28)
    r.run("empty test split", ["train", "--data-dir", d, "--max-steps", "1", "--out", W("r_d5")], 2, "the test split is empty",
          check=lambda c, o, e: "" if not os.path.exists(W("r_d5")) else "a run directory was left behind")
    d = W("cifar")
    os.makedirs(d, exist_ok=True)
    for i in range(1, 6):
        open(os.path.join(d, "data_batch_%d.bin" % i), "wb").write(bytes(3073 * 2))
    open(os.path.join(d, "test_batch.bin"), "wb").write(bytes(3000))
    r.run("CIFAR file of the wrong size", ["train", "--dataset", "cifar10", "--data-dir", d, "--max-steps", "1", "--out", W("r_d6")], 2,
          "is not a positive multiple of the 3073-byte record")


TRAIN = ["train", "--train-subset", "512", "--batch-size", "64", "--max-steps", "4", "--checkpoint-every", "2", "--threads", "1",
         "--seed", "3", "--quiet"]


def train_cases(r):
    r.area = "runs"
    W = r.path
    run = W("run")
    shutil.rmtree(run, ignore_errors=True)
    r.run("train a tiny run (setup)", TRAIN + ["--out", run], 0, None)
    r.run("train again on the same --out", TRAIN + ["--out", run], 2, "already holds a run")
    r.run("--resume with a changed --lr (was: silently ignored)", ["train", "--resume", "--lr", "0.01", "--out", run], 2,
          "--lr 0.01 differs from the run's lr = 0.001")
    cfg_lr = json.load(open(os.path.join(run, "config.json")))["train"]
    cfg_lr["lr"] = 0.01
    json.dump(cfg_lr, open(W("r3_resume_cfg.json"), "w"))
    r.run("--resume --config F.json with F's lr changed (was: exit 0, the old lr kept)",
          ["train", "--resume", "--config", W("r3_resume_cfg.json"), "--out", run], 2, "differs from the run's lr = 0.001")
    # --quiet: the resume notices and evaluation lines are log lines on stderr; the row shows the result.
    r.run("--resume with the same values", ["train", "--resume", "--lr", "0.001", "--max-steps", "4", "--threads", "1", "--out", run,
                                            "--quiet"], 0, None)

    def recorded(code, out, err):
        cfg = json.load(open(os.path.join(run, "config.json")))
        ov = cfg.get("resume_overrides", [])
        if not ov or ov[-1]["changes"].get("max_steps", {}).get("to") != 6 or cfg["train"]["max_steps"] != 6:
            return "override not recorded in config.json: %s" % ov
        return ""
    r.run("--resume --max-steps 6 --override max_steps", ["train", "--resume", "--max-steps", "6", "--override", "max_steps", "--out", run,
                                                           "--quiet"], 0, None, check=recorded)
    r.run("--override of a setting that fixes the data", ["train", "--resume", "--seed", "4", "--override", "seed", "--out", run], 2,
          "cannot change on resume")
    r.run("--override naming a flag not given", ["train", "--resume", "--override", "lr", "--out", run], 2, "is not given")
    r.run("--resume of a directory that does not exist", ["train", "--resume", "--out", W("no_run")], 2, "does not exist",
          check=lambda c, o, e: "" if not os.path.exists(W("no_run")) else "a directory was created")

    # Weights of another architecture: a block run's model.pt in a full run's directory.
    other = W("run_block")
    shutil.rmtree(other, ignore_errors=True)
    r.run("train a second run, Block AttnRes (setup)", TRAIN + ["--residual", "block", "--block-size", "4", "--out", other], 0, None)
    mixed = W("run_mixed")
    shutil.rmtree(mixed, ignore_errors=True)
    shutil.copytree(run, mixed)
    shutil.copy(os.path.join(other, "model.pt"), os.path.join(mixed, "model.pt"))
    r.run("model.pt of another configuration (was: accuracy 0.08, no error)", ["trace", "--run", mixed, "--out", W("mixed.npz")], 2,
          "holds the weights of ar-vit-tiny (block 4")
    shutil.copy(os.path.join(other, "checkpoint.pt"), os.path.join(mixed, "checkpoint.pt"))
    r.run("checkpoint of another configuration on --resume", ["train", "--resume", "--out", mixed], 2, "holds the weights of")
    cfg = json.load(open(os.path.join(run, "config.json")))
    cfg["model"]["dim"] = "64"
    bad = W("run_badcfg")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(run, bad)
    json.dump(cfg, open(os.path.join(bad, "config.json"), "w"))
    r.run("config.json with a wrong type", ["trace", "--run", bad, "--out", W("bad.npz")], 2, "key 'dim' must be an integer")
    cfg["model"]["dim"] = 1 << 30
    json.dump(cfg, open(os.path.join(bad, "config.json"), "w"))
    r.run("config.json asking for a 2^30-wide model", ["trace", "--run", bad, "--out", W("bad.npz")], 2, "dim 1073741824 must be in")
    r.run("trace --out onto the run's model.pt", ["trace", "--run", run, "--out", os.path.join(run, "model.pt")], 2, "is the input")
    r.run("trace --split bogus", ["trace", "--run", run, "--split", "bogus", "--out", W("t.npz")], 2, "expected test or val")
    # CEDAR in a language model's prefill (issue 28): an image model's run, a zero chunk, no run.
    r.run("cedar-lm on an image model's run", ["cedar-lm", "--run", run, "--out", W("clm")], 2, "not a language model")
    r.run("cedar-lm --chunk 0", ["cedar-lm", "--run", run, "--out", W("clm"), "--chunk", "0"], 2, "--chunk: 0 is outside")
    r.run("cedar-lm --run a missing directory", ["cedar-lm", "--run", W("nowhere"), "--out", W("clm")], 2, "--run")


def long_train(out, steps=400):
    return ["train", "--train-subset", "2048", "--batch-size", "64", "--max-steps", str(steps), "--checkpoint-every", "1",
            "--threads", "1", "--seed", "3", "--quiet", "--out", out]


def start_study(r, toml, out, name, train, tables, extra=()):
    """Writes a one-seed study (`train` lines added to [train], `tables` after [model]; no probes,
    sensitivity or exact null) and starts `arcal run` on it into a fresh `out`: (argv, process).
    The precision is fixed (fp32): `auto` resolves by CPU and the run directories' names, which the
    table shows, hash the resolved config."""
    open(toml, "w").write("name = \"%s\"\n[train]\nseeds = [3]\nprecision = \"fp32\"\n%s\nmax_steps = 0\nbatch_size = 64\n"
                          "[model]\nstandard_twin = false\n%sprobes = false\nsensitivity = false\nexact_null = false\n"
                          % (name, train, tables))
    shutil.rmtree(out, ignore_errors=True)
    argv = ["run", "--config", toml, "--out", out] + list(extra)
    return argv, subprocess.Popen([r.arcal] + argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def concurrency_cases(r):
    r.area = "signals and locks"
    W = r.path
    busy = W("busy")
    shutil.rmtree(busy, ignore_errors=True)
    p = subprocess.Popen([r.arcal] + long_train(busy), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ok = wait_for(os.path.join(busy, "checkpoint.pt"), proc=p)
    r.run("a second train on a run directory in use (was: interleaved checkpoints)", long_train(busy), 2,
          "is in use by another arcal process (pid", check=lambda c, o, e: "" if ok else "the first run did not start")
    p.send_signal(signal.SIGTERM)
    err = stderr_of(p)
    r.record("SIGTERM during train: checkpoint, exit 3, resume command", long_train(busy), p.returncode, err, 3,
             "Resume with: arcal train --resume --out", then="SIGTERM")
    r.run("--resume --max-steps below the checkpoint's step", ["train", "--resume", "--max-steps", "1", "--override", "max_steps", "--out", busy],
          2, "past the run's end")
    r.run("resume after SIGTERM", ["train", "--resume", "--max-steps", "200", "--override", "max_steps", "--out", busy, "--quiet"], 0, None)
    intr = W("intr")
    shutil.rmtree(intr, ignore_errors=True)
    p = subprocess.Popen([r.arcal] + long_train(intr), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(os.path.join(intr, "checkpoint.pt"), proc=p)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    r.record("SIGINT during train", long_train(intr), p.returncode, err, 3, "stopped by SIGINT", then="SIGINT")
    # The second signal goes once the first one's notice is on stderr (so they cannot arrive together).
    errfile = W("intr2.stderr")
    with open(errfile, "w") as ef:
        p = subprocess.Popen([r.arcal] + long_train(W("intr2")), stdout=subprocess.DEVNULL, stderr=ef)
        wait_for(os.path.join(W("intr2"), "checkpoint.pt"), proc=p)
        p.send_signal(signal.SIGINT)
        t0 = time.time()
        while "stopping at the next resumable point" not in open(errfile).read() and time.time() - t0 < 30:
            time.sleep(0.001)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
    err = open(errfile).read()
    # A second signal ends the process with the signal itself (the shell shows 128 + 15 = 143).
    code = 128 + (-p.returncode) if p.returncode < 0 else p.returncode
    r.record("a second signal ends train at once", long_train(W("intr2")), code, err, 143, None, then="SIGINT, SIGTERM")

    out = W("study")
    argv, p = start_study(r, W("tiny.toml"), out, "tiny", "epochs = 3\ntrain_subset = 4096",
                          "[trace]\nsplit = \"val\"\n[audit]\npermutations = 100\nbins = 5\n")
    started = False
    t0 = time.time()
    while time.time() - t0 < 240 and p.poll() is None:
        runs = os.path.join(out, "runs")
        if os.path.isdir(runs) and any(os.path.exists(os.path.join(runs, d, "checkpoint.pt")) for d in os.listdir(runs)):
            started = True
            break
        time.sleep(0.05)
    r.run("a second arcal run on a study directory in use", argv, 2, "is in use by another arcal process",
          check=lambda c, o, e: "" if started else "the first study did not start")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=180)
    r.record("SIGTERM during arcal run (was: exit 2, no word)", argv, p.returncode, err, 3,
             "Resume with: arcal run --config", then="SIGTERM")
    rd = [d for d in os.listdir(os.path.join(out, "runs"))]
    kept = any(os.path.exists(os.path.join(out, "runs", d, "checkpoint.pt")) for d in rd)
    r.record("the interrupted study's training kept its checkpoint", ["(check: $W/study/runs/*/checkpoint.pt exists)"], 0 if kept else 1,
             "", 0, None, out="checkpoint kept" if kept else "")


def audit_beside_training_case(r):
    """SIGTERM while the audit runs on its thread beside a training (issue 26: arcal run starts the audit
    once the audited runs are traced): the audit stops at its next poll, the training keeps its
    checkpoint, exit 3 with the resume command, and no audit results are written."""
    r.area = "signals and locks"
    W = r.path
    out, toml = W("study_audit"), W("tiny_audit.toml")
    open(toml, "w").write("name = \"tinyaudit\"\n[train]\nseeds = [3]\nepochs = 1\ntrain_subset = 2048\n"
                          "batch_size = 64\n[execution]\nparallel = 1\n[trace]\nsplit = \"val\"\n"
                          "[audit]\npermutations = 100\nbins = 5\nsensitivity = true\nexact_null = false\n")
    shutil.rmtree(out, ignore_errors=True)
    argv = ["run", "--config", toml, "--out", out, "--no-report"]
    p = subprocess.Popen([r.arcal] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = False
    for line in p.stdout:  # "audit: 1 traces; ..." once the audited run is traced
        if line.startswith("audit:"):
            started = True
            break
    runs = os.path.join(out, "runs")
    t0 = time.time()  # until the twin has taken a step (its progress file), with the audit running
    while started and p.poll() is None and time.time() - t0 < 120:
        progress = [os.path.join(runs, d, "progress.txt") for d in os.listdir(runs) if "standard" in d]
        if any(os.path.exists(f) and open(f).read().split()[:1] not in ([], ["0"]) for f in progress):
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    rest, err = p.communicate(timeout=180)
    twin = [d for d in os.listdir(runs) if "standard" in d] if os.path.isdir(runs) else []
    audits = [d for d in os.listdir(out) if d.startswith("audit-")] if os.path.isdir(out) else []
    written = [d for d in audits if os.path.exists(os.path.join(out, d, "results.json"))]
    why = ("the audit did not start beside the twin's training" if not started else
           "the twin kept no checkpoint" if not any(os.path.exists(os.path.join(runs, d, "checkpoint.pt")) for d in twin) else
           "the stopped audit wrote results: %s" % written if written else "")
    r.record("SIGTERM while the audit runs beside a training: both stop, exit 3, no audit results", argv, p.returncode,
             err, 3, "Resume with: arcal run --config", extra_ok=not why, extra_why=why, then="SIGTERM")


# ---------------------------------------------------------------- round 2 (issue 24)

def dead_pid():
    """The pid of a process that has ended (for temporaries left by a kill -9)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def dead_tag():
    """The process tag (PID-START, core/ownership.hpp) of a process that has ended."""
    return "%d-%d" % (dead_pid(), 12345)


def owned_temp_dir(path, tag):
    """A temporary directory as a dead arcal left it: its name ends in the tag, its marker names it."""
    os.makedirs(path, exist_ok=True)
    open(os.path.join(path, ".arcal-output"), "w").write("made by arcal (process %s); left by a kill -9\n" % tag)


def tmpfs(path, size):
    """A small tmpfs at `path` (a full disk on demand); False when mounting is not allowed."""
    os.makedirs(path, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", path], capture_output=True).returncode == 0


def fill(path, leave=0):
    """Fills the file system of directory `path` to the last byte (unbuffered writes, then single bytes),
    then frees `leave` bytes again."""
    fd = os.open(os.path.join(path, "filler"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for chunk in (b"\0" * 65536, b"\0"):
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                pass
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)


def address_space_cases(r, argv):
    """`arcal metrics` under address-space limits (the issue's ulimit -v 600000 and the start-up abort)."""
    import resource
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (600000 * 1024, 600000 * 1024))
    try:
        p = subprocess.run([r.arcal] + argv, capture_output=True, text=True, timeout=120, preexec_fn=limit)
        # Which allocation fails first moves between machines and runs (LibTorch's start-up, libzip's
        # own while it opens the archive, or the array's buffer), so the row shows "... out of memory ...".
        code, err = p.returncode, p.stderr
        if err.startswith("arcal: failed: ") and "out of memory" in err:
            err = "arcal: failed: ... out of memory ..."
    except subprocess.TimeoutExpired:
        code, err = "timeout", "(no exit within 120 s)"
    # Since `arcal metrics` loads no LibTorch (issue 52) it fits in 600 MB and finishes; where it does
    # not, the answer must be exit 1 naming the out-of-memory, never a hang.
    if code == 0:
        r.record("out of memory under ulimit -v 600000 (was: never exits)", ["(ulimit -v 600000;"] + [r.show_cmd(argv) + ")"],
                 code, err, 0, None, out="exit 0: the analysis command loads no LibTorch and fits in 600 MB")
    else:
        r.record("out of memory under ulimit -v 600000 (was: never exits)", ["(ulimit -v 600000;"] + [r.show_cmd(argv) + ")"],
                 code, err, 1, "out of memory")
    # Between 600 and 800 MB of address space the limit falls in LibTorch's own start-up on some
    # machines (700000 here: an uncaught std::bad_alloc before main, rc 134); whichever stage it hits,
    # the answer is exit 0 or exit 1 with an out-of-memory message, never an abort or a hang. (Below
    # about 550 MB the dynamic loader cannot map the libraries at all: its own exit 127, before arcal.)
    bad = []
    for kb in range(600000, 800001, 25000):
        lim = lambda kb=kb: resource.setrlimit(resource.RLIMIT_AS, (kb * 1024, kb * 1024))
        try:
            p = subprocess.run([r.arcal] + argv, capture_output=True, text=True, timeout=120, preexec_fn=lim)
            if not (p.returncode == 0 or (p.returncode == 1 and p.stderr.startswith("arcal: failed: ") and "out of memory" in p.stderr)):
                bad.append("%d KB: rc %d %s" % (kb, p.returncode, p.stderr.strip().splitlines()[-1:] if p.stderr else ""))
        except subprocess.TimeoutExpired:
            bad.append("%d KB: no exit within 120 s" % kb)
    r.record("ulimit -v 600000..800000 in steps of 25000 (was: abort with an uncaught std::bad_alloc at 700000)",
             ["(for each limit: ulimit -v KB;", r.show_cmd(argv) + ")"], 1 if bad else 0, "; ".join(bad), 0, None,
             out="every limit: exit 0, or exit 1 naming out of memory" if not bad else "")


def round2_cases(r):
    W = r.path
    r.area = "round 2: crash"
    deep = trace(60, 3)
    deep["meta"] = np.array("[" * 100000 + "]" * 100000)
    save(W("deep_meta.npz"), deep)
    r.run("trace meta nested 100,000 deep (was: segfault)", ["audit", W("deep_meta.npz"), "--out", W("r2_deep"), "--no-probes",
                                                             "--permutations", "10"], 2,
          "meta: line 1: arrays and objects nested more than 64 deep",
          check=lambda c, o, e: "" if not os.path.exists(W("r2_deep")) else "an output directory was left")

    # Out of memory under an address-space limit (the ulimit -v 600000): exit 1 naming the
    # file and array, never a hang (OpenBLAS's exit handler waited forever for a worker retrying its
    # buffer). The size it could not hold depends on the machine, so the row shows "holding ...".
    argv = ["metrics", W("in_oom.npz"), "--bootstrap", "0"]
    save(W("in_oom.npz"), trace(2000, 10))
    if r.sanitized:
        why = "not under the sanitizers: ASan's shadow memory does not fit in any ulimit -v (checked in the normal build)"
        r.keep_committed_row("out of memory under ulimit -v 600000", why)
        r.keep_committed_row("ulimit -v 600000..800000", why)
    else:
        address_space_cases(r, argv)

    # kill -9 of arcal run: the training child ends with it, and its RUN/.lock does not block.
    out = W("r2_kill")
    argv, p = start_study(r, W("r2_kill.toml"), out, "kill", "epochs = 50\ntrain_subset = 2048\ncheckpoint_every = 1",
                          "[audit]\npermutations = 10\n", ["--no-report"])
    child, rd = None, None
    t0 = time.time()
    # Killed once the child has written its checkpoint twice (checkpoint_every = 1: at step 2 or later),
    # so that the resume below is past the run's end whatever the machine's speed (at step 1 exactly it
    # would resume and exit 0: a slow build, e.g. under the sanitizers, got there).
    first_mtime = None
    while time.time() - t0 < 240 and p.poll() is None and child is None:
        runs = os.path.join(out, "runs")
        for d in (os.listdir(runs) if os.path.isdir(runs) else []):
            lock = os.path.join(runs, d, ".lock")
            ckpt = os.path.join(runs, d, "checkpoint.pt")
            if os.path.exists(ckpt) and os.path.exists(lock):
                mtime = os.stat(ckpt).st_mtime_ns
                if first_mtime is None:
                    first_mtime = mtime
                    continue
                m = re.search(r"pid (\d+)", open(lock).read())
                if m and mtime != first_mtime:
                    child, rd = int(m.group(1)), os.path.join(runs, d)
        time.sleep(0.05)
    p.kill()
    p.wait()
    gone = False
    t0 = time.time()
    while child is not None and time.time() - t0 < 60:
        try:
            os.kill(child, 0)
            st = open("/proc/%d/stat" % child).read().split()[2]
            if st == "Z":
                gone = True
                break
        except (ProcessLookupError, FileNotFoundError):
            gone = True
            break
        time.sleep(0.1)
    r.record("kill -9 of arcal run: its training child ends too (was: left running, holding RUN/.lock)",
             ["(kill -9 of: arcal run --config $W/r2_kill.toml --out $W/r2_kill --no-report)"], 0 if gone else 1, "", 0, None,
             out="the training child ended" if gone else "", extra_ok=child is not None, extra_why="no training child seen")
    if rd is not None:
        r.run("the dead child's RUN/.lock does not block a resume", ["train", "--resume", "--max-steps", "1", "--override", "max_steps",
                                                                       "--out", rd], 2, "past the run's end")

    r.area = "round 2: full disk"
    disk = W("r2_disk")
    mounted = tmpfs(disk, "12m")
    if mounted:
        try:
            run = os.path.join(disk, "run")
            r.run("train a tiny run onto a small disk (setup)", TRAIN + ["--out", run], 0, None)
            before = open(os.path.join(run, "checkpoint.pt"), "rb").read()
            fill(disk, leave=256 << 10)  # room for config.json and log.jsonl, not for a 4 MB checkpoint

            def intact(code, out, err):
                left = [f for f in os.listdir(run) if ".tmp." in f]
                if left:
                    return "temporaries left: %s" % left
                return "" if open(os.path.join(run, "checkpoint.pt"), "rb").read() == before else "the checkpoint changed"
            r.run("training onto a full disk (was: uncaught c10::Error, rc 134, temporary left)",
                  ["train", "--resume", "--max-steps", "6", "--override", "max_steps", "--threads", "1", "--out", run], 1,
                  "No space left on device (ENOSPC)", check=intact)
            os.remove(os.path.join(disk, "filler"))
            r.run("--resume after the disk has room again", ["train", "--resume", "--max-steps", "6", "--override", "max_steps",
                                                             "--threads", "1", "--out", run, "--quiet"], 0, None)
            shutil.rmtree(run, ignore_errors=True)
            fill(disk)
            r.run("a trace written onto a full disk (was: exit 2, no cause)", ["simulate", "--n", "2000", "--out",
                                                                               os.path.join(disk, "s.npz")], 1,
                  "No space left on device (ENOSPC)",
                  check=lambda c, o, e: "" if not [f for f in os.listdir(disk) if f.startswith("s.npz")] else "a temporary was left")
            # audit --force onto a nearly full disk used to leave a new diagnostic.csv beside the old
            # results.json (exit 2): the set is written to DIR/.tmp-PID and renamed only when complete.
            os.remove(os.path.join(disk, "filler"))
            save(W("r2_disk_trace.npz"), trace(1500, 3, routing=True, seed=5))
            aud_d = os.path.join(disk, "aud")
            r.run("an audit onto the small disk (setup)", ["audit", W("r2_disk_trace.npz"), "--out", aud_d, "--permutations", "20",
                                                           "--no-probes", "--quiet"], 0, None)
            old_set = {f: open(os.path.join(aud_d, f), "rb").read() for f in os.listdir(aud_d) if os.path.isfile(os.path.join(aud_d, f))}
            fill(disk, leave=4096)

            def same_set(code, out, err):
                left = [f for f in os.listdir(aud_d) if f.startswith(".tmp-")]
                if left:
                    return "temporaries left: %s" % left
                now = {f: open(os.path.join(aud_d, f), "rb").read() for f in os.listdir(aud_d) if os.path.isfile(os.path.join(aud_d, f))}
                changed = sorted(f for f in set(old_set) | set(now) if f != ".lock" and old_set.get(f) != now.get(f))
                return "" if not changed else "files of the old set changed: %s" % changed
            r.run("audit --force onto a nearly full disk (was: exit 2, a new diagnostic.csv beside the old results.json)",
                  ["audit", W("r2_disk_trace.npz"), "--out", aud_d, "--force", "--permutations", "30", "--seed", "9",
                   "--no-probes", "--quiet"], 1, "No space left on device (ENOSPC)", check=same_set)
        finally:
            subprocess.run(["umount", disk], capture_output=True)
    else:
        r.record("full-disk cases need a tmpfs (mount as root)", ["(mount -t tmpfs)"], 1, "", 0, None)

    r.area = "round 2: data loss"
    subprocess.run([r.arcal, "simulate", "--out", W("r2_sim.npz"), "--n", "600", "--classes", "3", "--points", "2"],
                   check=True, capture_output=True)
    aud = W("r2_audit")
    shutil.rmtree(aud, ignore_errors=True)
    r.run("an audit (setup)", ["audit", W("r2_sim.npz"), "--out", aud, "--permutations", "20", "--no-probes", "--quiet"], 0, None)
    user = W("r2_user")
    shutil.rmtree(user, ignore_errors=True)
    os.makedirs(user)
    open(os.path.join(user, "thesis.tex"), "w").write("my thesis")
    open(os.path.join(user, "report.md"), "w").write("my notes")
    kept = lambda c, o, e: "" if open(os.path.join(user, "thesis.tex")).read() == "my thesis" else "thesis.tex is gone"
    r.run("report --out a directory of the user's (was: replaced whole, thesis.tex gone)", ["report", aud, "--out", user], 2,
          "was not made by arcal report", check=kept)
    r.run("train --out a directory of the user's (was: config.json, log.jsonl, model.pt overwritten)",
          TRAIN + ["--out", user], 2, "holds report.md and was not made by arcal train", check=kept)
    os.makedirs(W("r2_user_study"), exist_ok=True)
    open(W("r2_user_study", "study.toml"), "w").write("# mine\n")
    r.run("run --out a directory holding the user's study.toml (was: overwritten)", ["run", "--out", W("r2_user_study"), "--no-report"], 2,
          "holds study.toml and was not made by arcal run",
          check=lambda c, o, e: "" if open(W("r2_user_study", "study.toml")).read() == "# mine\n" else "study.toml changed")
    r.run("audit --out a directory of the user's", ["audit", W("r2_sim.npz"), "--out", user, "--no-probes", "--permutations", "10"], 2,
          "holds report.md and was not made by arcal audit", check=kept)
    shutil.rmtree(W("r2_user_force"), ignore_errors=True)
    shutil.copytree(user, W("r2_user_force"))
    r.run("report --out a directory of the user's, with --force", ["report", aud, "--out", W("r2_user_force"), "--force"], 0, None,
          check=lambda c, o, e: "" if os.path.exists(W("r2_user_force", "report.html")) else "no report written")

    # A second audit into a directory in use is refused (the lock is held for the whole audit).
    big = W("r2_big.npz")
    subprocess.run([r.arcal, "simulate", "--out", big, "--n", "20000", "--classes", "3", "--points", "2"], check=True,
                   capture_output=True)
    busy = W("r2_busy")
    shutil.rmtree(busy, ignore_errors=True)
    p = subprocess.Popen([r.arcal, "audit", big, "--out", busy, "--permutations", "20000", "--no-probes", "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = wait_for(os.path.join(busy, ".lock"), proc=p)
    r.run("a second audit into an --out in use (was: the later finisher replaced the first's results)",
          ["audit", W("r2_sim.npz"), "--out", busy, "--permutations", "20", "--no-probes"], 2, "is in use by another arcal process",
          check=lambda c, o, e: "" if started else "the first audit did not start")
    p.wait(timeout=600)

    # A full result set or none: files of an earlier audit that the new one lacks are removed, and a
    # dead writer's temporary set is removed.
    tag = dead_tag()
    owned_temp_dir(os.path.join(aud, ".tmp-" + tag), tag)
    open(os.path.join(aud, "probes.csv"), "w").write("an earlier audit's\n")

    def one_set(code, out, err):
        left = [f for f in os.listdir(aud) if f.startswith(".tmp-") or f == "probes.csv"]
        return "left: %s" % left if left else ""
    r.run("audit --force over an earlier audit: one result set, no temporaries", ["audit", W("r2_sim.npz"), "--out", aud,
                                                                                  "--permutations", "20", "--no-probes", "--force",
                                                                                  "--quiet"], 0, None, check=one_set)

    r.area = "round 2: wrong answers"
    cal = W("r2_cal.json")
    subprocess.run([r.arcal, "calibrate", "--fit", W("r2_sim.npz"), "--apply", W("r2_sim.npz"), "--method", "histogram",
                    "--out", W("r2_cal.npz"), "--save", cal], check=True, capture_output=True)
    d = json.load(open(cal))
    d["value"][0] = 7.0
    json.dump(d, open(W("r2_bad_cal.json"), "w"))
    r.run("calibrate --params with a histogram value of 7 (was: G.npz written, exit 2)",
          ["calibrate", "--params", W("r2_bad_cal.json"), "--apply", W("r2_sim.npz"), "--out", W("r2_G.npz")], 2,
          "key 'value'[0] is 7, but must be finite and in [0, 1]",
          check=lambda c, o, e: "" if not os.path.exists(W("r2_G.npz")) else "G.npz was written")
    d = json.load(open(cal))
    d["method"], d["temperature"], d["beta"] = "temperature", 2.0, 1.0
    json.dump(d, open(W("r2_bad_t.json"), "w"))
    r.run("calibrate --params with an edited temperature (was: ignored, the stored beta won)",
          ["calibrate", "--params", W("r2_bad_t.json"), "--apply", W("r2_sim.npz"), "--out", W("r2_G.npz")], 2,
          "temperature must be 1/beta", check=lambda c, o, e: "" if not os.path.exists(W("r2_G.npz")) else "G.npz was written")

    r.area = "round 2: leftovers and messages"
    bad = W(b"r2_\xff.npz".decode("utf-8", "surrogateescape"))
    shutil.copy(W("r2_sim.npz"), bad)
    r.run("a trace path that is not UTF-8 (was: json type_error.316 after all the work)",
          ["audit", bad, "--out", W("r2_nonutf8"), "--no-probes", "--permutations", "10"], 2, "is not valid UTF-8",
          check=lambda c, o, e: "" if not os.path.exists(W("r2_nonutf8")) else "an output directory was left")
    pid = dead_tag()
    for f in ("r2_stale.npz.tmp.%s" % pid, "r2_stale.npz.tmp.%s.Ab12Cd" % pid):
        open(W(f), "w").write("left by a kill -9")
    r.run("stale temporaries of a dead writer (trace and libzip's) are removed",
          ["simulate", "--n", "100", "--out", W("r2_stale.npz")], 0, None,
          check=lambda c, o, e: "" if not [f for f in os.listdir(r.work) if f.startswith("r2_stale.npz.")] else "temporaries left")
    owned_temp_dir(os.path.join(aud, "report.tmp-%s" % pid), pid)
    r.run("a dead report writer's report.tmp-PID is removed", ["report", aud], 0, None,
          check=lambda c, o, e: "" if not os.path.exists(os.path.join(aud, "report.tmp-%s" % pid)) else "report.tmp-PID left")
    long_name = "n" * 246 + ".npz"  # 250 bytes: legal, but NAME.tmp.PID is not
    r.run("a legal 250-byte file name (was: refused, the temporary's name overflowed 255 bytes)",
          ["simulate", "--n", "100", "--out", W(long_name)], 0, None,
          check=lambda c, o, e: "" if os.path.exists(W(long_name)) else "not written")
    fake = W("r2_fakebin")
    os.makedirs(fake, exist_ok=True)
    open(os.path.join(fake, "gnuplot"), "w").write("#!/bin/sh\necho \"line 3: undefined variable: sans\" >&2\nexit 1\n")
    os.chmod(os.path.join(fake, "gnuplot"), 0o755)
    env = dict(os.environ, PATH=fake + ":" + os.environ.get("PATH", ""))
    r.run("a failing gnuplot: its error is shown (was: a log in a deleted directory)", ["report", aud, "--out", W("r2_rep_gp")], 2,
          "line 3: undefined variable: sans", env=env)
    anti = trace(200, 3)
    anti["labels"] = np.argmin(anti["logits"], axis=1).astype(np.int64)
    anti["logits"] = anti["logits"] * 4
    save(W("r2_anti.npz"), anti)
    r.run("temperature scaling that fails says why", ["calibrate", W("r2_anti.npz"), "--method", "temperature", "--out",
                                                      W("r2_anti_cal.npz")], 1, "no positive temperature can calibrate")
    rd = W("r2_deleted")
    shutil.rmtree(rd, ignore_errors=True)
    p = subprocess.Popen([r.arcal] + long_train(rd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(os.path.join(rd, "checkpoint.pt"), proc=p)
    t0 = time.time()
    while os.path.exists(rd) and time.time() - t0 < 30:  # the trainer may add a file while it is removed
        shutil.rmtree(rd, ignore_errors=True)
    err = stderr_of(p)
    # Where `rm -r` catches the writer decides which of write_file_atomic's two messages comes: the
    # directory already gone, or the temporary deleted (file by file, before the directory) between its
    # write and the rename. Both are right; the table shows the first, so it does not drift with timing.
    shown = re.sub(r"its temporary was deleted from (\S+) before the rename; the directory is being emptied or "
                   r"does not exist", r"the directory \1 does not exist", err)
    r.record("RUN/ deleted during training (was: a LibTorch backtrace)", long_train(rd), p.returncode, shown, 2,
             "does not exist (was it removed while arcal was working?)", then="rm -r RUN",
             extra_ok="Exception raised from" not in err, extra_why="a backtrace was printed")
    # Names from the data in report.md: Markdown passes HTML through, so it is escaped.
    inj = trace(300, 3, routing=True)
    inj["meta"] = np.array(json.dumps({"model": "<script>alert(1)</script>", "residual": "full"}))
    save(W("r2_inject.npz"), inj)
    inj_dir = W("r2_inject")
    shutil.rmtree(inj_dir, ignore_errors=True)
    subprocess.run([r.arcal, "audit", W("r2_inject.npz"), "--out", inj_dir, "--permutations", "20", "--no-probes", "--quiet"],
                   check=True, capture_output=True)
    r.run("report.md with a <script> in a trace's meta (was: written unescaped)", ["report", inj_dir], 0, None,
          check=lambda c, o, e: "" if "<script>" not in open(os.path.join(inj_dir, "report", "report.md")).read()
          else "report.md holds <script>")


def round3_cases(r):
    """Issue 55: one case per fault class (links and ownership, names, small n, silent failures,
    signals, messages)."""
    W = r.path
    r.area = "round 3: links and ownership"
    x = save(W("r3_x.npz"), trace(200, 3, routing=True))
    notes = W("r3_notes.txt")

    def notes_kept(c, o, e):
        return "" if open(notes).read() == "my notes\n" else "the link's target was changed"

    open(notes, "w").write("my notes\n")
    d = W("r3_lockdir")
    os.makedirs(d)
    os.symlink(notes, os.path.join(d, ".lock"))
    r.run("DIR/.lock a link to the user's file, audit --force (was: target truncated)",
          ["audit", x, "--out", d, "--force", "--no-probes", "--permutations", "19"], 2, "symbolic link", check=notes_kept)
    d = W("r3_hardlock")
    os.makedirs(d)
    os.link(notes, os.path.join(d, ".lock"))
    r.run("DIR/.lock a hard link to the user's file, audit --force",
          ["audit", x, "--out", d, "--force", "--no-probes", "--permutations", "19"], 2, "another hard link", check=notes_kept)
    d = W("r3_dangling")
    os.makedirs(d)
    os.symlink(W("r3_created_through_link"), os.path.join(d, ".arcal-output"))
    r.run("a dangling .arcal-output link (was: a file created where it points)",
          ["audit", x, "--out", d, "--no-probes", "--permutations", "19"], 2, "is not arcal's marker",
          check=lambda c, o, e: "" if not os.path.lexists(W("r3_created_through_link")) else "a file was created through the link")
    subprocess.run([r.arcal, "audit", x, "--out", W("r3_aud"), "--no-probes", "--permutations", "19", "--quiet"],
                   check=True, capture_output=True)
    os.makedirs(W("r3_aud", "report.old-2024"))
    open(W("r3_aud", "report.old-2024", "draft.md"), "w").write("draft\n")
    r.run("the user's DIR/report.old-2024 beside a report (was: deleted as a dead writer's)", ["report", W("r3_aud")], 0, None,
          check=lambda c, o, e: "" if os.path.exists(W("r3_aud", "report.old-2024", "draft.md")) else "report.old-2024 was deleted")
    os.makedirs(W("r3_aud", ".tmp-notes"))
    open(W("r3_aud", ".tmp-notes", "n.txt"), "w").write("n\n")
    r.run("the user's DIR/.tmp-notes in an audit directory (was: deleted)",
          ["audit", x, "--out", W("r3_aud"), "--force", "--no-probes", "--permutations", "19", "--quiet"], 0, None,
          check=lambda c, o, e: "" if os.path.exists(W("r3_aud", ".tmp-notes", "n.txt")) else ".tmp-notes was deleted")
    os.makedirs(W("r3_paper", "figures"))
    open(W("r3_paper", "figures", "fig1.pdf"), "w").write("%PDF\n")
    r.run("report --out a user's paper/ holding figures/ (was: replaced without --force)", ["report", W("r3_aud"), "--out", W("r3_paper")],
          2, "was not made by arcal report",
          check=lambda c, o, e: "" if os.path.exists(W("r3_paper", "figures", "fig1.pdf")) else "fig1.pdf was deleted")
    os.symlink(W("r3_paper"), W("r3_paper_link"))
    r.run("report --out a link to a directory", ["report", W("r3_aud"), "--out", W("r3_paper_link"), "--force"], 2, "is a symbolic link",
          check=lambda c, o, e: "" if os.path.exists(W("r3_paper", "figures", "fig1.pdf")) else "fig1.pdf was deleted")
    cwd = os.getcwd()
    r.run("calibrate --out G.npz --save $PWD/G.npz (was: G.npz held the JSON)",
          ["calibrate", x, "--method", "temperature", "--out", W("r3_G.npz"), "--save", W("r3_sub", "..", "r3_G.npz")], 2,
          "is the same path as --out")

    r.area = "round 3: names and small n"
    a = trace(200, 3, seed=4)
    a["features"] = np.random.default_rng(1).random((200, 2))
    a["feature_names"] = np.array(["conf", "conf"])
    r.run("two feature columns with one name (was: both tests read column 0)", ["audit", save(W("r3_dupfeat.npz"), a), "--out",
                                                                                W("r3_o1"), "--no-probes"], 2, "names columns 0 and 1")
    a = trace(200, 3, routing=True, seed=5)
    a["features"] = np.random.default_rng(2).random((200, 1))
    a["feature_names"] = np.array(["re"])
    r.run("a feature named like the routing statistic re (was: shadowed)", ["audit", save(W("r3_refeat.npz"), a), "--out", W("r3_o2"),
                                                                           "--no-probes"], 2, "the name of the routing statistic")
    r.run("--stat re,re (was: one trace counted twice)", ["audit", x, "--stat", "re,re", "--out", W("r3_o3"), "--no-probes"], 2,
          "is listed twice")
    b = trace(200, 3, routing=True)
    perm = np.random.default_rng(9).permutation(200)
    b = {k: (v[perm] if k in ("logits", "labels", "routing") else v) for k, v in b.items()}
    r.run("the same trace with its rows permuted as a second seed (was: 'stable, 2 of 2 seeds')",
          ["audit", x, save(W("r3_perm.npz"), b), "--out", W("r3_o4"), "--no-probes"], 2, "with its rows reordered")
    open(W("r3_twice.toml"), "w").write("[data]\ndatasets = [\"fashion-mnist\", \"fashion-mnist\"]\n")
    r.run("a study listing a dataset twice (was: two runs in one directory)", ["run", "--config", W("r3_twice.toml"), "--print-config"], 2,
          "lists 'fashion-mnist' twice")
    y = np.arange(20) % 4
    z = np.full((20, 4), -3.0, dtype=np.float32)
    z[np.arange(20), y] = 3.0
    allc = save(W("r3_allcorrect.npz"), {"logits": z, "labels": y.astype(np.int64)})

    def honest_accuracy(code, out, err):
        ci = json.loads(out)["ci"]["accuracy"]
        return "" if ci[0] < 0.9 and ci[1] == 1.0 else "accuracy interval %s for 20/20" % ci
    r.run("20/20 correct: an exact accuracy interval (was: [1, 1])", ["metrics", allc, "--json"], 0, None, check=honest_accuracy)
    one = save(W("r3_one.npz"), {"logits": z[:1], "labels": y[:1].astype(np.int64)})
    r.run("a calibrator fitted on one example (was: accepted without a word)",
          ["calibrate", "--fit", one, "--apply", x, "--method", "isotonic", "--out", W("r3_cal1.npz")], 2, "needs at least 2")

    r.area = "round 3: silent failures"
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            p = subprocess.run([r.arcal, "metrics", x, "--json"], stdout=full, stderr=subprocess.PIPE, text=True)
        r.record("metrics --json > /dev/full (was: exit 0, nothing written)", ["metrics", x, "--json"], p.returncode, p.stderr, 1,
                 "cannot write the results to standard output", then="stdout on /dev/full")
        with open("/dev/full", "w") as full:
            p = subprocess.run([r.arcal, "run", "--print-config"], stdout=full, stderr=subprocess.PIPE, text=True)
        r.record("run --print-config > /dev/full", ["run", "--print-config"], p.returncode, p.stderr, 1,
                 "cannot write the results to standard output", then="stdout on /dev/full")
    a = trace(300, 3, seed=6)
    a["features"] = np.random.default_rng(3).random((300, 1))
    a["feature_names"] = np.array(["corruption severity"])
    subprocess.run([r.arcal, "audit", save(W("r3_space.npz"), a), "--out", W("r3_space"), "--no-probes", "--permutations", "19", "--quiet"],
                   check=True, capture_output=True)
    r.run("report of a feature named 'corruption severity' (was: gnuplot failed)", ["report", W("r3_space")], 0, None)
    hup = W("r3_hup")
    p = subprocess.Popen([r.arcal] + long_train(hup), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(os.path.join(hup, "checkpoint.pt"), proc=p)
    p.send_signal(signal.SIGHUP)
    err = stderr_of(p)
    r.record("SIGHUP during train (was: exit 129, no checkpoint)", long_train(hup), p.returncode, err, 3,
             "stopped by SIGHUP", then="SIGHUP")

    r.area = "round 3: messages"
    bz = W("r3_bzip2.npz")
    with zipfile.ZipFile(bz, "w", zipfile.ZIP_BZIP2) as zf:
        for k, v in trace(40, 3).items():
            zf.writestr(k + ".npy", npy_bytes(v))
    r.run("an npz with bzip2 members (was: 'corrupt or crafted (deflate)')", ["metrics", bz], 2, "compressed with bzip2")
    a = trace(40, 3)
    a["logits"] = (np.abs(a["logits"]) * 100).astype(np.uint16)
    r.run("uint16 logits (was: reported as dtype <i4)", ["metrics", save(W("r3_u2.npz"), a)], 2, "has dtype <u2")
    fifo = W("r3_fifo.npz")
    os.mkfifo(fifo)
    r.run("a FIFO as trace (was: 'Operation not supported')", ["metrics", fifo], 2, "is a FIFO (named pipe), not a regular file",
          timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arcal", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")):
        print("SKIP: dataset-fashion-mnist is not installed")
        return 77
    work = os.path.realpath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    r = Runner(os.path.realpath(a.arcal), work, open(a.table).read() if os.path.exists(a.table) else "")
    t0 = time.time()
    groups = [files_cases, flag_cases, toml_cases, report_cases, path_cases, cedar_cases, data_cases, train_cases, concurrency_cases,
              round2_cases, audit_beside_training_case, round3_cases]
    for g in groups:
        if a.only and a.only not in g.__name__:
            continue
        g(r)
    head = ["# Hostile input: every case and its answer", "",
            "Generated by `tests/hostile/hostile_cases.py` (ctest `hostile_cases`, which fails when this file differs from",
            "what the cases produce; `--update` rewrites it). Exit codes: 0 ok, 1 failure while working, 2 usage or",
            "input error, 3 interrupted (resumable), 143 ended by a second signal. Messages: the last line of stderr, with the",
            "work directory as `$W` and pids, hosts, times and step numbers as PID, HOST, TIME, N. See docs/hostile_input.md.",
            "", "| # | area | case | command | exit | message |", "|---|---|---|---|---|---|"]
    table = "\n".join(head + r.rows) + "\n"
    open(os.path.join(work, "hostile_cases.md"), "w").write(table)
    print("%d cases in %.0f s; %d failed" % (r.n, time.time() - t0, len(r.failures)))
    for f in r.skipped:
        print("SKIPPED " + f)
    for f in r.failures:
        print("FAIL " + f)
    status = 1 if r.failures else 0
    if a.only:
        return status
    if a.update:
        open(a.table, "w").write(table)
        print("wrote " + a.table)
    else:
        old = open(a.table).read() if os.path.exists(a.table) else ""
        if old != table:
            print("DRIFT: %s differs from what the cases produce (rerun with --update after checking):" % a.table)
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), table.splitlines(True), a.table, "produced"))
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
