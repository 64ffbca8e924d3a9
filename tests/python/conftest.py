"""Shared fixtures of the Python module's tests (run by ctest: `python -m pytest tests/python` with
PYTHONPATH=build/python). The CLI is run as a subprocess with an argument list, never through a shell."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("ARCAL_BUILD_DIR", os.path.join(SOURCE, "build"))
ARCAL = os.path.join(BUILD, "arcal")
sys.path.insert(0, os.path.join(SOURCE, "bench", "reference"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "reference"))


class CliResult:
    def __init__(self, proc):
        self.code, self.out, self.err = proc.returncode, proc.stdout, proc.stderr

    def json(self):
        assert self.code == 0, self.err
        return json.loads(self.out)


def openblas_core():
    """The OpenBLAS kernel set this process runs (None without OpenBLAS). `arcal` re-executes itself with
    native kernels when OpenBLAS falls back to "Prescott"; a Python process keeps what it loaded, so the
    CLI is run with this one and the LibTorch probes' float32 sums match bit for bit."""
    import ctypes
    try:
        lib = ctypes.CDLL("libblas.so.3")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


def run_cli(*args, cwd=None):
    """build/arcal ARGS..., stdout and stderr captured, with this process's OpenBLAS kernels."""
    env = dict(os.environ)
    core = openblas_core()
    if core and "OPENBLAS_CORETYPE" not in env:
        env["OPENBLAS_CORETYPE"] = core
    return CliResult(subprocess.run([ARCAL, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env))


@pytest.fixture
def cli():
    if not os.path.exists(ARCAL):
        pytest.skip(f"{ARCAL} not built")
    return run_cli


def softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e * (1.0 / e.sum(axis=1, keepdims=True))


def make_predictions(n, k, seed, temp=1.7, dtype=np.float32):
    """logits [n, k] and labels drawn from softmax(logits / temp): temp > 1 is overconfident."""
    rng = np.random.default_rng(seed)
    z = (rng.normal(size=(n, k)) * 3.0).astype(dtype)
    q = softmax(z.astype(np.float64) / temp)
    u = rng.random(n)[:, None]
    y = (q.cumsum(axis=1) < u).sum(axis=1).clip(0, k - 1).astype(np.int64)
    return z, y


def simulated_trace(n, k, seed, effect=0.0, points=3):
    """A trace with routing whose entropy carries `effect` about correctness (numpy only): logits from
    make_predictions, routing rows from a Dirichlet whose concentration moves with correctness."""
    z, y = make_predictions(n, k, seed)
    rng = np.random.default_rng(seed + 1000)
    correct = (softmax(z).argmax(axis=1) == y)
    sources = np.arange(points, dtype=np.int32) + 2
    s_max = int(sources.max())
    routing = np.zeros((n, points, s_max), np.float32)
    for p, s in enumerate(sources):
        alpha = np.ones(s) * (1.0 + effect * 20 * correct[:, None])
        routing[:, p, :s] = rng.gamma(alpha)
        routing[:, p, :s] /= routing[:, p, :s].sum(axis=1, keepdims=True)
    return {"logits": z, "labels": y, "routing": routing, "routing_sources": sources,
            "meta": json.dumps({"model": "sim", "seed": seed})}
