#!/usr/bin/env python3
"""Independent PyTorch reference for arcal's AR-Swin (docs/method.md §1 and §2.2), float64.

Written from the specification, not from the C++ code, and on purpose in a different formulation:
window attention is computed as full attention over the whole (rolled) grid with an additive matrix
that is -inf between tokens of different windows, -100 between tokens of one window that come from
different regions of the rolled grid, and the relative position bias inside a window; there is no
window partition or reverse. Every routing point stacks all of its sources, as in attnres_ref.py.
Usage: swin_ref.py IN.pt OUT.pt
IN.pt: dict with the parameters under their C++ names (prefix 'swin.'), 'images' (B,C,H,W),
'labels' (B), and 'config' (1-D: patch, window, mode[0 std, 1 full, 2 block], block_size, eps,
depths..., dims..., heads...; the stage count is (len - 5) / 3).
OUT.pt: 'logits', 'alpha.<p>' (S_p,B,T_s) and 'grad.<name>' for every parameter (loss = mean CE).
"""
import math
import sys

import torch
import torch.nn.functional as F


def region(coord, r, w, shift):
    # Region label along one axis of the rolled grid: [0, r-w) -> 0, [r-w, r-shift) -> 1, [r-shift, r) -> 2.
    return (coord >= r - w).long() + (coord >= r - shift).long()


def additive_matrix(r, w, shift, table):
    """(heads, N, N) additive term of full attention over the rolled r x r grid (row-major tokens)."""
    idx = torch.arange(r * r)
    y, x = idx // r, idx % r
    same_window = ((y[:, None] // w) == (y[None, :] // w)) & ((x[:, None] // w) == (x[None, :] // w))
    dy, dx = y[:, None] - y[None, :], x[:, None] - x[None, :]
    rel = ((dy + w - 1) * (2 * w - 1) + (dx + w - 1)).clamp(0, (2 * w - 1) ** 2 - 1)  # only read in-window
    M = table[rel].permute(2, 0, 1).clone()  # (heads, N, N)
    if shift > 0:
        ry, rx = region(y, r, w, shift), region(x, r, w, shift)
        same_region = (ry[:, None] == ry[None, :]) & (rx[:, None] == rx[None, :])
        M = M + torch.where(same_region, 0.0, -100.0).double()
    return M.masked_fill(~same_window, float("-inf"))  # different windows never attend


def window_attention(x, P, pre, heads, r, w, shift):
    B, N, C = x.shape
    g = x.view(B, r, r, C)
    if shift > 0:
        g = torch.roll(g, shifts=(-shift, -shift), dims=(1, 2))
    t = g.reshape(B, N, C)
    hd = C // heads
    q = F.linear(t, P[pre + "qkv.weight"][:C], P[pre + "qkv.bias"][:C]).view(B, N, heads, hd).transpose(1, 2)
    k = F.linear(t, P[pre + "qkv.weight"][C:2 * C], P[pre + "qkv.bias"][C:2 * C]).view(B, N, heads, hd).transpose(1, 2)
    v = F.linear(t, P[pre + "qkv.weight"][2 * C:], P[pre + "qkv.bias"][2 * C:]).view(B, N, heads, hd).transpose(1, 2)
    logits = q @ k.transpose(-2, -1) / math.sqrt(hd) + additive_matrix(r, w, shift, P[pre + "relative_position_bias_table"])
    out = (torch.softmax(logits, -1) @ v).transpose(1, 2).reshape(B, N, C)
    out = F.linear(out, P[pre + "proj.weight"], P[pre + "proj.bias"])
    g = out.view(B, r, r, C)
    if shift > 0:
        g = torch.roll(g, shifts=(shift, shift), dims=(1, 2))
    return g.reshape(B, N, C)


def main():
    inp = torch.load(sys.argv[1], weights_only=False)  # written by the test itself
    cfg = inp["config"].tolist()
    patch, window, mode, S, eps = int(cfg[0]), int(cfg[1]), int(cfg[2]), int(cfg[3]), cfg[4]
    n = (len(cfg) - 5) // 3
    depths = [int(v) for v in cfg[5:5 + n]]
    dims = [int(v) for v in cfg[5 + n:5 + 2 * n]]
    heads = [int(v) for v in cfg[5 + 2 * n:5 + 3 * n]]
    P = {k[len("swin."):]: v.double().clone().requires_grad_(True) for k, v in inp.items()
         if k.startswith("swin.")}
    images = inp["images"].double()
    labels = inp["labels"]
    if mode == 1:
        S = 1

    def ln(x, name, d):
        return F.layer_norm(x, (d,), P[name + ".weight"], P[name + ".bias"], eps)

    x = F.conv2d(images, P["patch_embed.weight"], P["patch_embed.bias"], stride=patch)
    B = x.shape[0]
    x = ln(x.flatten(2).transpose(1, 2), "patch_norm", dims[0])
    r = images.shape[2] // patch
    alphas = []
    for s in range(n):
        C = dims[s]
        if s > 0:
            Cp = dims[s - 1]
            g = x.view(B, r, r, Cp)
            parts = [g[:, 0::2, 0::2], g[:, 1::2, 0::2], g[:, 0::2, 1::2], g[:, 1::2, 1::2]]
            r //= 2
            m = torch.cat(parts, -1).reshape(B, r * r, 4 * Cp)
            x = F.linear(ln(m, f"merge{s}.norm", 4 * Cp), P[f"merge{s}.reduction.weight"])
        w = min(window, r)
        shift_odd = 0 if r <= window else w // 2
        L = 2 * depths[s]

        def sub(l, h):
            pre = f"stage{s}_"
            hn = ln(h, pre + f"norm{l}", C)
            b = l // 2
            if l % 2 == 1:
                f1 = F.gelu(F.linear(hn, P[pre + f"mlp{b}.fc1.weight"], P[pre + f"mlp{b}.fc1.bias"]))
                return F.linear(f1, P[pre + f"mlp{b}.fc2.weight"], P[pre + f"mlp{b}.fc2.bias"])
            return window_attention(hn, P, pre + f"attn{b}.", heads[s], r, w, shift_odd if b % 2 == 1 else 0)

        if mode == 0:
            for l in range(L):
                x = x + sub(l, x)
            continue
        q, gain = P[f"pseudo_query{s}"], P[f"key_gain{s}"]

        def route(p, sources):
            V = torch.stack(sources, 0)  # (S_p,B,T,C)
            keys = gain[p] * V / torch.sqrt((V * V).mean(-1, keepdim=True) + eps)
            a = torch.softmax((keys * q[p]).sum(-1), 0)
            alphas.append(a)
            return (a.unsqueeze(-1) * V).sum(0)

        blocks, partial = [x], None
        for l in range(L):
            if l % S == 0 and partial is not None:
                blocks.append(partial)
                partial = None
            h = route(l, blocks + ([partial] if partial is not None else []))
            out = sub(l, h)
            partial = out if partial is None else partial + out
        x = route(L, blocks + [partial])
    z = F.linear(ln(x, "final_norm", dims[-1]).mean(1), P["head.weight"], P["head.bias"])
    F.cross_entropy(z, labels).backward()
    out = {"logits": z.detach()}
    for p, a in enumerate(alphas):
        out[f"alpha.{p}"] = a.detach()
    for k, v in P.items():
        out["grad.swin." + k] = v.grad
    torch.save(out, sys.argv[2])


if __name__ == "__main__":
    main()
