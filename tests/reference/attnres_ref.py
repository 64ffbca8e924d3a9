#!/usr/bin/env python3
"""Independent PyTorch reference for arcal's AR-ViT (method.md §1) and training loss (§2).

Written from the specification, not from the C++ code: every routing point stacks all of its
sources, RMS-normalises each with that point's gain and scores it against the point's pseudo-query.
Usage: attnres_ref.py IN.pt OUT.pt
IN.pt (written by the C++ test with torch::pickle_save) is a dict with the parameters under their
C++ names, 'images' (B,C,H,W), 'labels' (B), and 'config' (a 1-D tensor: dim, depth, heads,
patch, mode[0 std, 1 full, 2 block], block_size, eps, lr, weight_decay, steps, sbece_weight,
sbece_bins, sbece_temperature).
OUT.pt holds 'logits', 'alpha.<p>' (S_p,B,T), 'grad.<name>' for every parameter and 'losses'.
"""
import math
import sys

import torch
import torch.nn.functional as F


def rmsnorm(v, gain, eps):
    return gain * v / torch.sqrt((v * v).mean(-1, keepdim=True) + eps)


def attention(x, P, b, heads):
    B, T, D = x.shape
    hd = D // heads
    qkv = F.linear(x, P[f"attn{b}.qkv.weight"], P[f"attn{b}.qkv.bias"])
    qkv = qkv.reshape(B, T, 3, heads, hd).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(hd), dim=-1)
    out = (att @ v).transpose(1, 2).reshape(B, T, D)
    return F.linear(out, P[f"attn{b}.proj.weight"], P[f"attn{b}.proj.bias"])


def mlp(x, P, b):
    h = F.gelu(F.linear(x, P[f"mlp{b}.fc1.weight"], P[f"mlp{b}.fc1.bias"]))
    return F.linear(h, P[f"mlp{b}.fc2.weight"], P[f"mlp{b}.fc2.bias"])


def sublayer(l, h, P, heads, eps):
    D = h.shape[-1]
    x = F.layer_norm(h, (D,), P[f"norms.{l}.weight"], P[f"norms.{l}.bias"], eps)
    return attention(x, P, l // 2, heads) if l % 2 == 0 else mlp(x, P, l // 2)


def attnres(point, sources, P, eps, alphas):
    """One AttnRes op: softmax over sources of w_p . RMSNorm_p(v_i); sum of raw values."""
    V = torch.stack(sources, 0)  # (S,B,T,D)
    keys = rmsnorm(V, P["key_gain"][point], eps)
    logits = (keys * P["pseudo_query"][point]).sum(-1)  # (S,B,T)
    if logits.dtype != torch.float64:
        logits = logits.float()  # softmax over sources in at least fp32
    alpha = torch.softmax(logits, dim=0)
    alphas.append(alpha)
    return (alpha.unsqueeze(-1) * V).sum(0)


def residual_stack(v0, L, mode, S, sub, P, eps):
    """L sublayers sub(l, h) over v0: standard residuals (mode 0), Full (1) or Block AttnRes (2, block
    size S), ending in the final aggregation. Returns the output and every point's routing weights."""
    alphas = []
    if mode == 0:
        h = v0
        for l in range(L):
            h = h + sub(l, h)
        return h, alphas
    if mode == 1:
        S = 1
    blocks = [v0]      # completed block representations b_0..b_{n-1}
    partial = None     # b_n^partial
    for l in range(L):
        if l % S == 0 and partial is not None:
            blocks.append(partial)
            partial = None
        sources = blocks + ([partial] if partial is not None else [])
        h = attnres(l, sources, P, eps, alphas)
        out = sub(l, h)
        partial = out if partial is None else partial + out
    return attnres(L, blocks + [partial], P, eps, alphas), alphas


def forward(P, images, cfg):
    dim, depth, heads, patch, mode, S, eps = cfg[:7]
    x = F.conv2d(images, P["patch_embed.weight"], P["patch_embed.bias"], stride=patch)
    x = x.flatten(2).transpose(1, 2)
    cls = P["cls_token"].expand(x.shape[0], 1, dim)
    v0 = torch.cat([cls, x], 1) + P["pos_embed"]
    h, alphas = residual_stack(v0, 2 * depth, mode, S, lambda l, x: sublayer(l, x, P, heads, eps), P, eps)
    h = F.layer_norm(h, (dim,), P["final_norm.weight"], P["final_norm.bias"], eps)
    return F.linear(h[:, 0], P["head.weight"], P["head.bias"]), alphas


def sb_ece(logits, labels, bins, temperature):
    """Soft-binned ECE (Karandikar et al. 2021), L2, written per bin with explicit loops."""
    p = torch.softmax(logits, -1)
    conf, pred = p.max(-1)
    correct = (pred == labels).float()
    anchors = [(j + 0.5) / bins for j in range(bins)]
    d = torch.stack([-(conf - a) ** 2 / temperature for a in anchors], 1)
    u = torch.softmax(d, 1)
    total = u.sum()
    acc = 0.0
    for j in range(bins):
        s = u[:, j].sum()
        cbar = (u[:, j] * conf).sum() / s
        abar = (u[:, j] * correct).sum() / s
        acc = acc + (s / total) * (cbar - abar) ** 2
    return torch.sqrt(torch.clamp(acc, min=1e-12))


def main():
    src = torch.load(sys.argv[1], weights_only=False)  # written by the test itself
    c = src["config"].tolist()
    cfg = [int(c[0]), int(c[1]), int(c[2]), int(c[3]), int(c[4]), int(c[5]), float(c[6])]
    lr, wd, steps, beta, bins, temp = float(c[7]), float(c[8]), int(c[9]), float(c[10]), int(c[11]), float(c[12])
    names = [k for k in src if k not in ("images", "labels", "config")]
    P = {k: src[k].clone().double().requires_grad_(True) for k in names}
    images, labels = src["images"].double(), src["labels"].long()
    out = {}
    # Forward/backward in float64: the reference is the exact answer the float32 C++ model approximates.
    logits, alphas = forward(P, images, cfg)
    loss = F.cross_entropy(logits, labels) + beta * sb_ece(logits, labels, bins, temp)
    loss.backward()
    out["logits"] = logits.detach().float()
    for i, a in enumerate(alphas):
        out[f"alpha.{i}"] = a.detach().float()
    for k in names:
        out[f"grad.{k}"] = P[k].grad.detach().float()
    # A few AdamW steps in float64 on both sides: in float32, Adam's sign-like first updates turn
    # round-off in analytically-zero gradients (e.g. attention key biases) into +-lr moves, so two
    # correct float32 implementations drift apart after a few steps.
    P32 = {k: src[k].clone().double().requires_grad_(True) for k in names}
    opt = torch.optim.AdamW([P32[k] for k in names], lr=lr, weight_decay=wd)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        lg, _ = forward(P32, images, cfg)
        ls = F.cross_entropy(lg, labels) + beta * sb_ece(lg, labels, bins, temp)
        ls.backward()
        opt.step()
        losses.append(ls.item())
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    torch.save(out, sys.argv[2])


if __name__ == "__main__":
    main()
