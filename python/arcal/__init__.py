"""arcal from Python: the same C++ core as the `arcal` command (docs/python.md).

    import arcal
    arcal.metrics(labels, logits=logits)                  # the dict of `arcal metrics --json`
    arcal.trace_metrics("trace.npz")                      # the same of a trace file (either output form)
    cal = arcal.Calibrator("temperature").fit(val_y, logits=val_z)
    p = cal.predict_proba(logits=test_z)                  # cal.to_dict(): the `--save` JSON
    res = arcal.audit([trace_or_path, ...])               # what results.json holds
    tr = arcal.read_trace("run.npz"); arcal.write_trace("out.npz", **tr)
    out, expanded = arcal.cedar_attention(q, k, v, budget=8)
    with arcal.torch_hooks.record_routing(model, "trace.npz", routing=["gate"]) as rec: ...

Arrays are numpy (anything np.asarray takes); bad input raises ValueError with the CLI's message.
Long computations release the GIL. The module links no LibTorch: it imports beside any torch, or none.
"""
from . import _build_info


def _refuse_mismatched_torch():
    """ImportError when this environment's torch is not the release arcal-torch was built against (the
    training commands would load a libtorch they were not built for). A build without torch takes any.
    Reads the version without importing torch (which takes seconds) unless torch is already imported."""
    import sys

    if "torch" in sys.modules and hasattr(sys.modules["torch"], "__version__"):
        present = sys.modules["torch"].__version__
    else:
        try:
            from importlib.metadata import PackageNotFoundError, version
        except ImportError:  # Python < 3.8
            return
        try:
            present = version("torch")
        except PackageNotFoundError:
            return  # no torch: the analysis side needs none
    built = _build_info.TORCH
    if built is not None and str(present).split("+")[0] != built.split("+")[0]:
        raise ImportError(f"arcal was built against torch {built}, but this environment has torch {present}: "
                          "rebuild arcal here (pip install --no-build-isolation . ; docs/python.md \"Installing\")")


_refuse_mismatched_torch()

from . import _arcal  # noqa: E402
from ._arcal import (  # noqa: F401,E402
    Calibrator,
    __version__,
    audit,
    cedar_attention,
    read_trace,
    report,
    trace_metrics,
    write_trace,
)
from ._inputs import prediction_arrays as _prediction_arrays  # noqa: E402
from .plots import reliability_diagram  # noqa: F401,E402

__all__ = ["metrics", "trace_metrics", "Calibrator", "audit", "report", "read_trace", "write_trace", "cedar_attention", "reliability_diagram",
           "torch_hooks", "__version__"]


def metrics(labels, probs=None, *, logits=None, bins=15, ci=True, seed=0, bootstrap=1000, cluster=None, smooth=False):
    y, z, p = _prediction_arrays(labels, logits, probs, "metrics")
    if cluster is not None and hasattr(cluster, "detach"):  # a torch tensor
        cluster = cluster.detach().cpu().numpy()
    return _arcal.metrics(y, logits=z, probs=p, bins=bins, ci=ci, seed=seed, bootstrap=bootstrap, cluster=cluster,
                          smooth=smooth)


_doc = _arcal.metrics.__doc__ or ""
metrics.__doc__ = ("metrics(labels, probs=None, *, logits=None, bins=15, ci=True, seed=0, bootstrap=1000, cluster=None, smooth=False) -> dict\n\n" +
                   _doc[_doc.find("Calibration metrics"):] + """
Also accepted: positional (labels, probs); torch tensors of any dtype and device (bf16, fp16,
requires_grad, CUDA: detached and copied to the CPU); a binary problem as probs [N] (the positive
class's probability: [1 - p, p]) or logits [N] (its logit: [0, z]).

Cost: ci=True (the default) runs the bootstrap (1000 resamples) and 1000 label redraws for the
calibration errors' intervals; ci=False gives the point values only, several hundred times faster
(use it inside training loops).
""")


def _calibrator_report(self, labels, *, logits=None, probs=None, out, bins=15, bootstrap=1000, seed=0, force=False):
    """report(labels, *, logits=None, probs=None, out, bins=15, bootstrap=1000, seed=0, force=False) -> dict

    The before/after report of this fitted calibrator on held-out predictions (labels [N] and logits= or
    probs= [N, K]): what `arcal calibrate --json` followed by `arcal report` writes, from Python. The
    metrics before and after (arcal.metrics with bins, bootstrap and seed), the fitted parameters and
    the reliability diagrams go to the report directory `out`; returns arcal.report's dict.
    """
    y, z, p = _prediction_arrays(labels, logits, probs, "Calibrator.report")
    before = metrics(y, logits=z, probs=p, bins=bins, seed=seed, bootstrap=bootstrap, smooth=True)
    after = metrics(y, probs=self.predict_proba(logits=z, probs=p), bins=bins, seed=seed, bootstrap=bootstrap, smooth=True)
    cal = self.to_dict()
    doc = {"schema": "arcal.calibrate/1", "mode": "fit", "method": self.method, "fit_file": None, "params_file": None,
           "apply_file": "(arrays given to Calibrator.report)", "out": "", "save": None,
           "n_fit": int(cal.get("n_calibration", 0)), "n_apply": int(len(y)), "calibrator": cal, "before": before, "after": after}
    return report(doc, out=out, force=force)


Calibrator.report = _calibrator_report


def __getattr__(name):
    # arcal.torch_hooks imports torch, which takes a second or two: only when asked for.
    if name == "torch_hooks":
        import importlib

        return importlib.import_module(".torch_hooks", __name__)
    raise AttributeError(f"module 'arcal' has no attribute '{name}'")
