"""Traces from PyTorch models with no glue: forward hooks record per-example tensors (routing weights,
gate probabilities, any named module's output) next to the model's logits, and write a trace file
(docs/interface.md) that `arcal audit`, `arcal metrics` and `arcal.audit` read.

    with arcal.torch_hooks.record_routing(model, "trace.npz", routing=["blocks.0.gate", "blocks.1.gate"],
                                          features={"norm": "encoder.ln"}) as rec:
        for x, y in loader:
            model(x)
            rec.add_labels(y)
    arcal.audit(["trace.npz"])

Every forward of `model` is one batch: its output gives the logits [B, K] and each recorded module must
have run exactly once in it with an output whose first dimension is B.
"""
import contextlib
import json

import numpy as np
import torch

from . import _arcal

__all__ = ["record_routing", "RoutingRecorder"]


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


def _per_example(name, t, batch, what):
    """[B, ...] -> [B, C]: the mean over every axis between the batch and the last (tokens, heads)."""
    if t.dim() == 0 or t.shape[0] != batch:
        raise ValueError(f"record_routing: {what} '{name}' has shape {tuple(t.shape)}, but its first dimension "
                         f"must be the batch size {batch}")
    if t.dim() == 1:
        return t.reshape(batch, 1)
    if t.dim() > 2:
        t = t.reshape(batch, -1, t.shape[-1]).mean(dim=1)
    return t


def _spec(entry):
    """'module.name' or ('module.name', fn) -> (module name, fn or None)."""
    if isinstance(entry, str):
        return entry, None
    if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str) and callable(entry[1]):
        return entry[0], entry[1]
    raise ValueError(f"record_routing: {entry!r} must be a module name or a (module name, function) pair")


class RoutingRecorder:
    """What record_routing yields: collects one batch per forward of the model.

    add_labels(y): the batch's true classes (call once per batch, or once with all labels at the end).
    add_feature(name, values): a per-example signal computed outside the model ([B] or [B, F]).
    arrays(): the trace as a dict of numpy arrays (also what arcal.audit takes directly).
    write(path): writes them (record_routing does it on exit when given a path).
    """

    def __init__(self, model, *, routing=(), features=None, output=None, softmax=False, meta=None):
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"record_routing: model is a {type(model).__name__}, but must be a torch.nn.Module")
        self.model = model
        self._output = output or _default_output
        self._softmax = softmax
        self._meta = dict(meta or {})
        modules = dict(model.named_modules())
        self._routing = [_spec(r) for r in routing]
        feats = features or {}
        if not isinstance(feats, dict):
            feats = {_spec(f)[0]: f for f in feats}
        self._features = {name: _spec(src) for name, src in feats.items()}
        for module, _ in self._routing + list(self._features.values()):
            if module not in modules:
                known = ", ".join(n for n in modules if n) or "none"
                raise ValueError(f"record_routing: the model has no module '{module}' (modules: {known})")
        self._modules = modules
        self._pending = {}
        self._logits, self._labels, self._routing_rows = [], [], [[] for _ in self._routing]
        self._feature_rows = {name: [] for name in self._features}
        self._extra = {}
        self._handles = []

    # ---- hooks
    def _capture(self, module_name):
        def hook(_module, _inputs, out):
            if module_name in self._pending:
                raise ValueError(f"record_routing: module '{module_name}' ran twice in one forward of the model; "
                                 "record a module that runs once per forward")
            self._pending[module_name] = out
        return hook

    def _on_forward(self, _module, _inputs, out):
        logits = self._output(out)
        if not torch.is_tensor(logits) or logits.dim() != 2:
            raise ValueError("record_routing: the model's output must be logits [B, K]; got "
                             f"{tuple(logits.shape) if torch.is_tensor(logits) else type(logits).__name__}")
        batch = logits.shape[0]
        pending, self._pending = self._pending, {}

        def take(module, fn, what, name):
            if module not in pending:
                raise ValueError(f"record_routing: {what} '{name}' (module '{module}') did not run in this forward")
            t = fn(pending[module]) if fn else pending[module]
            if not torch.is_tensor(t):
                t = _default_output(t)
            return _per_example(name, t.detach().float(), batch, what)

        for p, (module, fn) in enumerate(self._routing):
            w = take(module, fn, "routing point", module)
            if self._softmax:
                w = torch.softmax(w, dim=-1)
            self._routing_rows[p].append(_to_numpy(w))
        for name, (module, fn) in self._features.items():
            self._feature_rows[name].append(_to_numpy(take(module, fn, "feature", name)))
        self._logits.append(_to_numpy(logits))

    def __enter__(self):
        for module, _ in self._routing + list(self._features.values()):
            self._handles.append(self._modules[module].register_forward_hook(self._capture(module)))
        self._handles.append(self.model.register_forward_hook(self._on_forward))
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
        y = labels.detach().cpu().numpy() if torch.is_tensor(labels) else np.asarray(labels)
        self._labels.append(y.reshape(-1).astype(np.int64))

    def add_feature(self, name, values):
        v = values.detach().to("cpu", torch.float32).numpy() if torch.is_tensor(values) else np.asarray(values, np.float32)
        if v.ndim == 1:
            v = v[:, None]
        self._extra.setdefault(name, []).append(v.reshape(v.shape[0], -1))

    # ---- the trace
    def arrays(self):
        if not self._logits:
            raise ValueError("record_routing: the model never ran inside the with-block (no batches recorded)")
        out = {"logits": np.concatenate(self._logits)}
        n = out["logits"].shape[0]
        labels = np.concatenate(self._labels) if self._labels else np.zeros(0, np.int64)
        if labels.shape[0] != n:
            raise ValueError(f"record_routing: {labels.shape[0]} labels were added (add_labels), but the model saw "
                             f"N = {n} examples")
        out["labels"] = labels
        if self._routing:
            rows = [np.concatenate(r) for r in self._routing_rows]
            sources = np.array([r.shape[1] for r in rows], np.int32)
            routing = np.zeros((n, len(rows), int(sources.max())), np.float32)
            for p, r in enumerate(rows):
                routing[:, p, :r.shape[1]] = r
            out["routing"] = routing
            out["routing_sources"] = sources
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
                "routing_points": [m for m, _ in self._routing], "version": _arcal.__version__}
        meta.update(self._meta)
        out["meta"] = json.dumps(meta)
        return out

    def write(self, path):
        _arcal.write_trace(str(path), **self.arrays())
        return str(path)


@contextlib.contextmanager
def record_routing(model, path=None, *, routing=(), features=None, output=None, softmax=False, meta=None):
    """Records a trace from a PyTorch model's forward hooks while the with-block runs.

    model : the torch.nn.Module whose forward returns logits [B, K] (or a tuple / an object with
        .logits; else give output=fn mapping the output to logits).
    path : where to write the trace on leaving the block (None: only rec.arrays()). Nothing is written
        when the block raises.
    routing : module names (as in model.named_modules()), or (name, fn) pairs where fn extracts the
        tensor from the module's output, whose outputs are routing weights over sources, [B, S] or
        [B, T, S] (averaged over the token axes): one routing point each, rows summing to 1 (softmax=True
        applies a softmax over the last axis first, for gates that output logits).
    features : {feature name: module name or (name, fn)} (or a list of module names): any module's
        output, [B], [B, F] or [B, T, F] (token-mean), stored as features [N, F] with feature_names.
    meta : extra keys for the trace's meta JSON.

    Yields the RoutingRecorder: call rec.add_labels(y) for every batch; rec.add_feature(name, values)
    adds per-example signals computed outside the model. The hooks are removed on leaving the block.
    """
    rec = RoutingRecorder(model, routing=routing, features=features, output=output, softmax=softmax, meta=meta)
    with rec:
        yield rec
    if path is not None:
        rec.write(path)
