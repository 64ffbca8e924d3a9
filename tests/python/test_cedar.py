"""arcal.cedar_attention against a NumPy dense attention: exact at full budget (every chunk expanded),
dense and causal methods, 2-D inputs, converted dtypes, the same output as `arcal cedar`, bad input."""
import numpy as np
import pytest

import arcal


def dense_reference(q, k, v, causal=False):
    """softmax(q kᵀ / √d) v per head in float64; causal: query i sits at key position N - Nq + i."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(q.shape[-1])
    if causal:
        nq, n = q.shape[1], k.shape[1]
        pos = np.arange(nq)[:, None] + n - nq
        s = np.where(np.arange(n)[None, :] <= pos, s, -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", w, v)


def qkv(h=2, nq=48, n=512, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in [(h, nq, d), (h, n, d), (h, n, d)]]


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("method", ["cedar", "topk"])
def test_full_budget_is_dense(method):
    q, k, v = qkv()
    out, expanded = arcal.cedar_attention(q, k, v, method=method, chunk_size=64, budget=8)  # 512 / 64 = 8 chunks
    assert out.shape == q.shape and out.dtype == np.float32 and expanded.shape == (2, 48)
    assert expanded.dtype == np.int32 and expanded.max() <= 8
    # float32 scores against a float64 reference: 1e-5 relative is ~100 float32 ulps.
    assert rel(out, dense_reference(q, k, v)) < 1e-5


def test_dense_and_causal_match_numpy():
    q, k, v = qkv(seed=1)
    out, _ = arcal.cedar_attention(q, k, v, method="dense")
    assert rel(out, dense_reference(q, k, v)) < 1e-5
    out, _ = arcal.cedar_attention(q, k, v, method="cedar", budget=8, causal=True)
    assert rel(out, dense_reference(q, k, v, causal=True)) < 1e-5


def test_error_falls_as_the_budget_grows():
    q, k, v = qkv(n=2048, seed=2)  # 32 chunks of 64
    ref = dense_reference(q, k, v)
    errors = []
    for budget in [2, 8, 24, 32]:
        out, expanded = arcal.cedar_attention(q, k, v, budget=budget, chunk_size=64)
        assert expanded.max() <= budget
        errors.append(rel(out, ref))
    assert errors[0] > errors[1] > errors[2] > errors[3] and errors[3] < 1e-5, errors


def test_two_d_inputs_and_conversions():
    q, k, v = qkv(h=1, seed=3)
    out3, exp3 = arcal.cedar_attention(q, k, v, budget=3)
    out2, exp2 = arcal.cedar_attention(q[0], k[0], v[0], budget=3)
    assert out2.shape == q[0].shape and exp2.shape == (48,)
    assert np.array_equal(out2, out3[0]) and np.array_equal(exp2, exp3[0])
    out64, _ = arcal.cedar_attention(q.astype(np.float64), np.asfortranarray(k[0])[None], v.astype(">f4"), budget=3)
    assert np.array_equal(out64, out3)
    starts = np.arange(0, 512, 64)
    outs, _ = arcal.cedar_attention(q, k, v, budget=3, chunk_starts=starts.astype(np.int32))
    assert np.array_equal(outs, out3)


def test_same_as_cli(cli, tmp_path):
    q, k, v = qkv(seed=4)
    np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v)
    r = cli("cedar", "--qkv", tmp_path / "qkv.npz", "--method", "cedar", "--chunk-size", 32, "--budget", 5,
            "--error-target", 0.01, "--out", tmp_path / "o.npz")
    assert r.code == 0, r.err
    g = np.load(tmp_path / "o.npz")
    out, expanded = arcal.cedar_attention(q, k, v, chunk_size=32, budget=5, error_target=0.01)
    assert np.array_equal(out, g["out"]) and np.array_equal(expanded, g["expanded"])


def test_bad_input():
    q, k, v = qkv(seed=5)
    k[1, 17, 3] = np.nan
    with pytest.raises(ValueError, match=r"k\[1, 17, 3\] is nan, but must be finite"):
        arcal.cedar_attention(q, k, v)
    q, k, v = qkv(seed=5)
    with pytest.raises(ValueError, match="q has head width d = 16 but k has d = 8"):
        arcal.cedar_attention(q, k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="must all be 3-D"):
        arcal.cedar_attention(q[0], k, v)
    with pytest.raises(ValueError, match="unknown|method"):
        arcal.cedar_attention(q, k, v, method="sparse")
    with pytest.raises(ValueError, match="dtype int64, but must be float32"):
        arcal.cedar_attention(q.astype(np.int64), k, v)
