#!/usr/bin/env python3
"""Independent PyTorch reference for arcal's AR-LM (method.md §1, issue 27): a decoder-only byte-level
language model with Attention Residuals.

Written from the specification, not from the C++ code: token embedding plus learned positions; every
routing point stacks all of its sources, RMS-normalises each with that point's gain and scores it
against the point's pseudo-query (attnres_ref.residual_stack, shared with the ViT reference); causal self-attention through an explicit -inf mask; the next-token
head tied to the embedding (or a Linear "head"). Loss: mean cross-entropy of the logits at positions
0..T-2 against tokens 1..T-1.
Usage: attnres_lm_ref.py IN.pt OUT.pt
IN.pt (torch::pickle_save from the C++ test) is a dict with the parameters under their C++ names,
'tokens' (B,T) int64 and 'config' (a 1-D tensor: dim, depth, heads, mode[0 std, 1 full, 2 block],
block_size, eps, tied).
OUT.pt holds 'logits' (B,T,K), 'alpha.<p>' (S_p,B,T), 'loss' and 'grad.<name>' for every parameter,
all computed in float64.
"""
import math
import sys

import torch
import torch.nn.functional as F

# The AttnRes stack (routing op, RMSNorm) and the MLP as the ViT reference writes them from method.md §1;
# what is the language model's own (causal attention, embeddings, the tied head) is written here.
from attnres_ref import mlp, residual_stack


def causal_attention(x, P, b, heads):
    B, T, D = x.shape
    hd = D // heads
    qkv = F.linear(x, P[f"attn{b}.qkv.weight"], P[f"attn{b}.qkv.bias"])
    q, k, v = qkv.split(D, dim=-1)
    q = q.reshape(B, T, heads, hd).transpose(1, 2)
    k = k.reshape(B, T, heads, hd).transpose(1, 2)
    v = v.reshape(B, T, heads, hd).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    att = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    out = (att @ v).transpose(1, 2).reshape(B, T, D)
    return F.linear(out, P[f"attn{b}.proj.weight"], P[f"attn{b}.proj.bias"])


def sublayer(l, h, P, heads, eps):
    D = h.shape[-1]
    x = F.layer_norm(h, (D,), P[f"norms.{l}.weight"], P[f"norms.{l}.bias"], eps)
    return causal_attention(x, P, l // 2, heads) if l % 2 == 0 else mlp(x, P, l // 2)


def forward(P, tokens, cfg):
    dim, depth, heads, mode, S, eps, tied = cfg
    T = tokens.shape[1]
    v0 = P["tok_embed.weight"][tokens] + P["pos_embed"][:T]
    h, alphas = residual_stack(v0, 2 * depth, mode, S, lambda l, x: sublayer(l, x, P, heads, eps), P, eps)
    h = F.layer_norm(h, (dim,), P["final_norm.weight"], P["final_norm.bias"], eps)
    if tied:
        return F.linear(h, P["tok_embed.weight"], P["head_bias"]), alphas
    return F.linear(h, P["head.weight"], P["head.bias"]), alphas


def main():
    src = torch.load(sys.argv[1], weights_only=False)  # written by the test itself
    c = src["config"].tolist()
    cfg = (int(c[0]), int(c[1]), int(c[2]), int(c[3]), int(c[4]), float(c[5]), bool(c[6]))
    names = [k for k in src if k not in ("tokens", "config")]
    P = {k: src[k].clone().double().requires_grad_(True) for k in names}
    tokens = src["tokens"].long()
    logits, alphas = forward(P, tokens, cfg)
    K = logits.shape[-1]
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, K), tokens[:, 1:].reshape(-1))
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for i, a in enumerate(alphas):
        out[f"alpha.{i}"] = a.detach()
    for k in names:
        out[f"grad.{k}"] = P[k].grad.detach()
    torch.save(out, sys.argv[2])


if __name__ == "__main__":
    main()
