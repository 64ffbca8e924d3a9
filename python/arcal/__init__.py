"""arcal from Python: the same C++ core as the `arcal` command (docs/python.md).

    import arcal
    arcal.metrics(labels, logits=logits)                  # the dict of `arcal metrics --json`
    cal = arcal.Calibrator("temperature").fit(val_y, logits=val_z)
    p = cal.predict_proba(logits=test_z)                  # cal.to_dict(): the `--save` JSON
    res = arcal.audit([trace_or_path, ...])               # what results.json holds
    tr = arcal.read_trace("run.npz"); arcal.write_trace("out.npz", **tr)
    out, expanded = arcal.cedar_attention(q, k, v, budget=8)
    with arcal.torch_hooks.record_routing(model, "trace.npz", routing=["gate"]) as rec: ...

Arrays are numpy (anything np.asarray takes); bad input raises ValueError with the CLI's message.
Long computations release the GIL.
"""
from ._arcal import (  # noqa: F401
    Calibrator,
    __version__,
    audit,
    cedar_attention,
    metrics,
    read_trace,
    write_trace,
)

__all__ = ["metrics", "Calibrator", "audit", "read_trace", "write_trace", "cedar_attention", "torch_hooks",
           "__version__"]


def __getattr__(name):
    # arcal.torch_hooks imports torch, which takes a second or two: only when asked for.
    if name == "torch_hooks":
        import importlib

        return importlib.import_module(".torch_hooks", __name__)
    raise AttributeError(f"module 'arcal' has no attribute '{name}'")
