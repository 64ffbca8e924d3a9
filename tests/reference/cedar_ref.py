#!/usr/bin/env python3
"""Independent NumPy (float64) reference of CEDAR and its baselines (docs/method.md §8), one query at a
time, written from the method text rather than from the C++ kernel.

usage: cedar_ref.py IN.npz OUT.npz
IN.npz:  q [H, Nq, d], k, v [H, N, d], chunk_starts [M] int64, and 0-d params: method (str: cedar,
         topk, summary, dense), budget, error_target, causal, sink_chunks, second_order.
OUT.npz: out [H, Nq, d] float64, expanded [H, Nq] int32.
"""
import sys

import numpy as np


def chunk_of(bounds, p):
    return int(np.searchsorted(bounds, p, side="right") - 1)


def attend_query(q, K, V, bounds, method, budget, target, causal, pos, sink, second_order):
    d = q.shape[0]
    qs = q / np.sqrt(d)
    M = len(bounds) - 1
    visible_end = pos + 1 if causal else K.shape[0]
    if method == "dense":
        s = K[:visible_end] @ qs
        w = np.exp(s - s.max())
        return (w @ V[:visible_end]) / w.sum(), chunk_of(bounds, visible_end - 1) + 1

    # Always exact: the sink chunks and, causal, the query's own chunk up to its position.
    exact = list(range(0, min(bounds[sink], visible_end)))
    own = chunk_of(bounds, pos) if causal else M
    if causal and own >= sink:
        exact += list(range(bounds[own], pos + 1))
    candidates = list(range(sink, max(sink, own))) if causal else list(range(sink, M))

    # The ball that holds every value the query sees: around the mean of all values, or (causal)
    # around chunk 0's mean value with the radius over the keys up to the query's position.
    if causal:
        centre = V[bounds[0]:bounds[1]].mean(0)
        radius = np.sqrt(np.max(np.sum((V[:pos + 1] - centre) ** 2, axis=1)))
    else:
        # R = max_j (|vbar_j - c| + max_{i in j} |v_i - vbar_j|) >= max_i |v_i - c|.
        centre = V.mean(0)
        radius = 0.0
        for j in range(len(bounds) - 1):
            Vj = V[bounds[j]:bounds[j + 1]]
            vbar = Vj.mean(0)
            radius = max(radius, np.linalg.norm(vbar - centre) + np.sqrt(np.max(np.sum((Vj - vbar) ** 2, axis=1))))

    # Summaries: mean key, per-coordinate variance, mean value, dispersion radii.
    summ = {}
    for j in candidates:
        Kj, Vj = K[bounds[j]:bounds[j + 1]], V[bounds[j]:bounds[j + 1]]
        kbar, vbar = Kj.mean(0), Vj.mean(0)
        var = Kj.var(0)
        score = qs @ kbar + np.log(len(Kj)) + (0.5 * np.sum(qs * qs * var) if second_order else 0.0)
        rk = np.sqrt(np.mean(np.sum((Kj - kbar) ** 2, axis=1)))
        rv = np.sqrt(np.mean(np.sum((Vj - vbar) ** 2, axis=1)))
        summ[j] = (score, vbar, rk, rv, np.linalg.norm(vbar - centre))

    exact_scores = K[exact] @ qs if exact else np.zeros(0)

    def combine(chosen, keep_summaries):
        scores = [exact_scores]
        values = [V[exact]] if exact else [np.zeros((0, d))]
        for j in chosen:
            scores.append(K[bounds[j]:bounds[j + 1]] @ qs)
            values.append(V[bounds[j]:bounds[j + 1]])
        if keep_summaries:
            rest = [j for j in candidates if j not in chosen]
            scores.append(np.array([summ[j][0] for j in rest]))
            values.append(np.array([summ[j][1] for j in rest]).reshape(len(rest), d))
        s = np.concatenate(scores)
        vals = np.concatenate(values)
        if s.size == 0:
            return np.zeros(d)
        w = np.exp(s - s.max())
        return (w @ vals) / w.sum()

    chosen = []
    if method == "topk" and budget > 0:
        order = sorted(candidates, key=lambda j: (-summ[j][0], j))
        chosen = order[:budget]
    elif method == "cedar" and budget > 0 and candidates:
        all_scores = np.concatenate([exact_scores, [summ[j][0] for j in candidates]])
        m = all_scores.max()
        Z = np.exp(all_scores - m).sum()
        qn = np.linalg.norm(qs)
        bounds_j = []
        for j in candidates:
            score, vbar, rk, rv, off = summ[j]
            p = np.exp(score - m) / Z
            b = qn * rk
            e = p * b * (rv + 0.5 * b * (off + radius))
            if e > 0:
                bounds_j.append((e, j))
        bounds_j.sort(key=lambda x: (-x[0], x[1]))
        threshold = -1.0
        if target > 0:
            threshold = target * np.linalg.norm(combine([], True))
        remaining = sum(e for e, _ in bounds_j)
        for e, j in bounds_j[:budget]:
            if remaining <= threshold:
                break
            chosen.append(j)
            remaining -= e
    return combine(chosen, method != "topk"), len(chosen)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    f = np.load(src)
    q, k, v = (f[n].astype(np.float64) for n in ("q", "k", "v"))
    bounds = np.concatenate([f["chunk_starts"].astype(np.int64), [k.shape[1]]])
    method = str(f["method"])
    budget, target = int(f["budget"]), float(f["error_target"])
    causal, sink, second_order = bool(f["causal"]), int(f["sink_chunks"]), bool(f["second_order"])
    H, Nq, d = q.shape
    N = k.shape[1]
    out = np.zeros((H, Nq, d))
    expanded = np.zeros((H, Nq), dtype=np.int32)
    for h in range(H):
        for i in range(Nq):
            pos = N - Nq + i if causal else N - 1
            out[h, i], expanded[h, i] = attend_query(q[h, i], k[h], v[h], bounds, method, budget, target, causal, pos,
                                                     sink, second_order)
    np.savez(dst, out=out, expanded=expanded)


if __name__ == "__main__":
    main()
