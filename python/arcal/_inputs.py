"""Turning what a researcher has in hand into the arrays the C++ core reads: numpy arrays, lists, and
torch tensors of any dtype and device (bf16, fp16, requires_grad, CUDA: detached and moved to the CPU
without importing torch when it is not already imported), plus binary predictions given as one column.
Errors are TypeError/ValueError that name the argument, its type and shape, never the values."""
import sys

import numpy as np


def _describe(x):
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    parts = [type(x).__name__]
    if shape is not None:
        parts.append("shape " + str(tuple(shape)))
    if dtype is not None:
        parts.append("dtype " + str(dtype))
    return ", ".join(parts)


def as_numpy(x, name, kind="float"):
    """x as a numpy array (floats as float64 unless already float32/float64; ints as int64)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if kind == "float":
            # bf16 has no numpy dtype; fp16 widens exactly; float32/64 are kept
            if t.dtype not in (torch.float32, torch.float64):
                t = t.to(torch.float64)
        elif not t.is_floating_point():
            t = t.to(torch.int64)
        elif t.dtype == torch.bfloat16:  # float labels stay float: the core refuses them rather than rounding
            t = t.to(torch.float64)
        return t.contiguous().numpy()
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists and the like: say what it was, not its values
        raise TypeError(f"{name} must be an array of numbers, not {_describe(x)} ({type(e).__name__})") from None
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise TypeError(f"{name} must be an array of numbers, not {_describe(x)}")
    return a


def prediction_arrays(labels, logits, probs, fn):
    """(labels, logits, probs) as numpy arrays; a 1-D probs [N] is the positive class's probability of a
    binary problem ([1 - p, p]), a 1-D logits [N] its logit ([0, z]: softmax gives sigmoid(z))."""
    y = as_numpy(labels, "labels", "int")
    z = None if logits is None else as_numpy(logits, "logits")
    p = None if probs is None else as_numpy(probs, "probs")
    if z is not None and z.ndim == 1:
        z = np.stack([np.zeros_like(z), z], axis=1)
    if p is not None and p.ndim == 1:
        if p.size and (np.nanmin(p) < 0 or np.nanmax(p) > 1):
            raise ValueError(f"{fn}: probs is 1-D (a binary problem's positive-class probability), but holds "
                             "values outside [0, 1]")
        p = np.stack([1.0 - p, p], axis=1)
    return y, z, p
