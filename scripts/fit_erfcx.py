#!/usr/bin/env python3
"""Re-derives the float GELU's erfc polynomial (model/fused.cpp, half_t_q).

With z = |x| / sqrt 2 and t = 1 / (1 + z / 2), erfc(z) = t Q(t) exp(-z^2), where Q(t) = erfcx(z) / t is
smooth on t in (0, 1]. Q is fitted by Chebyshev least squares in relative error (weights 1 / Q) on
400,001 points and printed as power-series coefficients in t, with the fit's largest relative error in
double and when the kernel's Estrin form is evaluated in float32.

Usage: /usr/bin/python3 scripts/fit_erfcx.py [--degree 10]   (needs python3-numpy, python3-scipy)
"""
import argparse

import numpy as np
import scipy.special as sp
from numpy.polynomial import chebyshev as C
from numpy.polynomial import Polynomial


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--degree", type=int, default=10)
    a = ap.parse_args()
    t = np.linspace(1e-7, 1.0, 400001)
    q_true = sp.erfcx(2.0 * (1.0 - t) / t) / t
    cheb = C.chebfit(2.0 * t - 1.0, q_true, a.degree, w=1.0 / q_true)
    coef = Polynomial(C.cheb2poly(cheb))(Polynomial([-1.0, 2.0])).coef  # power series in t
    print("coefficients (t^0 first):", ", ".join(f"{c:.8f}" for c in coef))
    print(f"max relative error, double: {np.max(np.abs(Polynomial(coef)(t) / q_true - 1)):.3g}")
    if a.degree == 10:  # the kernel's Estrin form in float32
        f, tf = coef.astype(np.float32), t.astype(np.float32)
        t2 = tf * tf
        t4 = t2 * t2
        p = [f[2 * i] + f[2 * i + 1] * tf for i in range(5)]
        v = (p[0] + t2 * p[1]) + t4 * (p[2] + t2 * p[3]) + (t4 * t4) * (p[4] + t2 * f[10])
        print(f"max relative error, float32 Estrin: {np.max(np.abs(v.astype(np.float64) / q_true - 1)):.3g}")


if __name__ == "__main__":
    main()
