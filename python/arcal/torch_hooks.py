"""Traces from PyTorch models with no glue: forward hooks record per-example tensors (routing weights,
gate probabilities, any named module's output) next to the model's logits, and write a trace file
(docs/interface.md) that `arcal audit`, `arcal metrics` and `arcal.audit` read.

    with arcal.torch_hooks.record_routing(model, "trace.npz", routing=["blocks.0.gate", "blocks.1.gate"],
                                          features={"router_logits": ("blocks.0.gate", lambda o: o[1])}) as rec:
        for x, y in loader:
            model(x)
            rec.add_labels(y)
    arcal.audit(["trace.npz"])

Every forward of `model` is one batch: its output gives the logits [B, K] and each recorded module must
have run exactly once in it. One module may serve several entries (its probabilities as a routing point
and its logits as a feature): it is hooked once. Routing tensors are [B, E], [B, T, E] (batch first),
[T, B, E] (sequence first) or [B*T, E] (tokens flattened); `layout=` says which where the shape alone
does not (see record_routing).

Statistics per token (shared/method.md §3): besides the token-mean weights the recorder stores, per
example and routing point, the mean over tokens of each token's routing entropy (`routing_entropy`),
and for ordered (depth) routing the per-token depth mean and variance; the audit reads those rather than
the entropy of the token-averaged gate. `routing_kind` says whether the sources are ordered ("depth":
layers, earliest first) or not ("unordered", the default: mixture-of-experts experts), and the audit
offers only the statistics that apply (no depth variance over expert indices).

Language models (per_token=True): every token is an example. The model's output is next-token logits
[B, T, K]; each routing point gives the token's own weights (no token mean), labels are added as [B, T]
(the next tokens), and every sequence is a cluster: the trace's `cluster` array holds the running
sequence index (or what rec.add_clusters gives), so that the audit splits, permutes and resamples
whole sequences (shared/method.md §6.8). This is the layout `arcal trace` writes for ar-lm-tiny.

Large vocabularies (topk=): a trace of N tokens cannot hold N x K floats when K is a real vocabulary.
Over more than TOPK_AUTO_CLASSES classes (or with topk=k) the outputs are recorded in the top-k form
instead of `logits`: per token the k largest log-softmax values and their classes, the log-probability
at the label, the log normaliser, the entropy and the sum of squared probabilities of the full softmax
(docs/interface.md "The trace file"), computed per forward from that batch's logits on their device, so
only one batch's logits exist at once. The label's log-probability needs the label: each batch's logits
are held (the model's own tensor, no copy) until add_labels gives the labels that match it, so adding
labels after (or before) every forward keeps one batch; labels for many batches at once are paired in
arrays(), holding every batch's logits until then.

Models: an eager torch.nn.Module. A torch.compile'd model (torch >= 2.0) is accepted: its submodules
are found under their eager names (the `_orig_mod.` prefix is added where needed). A TorchScript model
(torch.jit.trace / torch.jit.script) runs without Python forward hooks, so it is refused: record the
eager model, which computes the same outputs.
"""
import contextlib
import json
import warnings

import numpy as np
import torch

from . import _arcal, _torch_check

if not _torch_check.supported(torch.__version__):
    raise ImportError(f"arcal.torch_hooks supports torch {_torch_check.SUPPORTED}, but this environment has torch "
                      f"{torch.__version__}")

__all__ = ["record_routing", "RoutingRecorder", "find_routers", "LAYOUTS", "ROW_SUM_TOLERANCE", "ROUTER_NAMES",
           "TOPK_AUTO_CLASSES", "TOPK_AUTO_K"]

#: Layouts of a routing or feature tensor (E: experts / sources / feature columns).
LAYOUTS = ("auto", "batch_first", "seq_first", "flat", "flat_seq_first")

#: How far a routing row (one token's weights) may sum from 1 and still be renormalised, by dtype: a
#: softmax computed in bf16 rounds each weight to 8 significant bits, so its rows sum to 1 only within
#: a few 2^-8 (0.9994-1.0007 was seen on a bf16 MoE). Rows are accumulated in float32 and divided by
#: their sum; a row further from 1 than this is refused (not a probability vector: pass softmax=True
#: for gates that output logits).
ROW_SUM_TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4, torch.float64: 1e-6}

#: topk="auto": outputs over more classes than this are recorded in the top-k form (TOPK_AUTO_K classes
#: per example and the summaries the metrics need) instead of the full [N, K] logits: a trace of 10^6
#: tokens over a 32,000-token vocabulary would hold 128 GB of float32 logits.
TOPK_AUTO_CLASSES = 1024
TOPK_AUTO_K = 32

#: Elements of one chunk of logits rows when the top-k summaries are computed, per device type: bounds
#: the temporaries (probabilities, products) whatever the batch size. On the CPU a 4 MB chunk stays in
#: cache across the passes over it (softmax, top-k, two sums): 1.3x faster than 32 MB chunks at K = 4096
#: and 32,000 (2-core AMD EPYC); a GPU takes larger chunks to keep kernel launches few.
_TOPK_CHUNK_ELEMENTS = {"cpu": 1 << 20}
#: Tests and benchmarks set it to take the torch path of _topk_summaries for float32 CPU logits too.
_FORCE_TORCH_TOPK = False
_TOPK_CHUNK_ELEMENTS_GPU = 1 << 24

#: Bytes of logits held while waiting for their labels before the recorder warns (once).
_AWAITING_WARN_BYTES = 1 << 30


def _default_output(out):
    if torch.is_tensor(out):
        return out
    if isinstance(out, (tuple, list)) and out and torch.is_tensor(out[0]):
        return out[0]
    logits = getattr(out, "logits", None)
    if torch.is_tensor(logits):
        return logits
    raise ValueError("record_routing: cannot find the logits in the model's output of type "
                     f"{type(out).__name__}; pass output=lambda out: ... that returns the [B, K] tensor")


def _to_numpy(t):
    return t.detach().to(device="cpu", dtype=torch.float32).numpy()


class _RowStore:
    """Per-example arrays appended batch by batch into blocks of BLOCK rows (a few MB each), joined once
    by join(): thousands of small per-batch arrays kept alive between the batches' large freed
    temporaries fragment the C heap, which then holds far more than the rows (a 10^6-token recording at
    K = 32,000 peaked at 2.06 GB with per-batch arrays, 1.78 GB with blocks). Class indices are held as
    int32 and joined as int64."""
    BLOCK = 1 << 16

    def __init__(self):
        self.blocks, self.sizes, self.rows = {}, [], 0  # blocks[name][i] holds sizes[i] filled rows

    def append(self, arrays):
        n = next(iter(arrays.values())).shape[0]
        done = 0
        while done < n:
            if not self.sizes or self.sizes[-1] == next(iter(self.blocks.values()))[-1].shape[0]:
                for name, v in arrays.items():
                    dtype = np.int32 if v.dtype == np.int64 else v.dtype
                    self.blocks.setdefault(name, []).append(np.empty((self.BLOCK,) + v.shape[1:], dtype))
                self.sizes.append(0)
            fill = self.sizes[-1]
            take = min(n - done, self.blocks[next(iter(self.blocks))][-1].shape[0] - fill)
            for name, v in arrays.items():
                self.blocks[name][-1][fill:fill + take] = v[done:done + take]
            self.sizes[-1] += take
            done += take
        self.rows += n

    def join(self):
        """{name: [rows, ...] array}; the blocks are freed as they are copied, name by name, and the joined
        arrays become the one (full) block, shared with the caller."""
        out = {}
        for name in list(self.blocks):
            blocks = self.blocks.pop(name)
            first = blocks[0]
            joined = np.empty((self.rows,) + first.shape[1:], np.int64 if first.dtype == np.int32 else first.dtype)
            at = 0
            for i in range(len(blocks)):
                block, blocks[i] = blocks[i], None
                joined[at:at + self.sizes[i]] = block[:self.sizes[i]]
                at += self.sizes[i]
                del block
            out[name] = joined
        self.blocks, self.sizes = {name: [v] for name, v in out.items()}, [self.rows]
        return dict(out)


def _topk_summaries(flat, k, rows=None):
    """flat [R, K] logits (any float dtype, any device), rows: the row indices to summarise (a LongTensor
    on flat's device; None: every row; padding is skipped, not computed) -> per row, on the CPU: the k
    largest log-softmax values sorted descending [R, k] float32 and their class indices [R, k] int64,
    the log normaliser (logsumexp of the logits), the entropy of the full softmax (nats) and the sum of
    its squared probabilities [R] float32. Computed in float32 (float64 logits: float64; bf16/fp16
    logits are widened) on the logits' device, in chunks of rows, so that no more than a chunk's worth
    of [rows, K] temporaries exists at once. float32 logits on the CPU whose rows are contiguous are read
    in place by arcal's kernel (src/ops/topk_summary.hpp: two passes per row, no [rows, K] temporary, on
    torch's intra-op threads); everything else takes the torch path below, which is the kernel's
    reference in the tests."""
    if flat.device.type == "cpu" and flat.dtype == torch.float32 and flat.dim() == 2 and flat.stride(-1) == 1 \
            and not _FORCE_TORCH_TOPK:
        picked = None if rows is None else rows.numpy()
        top, idx, lz, ent, sq = _arcal._softmax_topk_summaries(flat.numpy(), int(k), picked, torch.get_num_threads())
        return {"topk_logprobs": torch.from_numpy(top), "topk_indices": torch.from_numpy(idx),
                "log_normalizer": torch.from_numpy(lz), "predictive_entropy": torch.from_numpy(ent),
                "prob_sq_sum": torch.from_numpy(sq)}
    dtype = torch.float64 if flat.dtype == torch.float64 else torch.float32
    classes = flat.shape[-1]
    step = max(1, _TOPK_CHUNK_ELEMENTS.get(flat.device.type, _TOPK_CHUNK_ELEMENTS_GPU) // classes)
    count = flat.shape[0] if rows is None else rows.shape[0]
    # The results are allocated once, before the loop: small tensors made per chunk and kept would sit
    # between the chunks' freed temporaries and keep the C heap from reusing them (RSS grew by 350 MB
    # per 1024 x 32,000 batch on glibc with two threads).
    dev = flat.device
    out = {"topk_logprobs": torch.empty(count, k, dtype=dtype, device=dev),
           "topk_indices": torch.empty(count, k, dtype=torch.int64, device=dev)}
    for name in ("log_normalizer", "predictive_entropy", "prob_sq_sum"):
        out[name] = torch.empty(count, dtype=dtype, device=dev)
    for start in range(0, count, step):
        end = min(count, start + step)
        z = (flat[start:end] if rows is None else flat.index_select(0, rows[start:end])).to(dtype)  # (R, K)
        p = torch.softmax(z, dim=-1)                           # (R, K), one fused pass
        top = torch.topk(z, k, dim=-1, largest=True, sorted=True)
        # The largest class has p = exp(z_max - logZ) = 1 / sum exp(z - z_max) >= 1/K, so logZ = z_max -
        # log p_max as exactly as logsumexp computes it, without another pass over the row.
        log_normalizer = top.values[:, 0] - torch.log(p.gather(1, top.indices[:, :1])[:, 0])
        # H = -sum p log p = logZ - sum p z; a -inf logit (a masked class) has p = 0 and would give
        # 0 * -inf = nan there, so such rows take the explicit form.
        entropy = log_normalizer - (p * z).sum(dim=-1)
        bad = torch.isnan(entropy)
        if bool(bad.any()):
            logp = z[bad] - log_normalizer[bad].unsqueeze(-1)
            pb = p[bad]
            entropy[bad] = -torch.where(pb > 0, pb * logp, torch.zeros((), dtype=dtype, device=dev)).sum(dim=-1)
        out["topk_logprobs"][start:end] = top.values - log_normalizer.unsqueeze(-1)
        out["topk_indices"][start:end] = top.indices
        out["log_normalizer"][start:end] = log_normalizer
        out["predictive_entropy"][start:end] = entropy
        out["prob_sq_sum"][start:end] = (p * p).sum(dim=-1)
    return {name: v.cpu() if v.dtype == torch.int64 else v.to("cpu", torch.float32) for name, v in out.items()}


def _as_tokens(name, t, batch, what, layout):
    """t -> [B, T, E] (T = 1 for per-example tensors) for `layout`, refusing what is ambiguous."""
    shape = tuple(t.shape)
    fix = (f"pass layout={{'{name}': 'batch_first' | 'seq_first' | 'flat' | 'flat_seq_first'}} (or one layout "
           "string for every entry)")
    if t.dim() == 0:
        raise ValueError(f"record_routing: {what} '{name}' is a scalar, but must have a batch dimension")
    if layout == "auto_flat":  # a discovered router: [B*T, E] is example-major (reshape(-1, H) of [B, T, H])
        layout = "flat" if t.dim() == 2 and shape[0] != batch and shape[0] % batch == 0 else "auto"
    if layout == "auto":
        if t.dim() == 1:
            layout = "batch_first" if shape[0] == batch else None
        elif t.dim() == 2:
            if shape[0] == batch:
                layout = "batch_first"
            elif shape[0] % batch == 0:
                raise ValueError(f"record_routing: {what} '{name}' has shape {shape}: {shape[0]} rows for a batch of "
                                 f"{batch}, tokens flattened into the first axis; whether example-major "
                                 f"([B*T, E], 'flat') or token-major ([T*B, E], 'flat_seq_first') cannot be told "
                                 f"from the shape: {fix}")
            else:
                layout = None
        else:
            first, second = shape[0] == batch, shape[1] == batch
            if first and second:
                raise ValueError(f"record_routing: {what} '{name}' has shape {shape}: both of its first two axes equal "
                                 f"the batch size {batch}, so batch-first and sequence-first cannot be told apart: {fix}")
            layout = "batch_first" if first else "seq_first" if second else None
        if layout is None:
            raise ValueError(f"record_routing: {what} '{name}' has shape {shape}, and no axis layout matches the "
                             f"batch size {batch} (the model's logits have {batch} rows)")
    if layout == "batch_first":
        if shape[0] != batch:
            raise ValueError(f"record_routing: {what} '{name}' has shape {shape}, but with layout 'batch_first' its "
                             f"first dimension must be the batch size {batch}")
        if t.dim() == 1:
            return t.reshape(batch, 1, 1)
        return t.reshape(batch, -1, shape[-1])
    if layout == "seq_first":
        if t.dim() < 3 or shape[1] != batch:
            raise ValueError(f"record_routing: {what} '{name}' has shape {shape}, but with layout 'seq_first' it must "
                             f"be [T, B, ..., E] with B = {batch}")
        return t.transpose(0, 1).reshape(batch, -1, shape[-1])
    if layout in ("flat", "flat_seq_first"):
        if t.dim() != 2 or shape[0] % batch != 0:
            raise ValueError(f"record_routing: {what} '{name}' has shape {shape}, but with layout '{layout}' it must "
                             f"be [B*T, E] with B = {batch}")
        tokens = shape[0] // batch
        if layout == "flat":
            return t.reshape(batch, tokens, shape[-1])
        return t.reshape(tokens, batch, shape[-1]).transpose(0, 1)
    raise ValueError(f"record_routing: layout '{layout}' for '{name}' is not one of {', '.join(LAYOUTS)}")


def _spec(entry):
    """'module.name' or ('module.name', fn) -> (module name, fn or None)."""
    if isinstance(entry, str):
        return entry, None
    if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str) and callable(entry[1]):
        return entry[0], entry[1]
    raise ValueError(f"record_routing: {entry!r} must be a module name or a (module name, function) pair")


def _entries(value, what):
    """routing / features given as one name, one (name, fn) pair, or a list of them (a string is one
    name, never its letters)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and callable(value[1]):
        return [value]
    if isinstance(value, dict):
        raise ValueError(f"record_routing: {what} must be a module name or a list of them, not a dict")
    return list(value)


#: Child names that mark a mixture-of-experts router beside an `experts` module (transformers: `gate`).
ROUTER_NAMES = ("gate", "router", "gating", "router_gate", "gate_network", "w_gate")


def _expert_count(experts):
    """How many experts a module holds: a ModuleList/Sequential's length, a `num_experts` attribute, or the
    leading axis of its 3-D parameters (transformers' fused experts: gate_up_proj [E, 2I, H]); else None."""
    if isinstance(experts, (torch.nn.ModuleList, torch.nn.Sequential)):
        return len(experts)
    n = getattr(experts, "num_experts", None)
    if isinstance(n, int):
        return n
    shapes = {p.shape[0] for p in experts.parameters(recurse=False) if p.dim() == 3}
    return shapes.pop() if len(shapes) == 1 else None


def _router_width(module):
    """The number of outputs of a router candidate: a Linear's out_features, a `num_experts` attribute, or
    the rows of its own 2-D `weight` (transformers' TopKRouter: weight [E, H]); else None."""
    if isinstance(module, torch.nn.Linear):
        return module.out_features
    n = getattr(module, "num_experts", None)
    if isinstance(n, int):
        return n
    w = getattr(module, "weight", None)
    return int(w.shape[0]) if isinstance(w, torch.Tensor) and w.dim() == 2 else None


def find_routers(model):
    """The routers of a mixture-of-experts model, in module order: [(name, number of experts)].

    A router is a child of a module that also holds the experts (a child named `experts`: a ModuleList of
    experts, or transformers' fused experts), whose output width equals the number of experts, named one
    of ROUTER_NAMES where several children qualify (Qwen-MoE's `shared_expert_gate` has width 1 and never
    does). This finds `model.layers.N.mlp.gate` in transformers' Mixtral, Qwen2-MoE and OLMoE, and
    `blocks.N.moe.router` in a plain nn.Module MoE. Names are as in model.named_modules() (without
    torch.compile's `_orig_mod.` prefix)."""
    base = model._orig_mod if isinstance(getattr(model, "_orig_mod", None), torch.nn.Module) else model
    found = []
    for pname, parent in base.named_modules():
        experts = getattr(parent, "experts", None)
        if not isinstance(experts, torch.nn.Module):
            continue
        count = _expert_count(experts)
        if not count or count < 2:
            continue
        candidates = [(cname, child) for cname, child in parent.named_children()
                      if child is not experts and _router_width(child) == count]
        named = [c for c in candidates if c[0] in ROUTER_NAMES]
        if len(candidates) > 1 and len(named) == 1:
            candidates = named
        if len(candidates) > 1:
            raise ValueError(f"record_routing: module '{pname}' holds {count} experts and several children of width "
                             f"{count} ({', '.join(c for c, _ in candidates)}); pass routing=[the router's module name]")
        for cname, _ in candidates:
            found.append((f"{pname}.{cname}" if pname else cname, count))
    return found


def _router_output(out):
    """A router's logits or probabilities: the tensor itself, or the first of a tuple (transformers' routers
    return (router_logits, top-k weights, top-k indices))."""
    if isinstance(out, (tuple, list)) and out and torch.is_tensor(out[0]):
        return out[0]
    return out


class RoutingRecorder:
    """What record_routing yields: collects one batch per forward of the model.

    add_labels(y): the batch's true classes (call once per batch, or once with all labels at the end).
    add_feature(name, values): a per-example signal computed outside the model ([B] or [B, F]).
    arrays(): the trace as a dict of numpy arrays (also what arcal.audit takes directly).
    write(path): writes them (record_routing does it on exit when given a path).
    """

    def __init__(self, model, *, routing=(), features=None, output=None, softmax=False, meta=None,
                 layout="auto", routing_kind="unordered", per_token=False, topk="auto"):
        if isinstance(model, torch.jit.ScriptModule):
            raise ValueError("record_routing: the model is a TorchScript module (torch.jit.trace or torch.jit.script), "
                             "which runs without Python forward hooks; record the eager torch.nn.Module instead "
                             "(it computes the same outputs)")
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"record_routing: model is a {type(model).__name__}, but must be a torch.nn.Module")
        if routing_kind not in ("depth", "unordered"):
            raise ValueError(f"record_routing: routing_kind is {routing_kind!r}, but must be 'depth' (ordered sources: "
                             "layers, earliest first) or 'unordered' (mixture-of-experts experts)")
        if not (topk is None or (isinstance(topk, str) and topk == "auto") or
                (isinstance(topk, int) and not isinstance(topk, bool) and topk >= 2)):
            raise ValueError(f"record_routing: topk is {topk!r}, but must be 'auto' (the top-{TOPK_AUTO_K} form when "
                             f"the outputs have more than {TOPK_AUTO_CLASSES} classes), an integer k >= 2 (the top-k "
                             "form) or None (the full logits)")
        self._topk = topk
        self.model = model
        self._per_token = bool(per_token)
        self._tokens = None  # per_token: the sequence length of the first batch (every batch must match)
        self._clusters, self._given_clusters, self._sequences = [], [], 0
        # per_token with attention masks (padded batches): the mask the model's forward was given, each
        # batch's kept-token mask [B*T] (None: every token), tokens kept per sequence, the longest T.
        self._mask, self._keeps, self._seq_counts, self._context = None, [], [], 0
        self._output = output or _default_output
        self._meta = dict(meta or {})
        self._kind = routing_kind
        modules = dict(model.named_modules())
        # torch.compile wraps the model in an OptimizedModule whose submodules are named "_orig_mod.NAME".
        compiled_prefix = "_orig_mod." if isinstance(getattr(model, "_orig_mod", None), torch.nn.Module) else ""

        def resolve(name):
            if name in modules:
                return name
            if compiled_prefix and compiled_prefix + name in modules:
                return compiled_prefix + name
            known = ", ".join(n[len(compiled_prefix):] if compiled_prefix and n.startswith(compiled_prefix) else n
                              for n in modules if n and n != "_orig_mod") or "none"
            raise ValueError(f"record_routing: the model has no module '{name}' (modules: {known})")

        self._discovered = {}
        if isinstance(routing, str) and routing == "auto":
            routers = find_routers(model)
            if not routers:
                raise ValueError("record_routing: routing='auto' found no router: no module holds a child named "
                                 "'experts' (a ModuleList of experts, or fused experts) beside a child whose output "
                                 "width equals their number; pass routing=[the router modules' names] (model."
                                 "named_modules() lists them)")
            routing = [(name, _router_output) for name, _ in routers]
            self._discovered = {name: {"experts": count} for name, count in routers}
            for name, _ in routers:  # the block's k, where it says it (a Linear router emits logits only)
                parent = modules[resolve(name).rsplit(".", 1)[0]] if "." in resolve(name) else model
                k = getattr(parent, "top_k", None) or getattr(parent, "num_experts_per_tok", None)
                if isinstance(k, int) and k > 0:
                    self._discovered[name]["top_k"] = k
            if softmax is False:
                softmax = "auto"  # a router's logits or probabilities, told apart per batch (see _routing_point)
        if softmax not in (True, False, "auto"):
            raise ValueError(f"record_routing: softmax is {softmax!r}, but must be True, False or 'auto'")
        self._softmax = softmax
        self._routing = [(name, resolve(name), fn) for name, fn in (_spec(r) for r in _entries(routing, "routing"))]
        feats = features or {}
        if not isinstance(feats, dict):
            feats = {_spec(f)[0]: f for f in _entries(feats, "features")}
        self._features = {fname: (src[0], resolve(src[0]), src[1]) for fname, src in
                          ((k, _spec(v)) for k, v in feats.items())}
        if isinstance(layout, str):
            self._layout = {}
            self._default_layout = layout
        elif isinstance(layout, dict):
            self._layout, self._default_layout = dict(layout), "auto"
        else:
            raise ValueError(f"record_routing: layout must be a string or a dict of module name -> layout, not "
                             f"{type(layout).__name__}")
        for name in self._discovered:  # transformers' routers see hidden_states.reshape(-1, H): [B*T, E]
            self._layout.setdefault(name, "auto_flat")
        for lay in [self._default_layout] + list(self._layout.values()):
            if lay not in LAYOUTS + ("auto_flat",):
                raise ValueError(f"record_routing: layout '{lay}' is not one of {', '.join(LAYOUTS)}")
        named = {n for n, _, _ in self._routing} | {s[0] for s in self._features.values()}
        for name in self._layout:
            if name not in named:
                raise ValueError(f"record_routing: layout names '{name}', which is not a recorded module")
        self._modules = modules
        self._pending = {}
        self._logits, self._labels = [], []
        # The outputs' form, fixed at the first batch: "full" (logits [N, K]) or "topk" (k per example and
        # the summaries; see _topk_summaries), with K.
        self._form, self._k, self._classes, self._rows = None, None, None, 0
        self._topk_rows = _RowStore()  # topk form: the summaries of the kept rows, batch after batch
        # topk form, label log-probabilities: a batch's logits (the model's own tensor, flattened [B*T, K],
        # no copy) are held until the labels that match it are added, then only their gathered values
        # are kept. _label_logprob[i] is batch i's ([kept] values, the labels used, its first row), None
        # while waiting; the labels used are checked against the final labels in arrays(). _awaiting lists
        # the waiting batches in order, _label_queue the added label chunks not yet matched to a batch.
        self._label_logprob, self._awaiting, self._label_queue, self._warned_awaiting = [], [], [], False
        self._routing_rows = [[] for _ in self._routing]
        self._selected_rows = [[] for _ in self._routing]  # routing="auto": the top-k gate weights used
        self._entropy_rows = [[] for _ in self._routing]
        self._depth_rows = [[] for _ in self._routing]
        self._feature_rows = {name: [] for name in self._features}
        self._extra = {}
        self._handles = []
        self._renormalised = 0.0  # the largest |row sum - 1| that was renormalised

    # ---- hooks
    def _capture(self, module_name):
        def hook(_module, _inputs, out):
            if module_name in self._pending:
                raise ValueError(f"record_routing: module '{module_name}' ran twice in one forward of the model; "
                                 "record a module that runs once per forward")
            self._pending[module_name] = out
        return hook

    def _layout_of(self, name):
        return self._layout.get(name, self._default_layout)

    def _routing_point(self, name, t, batch):
        """[B, T, E] float32 weights (renormalised), their token mean, mean entropy and depth moments."""
        dtype = t.dtype
        w = _as_tokens(name, t.detach(), batch, "routing point", self._layout_of(name)).float()
        soft = self._softmax
        if soft == "auto":
            # Probabilities are non-negative rows summing to 1 (within the dtype's rounding); anything else
            # is taken for logits. The choice is recorded per point in the trace's meta.
            sums = w.sum(dim=-1)
            probs = bool((w >= 0).all()) and float((sums - 1).abs().max()) <= ROW_SUM_TOLERANCE.get(dtype, 1e-4)
            soft = not probs
            seen = self._discovered.setdefault(name, {}).setdefault("output", "logits" if soft else "probabilities")
            if seen != ("logits" if soft else "probabilities"):
                raise ValueError(f"record_routing: routing point '{name}' gave {seen} in an earlier batch and "
                                 f"{'logits' if soft else 'probabilities'} in this one; pass softmax=True (logits) or "
                                 "softmax=False (probabilities)")
        if soft:
            w = torch.softmax(w, dim=-1)
        if not torch.isfinite(w).all():
            raise ValueError(f"record_routing: routing point '{name}' has non-finite weights")
        if (w < 0).any():
            raise ValueError(f"record_routing: routing point '{name}' has negative weights, so its rows are not "
                             "probability vectors (gate logits? pass softmax=True)")
        sums = w.sum(dim=-1, keepdim=True)
        tol = ROW_SUM_TOLERANCE.get(dtype, 1e-4) if not soft else 1e-4
        dev = float((sums - 1).abs().max())
        if dev > tol:
            raise ValueError(f"record_routing: routing point '{name}' has a row summing to "
                             f"{float(sums.flatten()[int((sums - 1).abs().flatten().argmax())]):.6g} (tolerance {tol:g} "
                             f"for {str(dtype).replace('torch.', '')}), so its rows are not probability vectors "
                             "(gate logits? pass softmax=True)")
        self._renormalised = max(self._renormalised, dev)
        w = w / sums
        ent = -(w * torch.log(w.clamp_min(1e-30))).sum(dim=-1)  # per token, nats
        e = w.shape[-1]
        d = torch.linspace(0, 1, e) if e > 1 else torch.zeros(1)
        mu = (w * d).sum(dim=-1)
        var = (w * (d - mu.unsqueeze(-1)) ** 2).sum(dim=-1)
        if self._per_token:  # every token its own example: [B*T, E] rows and [B*T] statistics
            if w.shape[1] != self._tokens:
                raise ValueError(f"record_routing: routing point '{name}' has {w.shape[1]} tokens per sequence, but the "
                                 f"logits have T = {self._tokens}")
            return w.reshape(-1, e), ent.reshape(-1), mu.reshape(-1), var.reshape(-1)
        return w.mean(dim=1), ent.mean(dim=1), mu.mean(dim=1), var.mean(dim=1)

    def _on_forward(self, _module, _inputs, out):
        logits = self._output(out)
        want = 3 if self._per_token else 2
        if not torch.is_tensor(logits) or logits.dim() != want:
            raise ValueError("record_routing: the model's output must be logits "
                             f"{'[B, T, K] (per_token=True)' if self._per_token else '[B, K]'}; got "
                             f"{tuple(logits.shape) if torch.is_tensor(logits) else type(logits).__name__}")
        batch = logits.shape[0]
        mask, self._mask = self._mask, None
        keep = None
        if self._per_token:
            if mask is not None:
                # A padded batch: only tokens whose attention mask is 1 are examples; batches may differ in T.
                if not torch.is_tensor(mask) or mask.dim() != 2 or tuple(mask.shape) != tuple(logits.shape[:2]):
                    raise ValueError(f"record_routing: the attention mask has shape "
                                     f"{tuple(mask.shape) if torch.is_tensor(mask) else type(mask).__name__}, but the "
                                     f"logits are {tuple(logits.shape)}: it must be [B, T] = {tuple(logits.shape[:2])} "
                                     "(1 for a token, 0 for padding)")
                keep = mask.detach().to("cpu").reshape(-1) != 0
            elif self._tokens is not None and logits.shape[1] != self._tokens and not any(k is not None for k in self._keeps):
                raise ValueError(f"record_routing: this batch has sequences of {logits.shape[1]} tokens, but the first "
                                 f"had {self._tokens}; record sequences of one length, or pass attention_mask= to the "
                                 "model (padded batches)")
            self._tokens = logits.shape[1]
        pending, self._pending = self._pending, {}

        def take(module, fn, what, name):
            if module not in pending:
                raise ValueError(f"record_routing: {what} '{name}' (module '{module}') did not run in this forward")
            t = fn(pending[module]) if fn else pending[module]
            if not torch.is_tensor(t):
                t = _default_output(t)
            return t

        rows, selected = [], []
        for name, module, fn in self._routing:
            rows.append(self._routing_point(name, take(module, fn, "routing point", name), batch))
            selected.append(self._selection(name, pending.get(module), rows[-1][0], batch))
        feats = {}
        for fname, (mname, module, fn) in self._features.items():
            t = _as_tokens(mname, take(module, fn, "feature", fname).detach(), batch, "feature", self._layout_of(mname))
            if self._per_token:
                if t.shape[1] != self._tokens:
                    raise ValueError(f"record_routing: feature '{fname}' has {t.shape[1]} tokens per sequence, but the "
                                     f"logits have T = {self._tokens}")
                feats[fname] = t.float().reshape(-1, t.shape[-1])
            else:
                feats[fname] = t.float().mean(dim=1)
        # Only a forward whose every entry was read is kept: a refused batch leaves the recording as it was.
        def kept(t):
            return t if keep is None else t[keep.to(t.device)]

        flat = logits.detach().reshape(-1, logits.shape[-1])  # (B*T, K), a view
        form = self._output_form(flat.shape[-1])
        summaries = None
        if form == "topk":
            kept_rows = None if keep is None else keep.nonzero()[:, 0].to(flat.device)
            summaries = _topk_summaries(flat, self._k, kept_rows)
            if not torch.isfinite(summaries["log_normalizer"]).all():
                bad = int((~torch.isfinite(summaries["log_normalizer"])).nonzero()[0, 0])
                raise ValueError(f"record_routing: the model's logits are not finite in row {bad} of this batch "
                                 "(NaN or +inf): no softmax over them exists")

        for p, (mean, ent, mu, var) in enumerate(rows):
            if selected[p] is not None:
                self._selected_rows[p].append(_to_numpy(kept(selected[p])))
            self._routing_rows[p].append(_to_numpy(kept(mean)))
            self._entropy_rows[p].append(_to_numpy(kept(ent)))
            self._depth_rows[p].append((_to_numpy(kept(mu)), _to_numpy(kept(var))))
        for fname, v in feats.items():
            self._feature_rows[fname].append(_to_numpy(kept(v)))
        if self._per_token:
            counts = np.full(batch, self._tokens, np.int64) if keep is None else \
                keep.reshape(batch, -1).sum(dim=1).numpy().astype(np.int64)
            self._clusters.append(np.repeat(np.arange(self._sequences, self._sequences + batch, dtype=np.int64), counts))
            self._seq_counts.append(counts)
            self._keeps.append(None if keep is None else keep.numpy())
            self._context = max(self._context, int(self._tokens))
            self._sequences += batch
        if form == "full":
            self._logits.append(_to_numpy(kept(flat)))
            self._rows += self._logits[-1].shape[0]
            return
        cpu_keep = None if keep is None else keep.cpu()
        summary_rows = {name: v.numpy() for name, v in summaries.items()}
        self._topk_rows.append(summary_rows)
        self._batches_topk = getattr(self, "_batches_topk", 0) + 1
        n_kept = summary_rows["log_normalizer"].shape[0]
        self._label_logprob.append(None)
        self._awaiting.append({"batch": self._batches_topk - 1, "flat": flat, "keep": cpu_keep,
                               "log_normalizer": summaries["log_normalizer"], "start": self._rows, "kept": n_kept})
        self._rows += n_kept
        self._match_labels()
        held = sum(b["flat"].numel() * b["flat"].element_size() for b in self._awaiting)
        if held > _AWAITING_WARN_BYTES and not self._warned_awaiting:
            self._warned_awaiting = True
            warnings.warn(f"record_routing: {len(self._awaiting)} batches' logits ({held / 2**30:.1f} GiB) are held "
                          "until their labels are added; call rec.add_labels(y) after each forward so that only "
                          "one batch's logits are kept (the top-k form needs the logit at the label)",
                          RuntimeWarning, stacklevel=2)

    def _output_form(self, classes):
        """Fixes the outputs' form at the first batch ("full" or "topk") and checks K at every later one."""
        if self._form is None:
            if self._topk is None or (self._topk == "auto" and classes <= TOPK_AUTO_CLASSES):
                self._form = "full"
            else:
                k = TOPK_AUTO_K if self._topk == "auto" else self._topk
                if k >= classes:
                    raise ValueError(f"record_routing: topk={k}, but the model's outputs have K = {classes} classes; "
                                     f"the top-k form needs k < K (topk=None records the full logits)")
                self._form, self._k = "topk", k
            self._classes = classes
        elif classes != self._classes:
            raise ValueError(f"record_routing: this batch's outputs have K = {classes} classes, but the first "
                             f"batch's had {self._classes}")
        return self._form

    def _gather_label_logprob(self, pending, y):
        """The log-softmax value at label y of every kept row of a waiting batch: y is [B*T] (one per row,
        padding included) or [kept]. Label -100 gives 0 (the row is dropped in arrays())."""
        flat, keep = pending["flat"], pending["keep"]
        rows = np.arange(flat.shape[0]) if keep is None else np.flatnonzero(keep.numpy())
        if y.shape[0] == flat.shape[0] and keep is not None:
            y = y[rows]
        ignored = y == -100
        bad = ~ignored & ((y < 0) | (y >= self._classes))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"record_routing: label {int(y[i])} (position {i} of the batch's kept tokens) is not in "
                             f"[0, K) with K = {self._classes} (nor -100, transformers' 'no target')")
        safe = torch.from_numpy(np.where(ignored, 0, y)).to(flat.device)
        at = flat[torch.from_numpy(rows).to(flat.device), safe].to(pending["log_normalizer"].dtype).cpu()
        lp = (at - pending["log_normalizer"]).numpy().astype(np.float32)  # log_normalizer: the kept rows
        lp[ignored] = 0.0
        return lp, y

    def _match_labels(self):
        """topk form: pairs the waiting batches with the label chunks added so far, in order, while the first
        chunk holds exactly one batch's labels ([B*T] or its kept tokens); the rest is paired in arrays()."""
        while self._awaiting and self._label_queue:
            pending, y = self._awaiting[0], self._label_queue[0]
            if y.shape[0] not in (pending["flat"].shape[0], pending["kept"]):
                return
            self._label_logprob[pending["batch"]] = self._gather_label_logprob(pending, y) + (pending["start"],)
            self._awaiting.pop(0)
            self._label_queue.pop(0)

    def _selection(self, name, raw, dense, batch):
        """routing="auto" only: the experts the model actually used for each row of `dense` ([rows, E]), as
        their gate weights scattered into [rows, E] (0 for experts not selected). transformers' routers
        return (logits, top-k weights, top-k indices); a router whose block says its `top_k` (or
        `num_experts_per_tok`) gets the top-k of the dense distribution, renormalised (Mixtral's rule).
        None when neither is there (a dense mixture: every expert is used with its dense weight)."""
        info = self._discovered.get(name)
        if info is None or "experts" not in info:
            return None
        e = dense.shape[-1]
        if isinstance(raw, (tuple, list)) and len(raw) >= 3 and torch.is_tensor(raw[1]) and torch.is_tensor(raw[2]):
            weights = _as_tokens(name, raw[1].detach().float(), batch, "top-k weights", self._layout_of(name))
            index = _as_tokens(name, raw[2].detach(), batch, "top-k indices", self._layout_of(name))
            out = torch.zeros(weights.shape[0] * weights.shape[1], e)
            out.scatter_(1, index.reshape(-1, index.shape[-1]).long().cpu(), weights.reshape(-1, weights.shape[-1]).cpu())
            info.setdefault("selection", f"top-{index.shape[-1]} weights returned by the router")
        else:
            k = info.get("top_k")
            if not k:
                return None
            top = torch.topk(dense, k, dim=-1)
            out = torch.zeros_like(dense).scatter_(1, top.indices, top.values / top.values.sum(dim=-1, keepdim=True))
            info.setdefault("selection", f"top-{k} of the dense distribution, renormalised (the block's top_k)")
        if not self._per_token:
            out = out.reshape(batch, -1, e).mean(dim=1)
        return out

    def _capture_mask(self, _module, _args, kwargs):
        if self._per_token:
            self._mask = kwargs.get("attention_mask")

    def __enter__(self):
        for module in dict.fromkeys([m for _, m, _ in self._routing] + [s[1] for s in self._features.values()]):
            self._handles.append(self._modules[module].register_forward_hook(self._capture(module)))
        self._handles.append(self.model.register_forward_hook(self._on_forward))
        self._handles.append(self.model.register_forward_pre_hook(self._capture_mask, with_kwargs=True))
        return self

    def close(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- what the user adds
    def add_labels(self, labels):
        """The batch's true classes [B] (per_token: the next tokens [B, T], flattened as the logits are)."""
        y = labels.detach().cpu().numpy() if torch.is_tensor(labels) else np.asarray(labels)
        self._labels.append(y.reshape(-1).astype(np.int64))
        if self._form != "full" and (self._topk is not None):
            self._label_queue.append(self._labels[-1])
            self._match_labels()

    def add_clusters(self, ids):
        """per_token only: the batch's sequence ids [B] (e.g. document ids), replacing the running sequence
        index as the cluster of every token of the sequence."""
        if not self._per_token:
            raise ValueError("record_routing: add_clusters applies to per_token=True recordings")
        v = ids.detach().cpu().numpy() if torch.is_tensor(ids) else np.asarray(ids)
        self._given_clusters.append(v.reshape(-1).astype(np.int64))

    def add_feature(self, name, values):
        v = values.detach().to("cpu", torch.float32).numpy() if torch.is_tensor(values) else np.asarray(values, np.float32)
        if v.ndim == 1:
            v = v[:, None]
        self._extra.setdefault(name, []).append(v.reshape(v.shape[0], -1))

    # ---- the trace
    def arrays(self):
        if self._form is None:
            raise ValueError("record_routing: the model never ran inside the with-block (no batches recorded)")
        if self._form == "full":
            out = {"logits": np.concatenate(self._logits)}
        else:
            out = self._topk_rows.join()  # shares memory with the recorder (joined once)
            out["num_classes"] = np.array(self._classes, np.int64)
        n = self._rows
        labels = np.concatenate(self._labels) if self._labels else np.zeros(0, np.int64)
        masked = self._per_token and any(k is not None for k in self._keeps)
        if masked and labels.shape[0] != n:
            # Labels given as [B, T] per padded batch: the same tokens the attention masks kept.
            full = sum(len(k) if k is not None else int(c.sum()) for k, c in zip(self._keeps, self._seq_counts))
            if labels.shape[0] == full:
                labels = labels[np.concatenate([k if k is not None else np.ones(int(c.sum()), bool)
                                                for k, c in zip(self._keeps, self._seq_counts)])]
        if labels.shape[0] != n:
            raise ValueError(f"record_routing: {labels.shape[0]} labels were added (add_labels), but the model saw "
                             f"N = {n} examples")
        out["labels"] = labels
        if self._form == "topk":
            out["label_logprob"] = self._label_logprobs(labels)
        if self._per_token:
            clusters = np.concatenate(self._clusters)
            if self._given_clusters:
                given = np.concatenate(self._given_clusters)
                if given.shape[0] != self._sequences:
                    raise ValueError(f"record_routing: {given.shape[0]} sequence ids were added (add_clusters), but the "
                                     f"model saw {self._sequences} sequences")
                clusters = np.repeat(given, np.concatenate(self._seq_counts))
            out["cluster"] = clusters
        if self._routing:
            rows = [np.concatenate(r) for r in self._routing_rows]
            sources = np.array([r.shape[1] for r in rows], np.int32)
            routing = np.zeros((n, len(rows), int(sources.max())), np.float32)
            for p, r in enumerate(rows):
                routing[:, p, :r.shape[1]] = r
            out["routing"] = routing
            out["routing_sources"] = sources
            out["routing_entropy"] = np.stack([np.concatenate(r) for r in self._entropy_rows], axis=1).astype(np.float32)
            if self._kind == "depth":
                out["routing_depth_mean"] = np.stack([np.concatenate([m for m, _ in r]) for r in self._depth_rows],
                                                     axis=1).astype(np.float32)
                out["routing_depth_var"] = np.stack([np.concatenate([v for _, v in r]) for r in self._depth_rows],
                                                    axis=1).astype(np.float32)
            out["routing_kind"] = np.array(self._kind)
            if any(self._selected_rows):
                # The experts actually used (top-k gate weights, 0 elsewhere), beside the dense distribution
                # in `routing` that every statistic reads; points without a selection hold their dense rows.
                sel = np.zeros_like(routing)
                for p, r in enumerate(self._selected_rows):
                    sel[:, p, :rows[p].shape[1]] = np.concatenate(r) if r else rows[p]
                out["routing_selected"] = sel
        columns, names = [], []
        for name, rows in list(self._feature_rows.items()) + list(self._extra.items()):
            v = np.concatenate(rows)
            if v.shape[0] != n:
                raise ValueError(f"record_routing: feature '{name}' has {v.shape[0]} rows, but N = {n}")
            columns.append(v)
            names += [name] if v.shape[1] == 1 else [f"{name}_{j}" for j in range(v.shape[1])]
        if columns:
            out["features"] = np.concatenate(columns, axis=1).astype(np.float32)
            out["feature_names"] = np.array(names)
        meta = {"source": "arcal.torch_hooks.record_routing", "model": type(self.model).__name__,
                "routing_points": [name for name, _, _ in self._routing], "routing_kind": self._kind,
                "version": _arcal.__version__,
                "outputs": {"form": "full", "classes": int(self._classes)} if self._form == "full" else
                {"form": "topk", "k": int(self._k), "classes": int(self._classes)}}
        if self._renormalised > 0:
            meta["routing_rows_renormalised_max_deviation"] = self._renormalised
        if self._discovered:
            # routing="auto": each router, its number of experts and what it emitted ("logits": the recorded
            # weights are their softmax, the dense router distribution before any top-k selection).
            meta["routers"] = self._discovered
            meta["statistics_read"] = ("routing: the dense router distribution (softmax of the router logits), which "
                                       "every statistic (re, the profile) reads; routing_selected: the experts the "
                                       "model used with their gate weights, read by no statistic yet")
        if self._per_token:
            meta.update({"task": "lm", "cluster": "sequence", "context": int(self._context), "sequences": self._sequences})
            if any(k is not None for k in self._keeps):
                meta["attention_mask"] = "tokens whose attention mask is 0 (padding) are not examples"
        meta.update(self._meta)
        # transformers' convention: label -100 marks a position with no target (the last token of a document,
        # whose next token is padding); such positions are not examples.
        ignored = out["labels"] == -100
        if ignored.any():
            keep = ~ignored
            for key, v in list(out.items()):
                if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == n and key not in ("routing_sources",
                                                                                                 "feature_names"):
                    out[key] = v[keep]
            meta["ignored_labels"] = int(ignored.sum())
        out["meta"] = json.dumps(meta)
        return out

    def _label_logprobs(self, labels):
        """topk form: [N] log-softmax values at the final labels (kept rows, before -100 is dropped). Batches
        paired with their labels as they came were computed then (and are checked against `labels` here);
        the rest (labels added for several batches at once) are gathered now from their held logits."""
        out = np.zeros(labels.shape[0], np.float32)
        for b, done in enumerate(self._label_logprob):
            if done is None:
                continue
            lp, used, start = done
            if not np.array_equal(used, labels[start:start + lp.shape[0]]):
                raise ValueError(f"record_routing: the labels added for batch {b} do not match its place among all "
                                 "labels (labels added in pieces that do not follow the batches); add each batch's "
                                 "labels [B, T] right after its forward")
            out[start:start + lp.shape[0]] = lp
        for pending in self._awaiting:
            start, kept = pending["start"], pending["kept"]
            out[start:start + kept] = self._gather_label_logprob(pending, labels[start:start + kept])[0]
        return out

    def write(self, path):
        _arcal.write_trace(str(path), **self.arrays())
        return str(path)


@contextlib.contextmanager
def record_routing(model, path=None, *, routing=(), features=None, output=None, softmax=False, meta=None,
                   layout="auto", routing_kind="unordered", per_token=False, topk="auto"):
    """Records a trace from a PyTorch model's forward hooks while the with-block runs.

    model : the torch.nn.Module whose forward returns logits [B, K] (or a tuple / an object with
        .logits; else give output=fn mapping the output to logits). Eager or torch.compile'd; not
        TorchScript.
    path : where to write the trace on leaving the block (None: only rec.arrays()). Nothing is written
        when the block raises. If writing fails, the recording is not lost: the error says so, and
        rec.arrays() / rec.write(other_path) still work.
    routing : "auto" (a mixture of experts: every router find_routers discovers, one routing point per
        layer named by its module path, e.g. model.layers.0.mlp.gate; the recorded weights are the dense
        router distribution, softmax of the router's logits, before any top-k selection; logits and
        probabilities are told apart per point, meta["routers"] says which), or a module name, or a list
        of module names (as in model.named_modules()) or (name, fn)
        pairs where fn extracts the tensor from the module's output, whose outputs are routing weights
        over sources (rows summing to 1; softmax=True applies a softmax over the last axis first, for
        gates that output logits; softmax="auto" decides per point). One routing point each. Rows are accumulated in float32 and
        renormalised when they sum to 1 within ROW_SUM_TOLERANCE for the tensor's dtype (bf16: 2e-2).
    features : {feature name: module name or (name, fn)} (or a list of module names): any module's
        output, stored as token-mean features [N, F] with feature_names. A module may appear both here
        and in routing (it is hooked once).
    layout : how the recorded tensors' axes are laid out: "auto" (the default: [B, E], [B, T, E] or
        [T, B, E] when the shape says which unambiguously, else an error naming the fix),
        "batch_first", "seq_first" ([T, B, E]), "flat" ([B*T, E], example-major) or "flat_seq_first"
        ([T*B, E]); one string for every entry or a dict {module name: layout}.
    routing_kind : "unordered" (the default: experts of a mixture of experts, which have no order, so
        the audit offers entropy only) or "depth" (ordered sources such as the layers an AttnRes point
        reads; adds the per-token depth mean and variance).
    meta : extra keys for the trace's meta JSON.
    per_token : a language model: logits [B, T, K], every token one example with its own routing weights,
        labels [B, T], and each sequence a cluster (array `cluster`; rec.add_clusters(ids) sets the ids).
    topk : the outputs' form. "auto" (the default): the full `logits` when K <= TOPK_AUTO_CLASSES (1024),
        else the top-TOPK_AUTO_K (32) form; an integer k (2 <= k < K): the top-k form; None: the full
        logits whatever K. The top-k form holds topk_logprobs [N, k], topk_indices [N, k], label_logprob,
        log_normalizer, predictive_entropy, prob_sq_sum [N] and num_classes (K) instead of logits;
        meta["outputs"] records the choice ({"form": "topk", "k": 32, "classes": K} or {"form": "full",
        "classes": K}). Add each batch's labels right after its forward (see the module's docstring).

    Yields the RoutingRecorder: call rec.add_labels(y) for every batch; rec.add_feature(name, values)
    adds per-example signals computed outside the model. The hooks are removed on leaving the block.
    """
    rec = RoutingRecorder(model, routing=routing, features=features, output=output, softmax=softmax, meta=meta,
                          layout=layout, routing_kind=routing_kind, per_token=per_token, topk=topk)
    with rec:
        yield rec
    if path is not None:
        try:
            rec.write(path)
        except Exception as e:
            n = rec._rows
            warnings.warn(f"record_routing: the trace was not written to {path} ({e}); the recording of {n} examples "
                          "is kept: rec.arrays() returns it and rec.write(path) writes it", RuntimeWarning, stacklevel=3)
            raise
