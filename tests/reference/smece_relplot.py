"""Independent NumPy implementation of relplot's smooth ECE (apple/ml-calibration, relplot/metrics.py
smECE_fast with the ReflectedGaussianKernel of relplot/kernels.py, as fixed in relplot 1.0.3: "fix bug
affecting endpoints"), written from its definition: residuals f - y split linearly onto a
linspace(0, 1, M) grid (mass / N), M = 200 and multiplied by 4 while round(20 / sigma) > M; smoothing =
the folded Gaussian kernel on [0, 1], K(t, s) = sum over integers k of phi_sigma(t - s - 2k) +
phi_sigma(t + s - 2k), evaluated here as a dense matrix of explicit image sums (so a point at 0 or 1 has
two coinciding images and keeps its full mass, and no image is dropped); smECE_sigma = sum |smoothed| / M;
sigma* by relplot's search_param (start 1, 10 halvings, predicate sigma < 1e-3 or sigma < smECE_sigma).

usage: smece_relplot.py N   -> prints "smece sigma" for the deterministic data set data(N)
"""
import sys
import numpy as np


def data(n):
    i = np.arange(n, dtype=np.float64)
    f = np.mod(i * 0.6180339887498949, 1.0)
    u = np.mod(i * 0.7548776662466927 + 0.1, 1.0)
    y = (u < f ** 1.3).astype(np.float64)
    return f, y


def to_grid(f, r, m):
    v = np.zeros(m)
    g = np.clip((f * (m - 1)).astype(int), 0, m - 2)
    frac = f * (m - 1) - g
    np.add.at(v, g, (1 - frac) * r)
    np.add.at(v, g + 1, frac * r)
    return v


def folded_kernel(t, s, sigma):
    """K(t_i, s_j) by explicit image sums: every image within 40 sigma of [0, 1] (farther ones are 0 in
    double precision)."""
    kmax = int(np.ceil((1.0 + 40.0 * sigma) / 2.0)) + 1
    d = t[:, None] - s[None, :]
    e = t[:, None] + s[None, :]
    out = np.zeros_like(d)
    for k in range(-kmax, kmax + 1):
        out += np.exp(-((d - 2 * k) ** 2) / (2 * sigma ** 2)) + np.exp(-((e - 2 * k) ** 2) / (2 * sigma ** 2))
    return out / (np.sqrt(2 * np.pi) * sigma)


def smooth(v, sigma):
    m = len(v)
    t = np.linspace(0, 1, m)
    out = np.zeros(m)
    for a in range(0, m, 2048):  # blocks of rows bound the memory of the dense kernel
        out[a:a + 2048] = folded_kernel(t[a:a + 2048], t, sigma) @ v
    return np.abs(out).sum() / m


def smece(f, y):
    state = {"m": 200}
    state["v"] = to_grid(f, f - y, state["m"]) / len(f)

    def pred(a):
        if round(20 / a) > state["m"]:
            while round(20 / a) > state["m"]:
                state["m"] *= 4
            state["v"] = to_grid(f, f - y, state["m"]) / len(f)
        return a < 0.001 or a < smooth(state["v"], a)

    if pred(1.0):
        sigma = 1.0
    else:
        start, end = 1.0, 0.0
        for _ in range(10):
            mid = (start + end) / 2
            if pred(mid):
                end = mid
            else:
                start = mid
        sigma = start
    return smooth(state["v"], sigma), sigma


if __name__ == "__main__":
    f, y = data(int(sys.argv[1]))
    s, sig = smece(f, y)
    print(f"{s:.17g} {sig:.17g}")
