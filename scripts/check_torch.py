"""Checks that the torch of this Python is one that arcal builds against, and says in one line what
was found and what is needed when it is not (scripts/setup.sh runs it before CMake): a supported
release (python/arcal/_torch_check.py's range), its CMake files, and, where nvcc is on PATH, a CUDA
toolkit of the same major version as torch's CUDA build. Exit 0 when usable, 1 otherwise."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys

# The range from python/arcal/_torch_check.py, loaded as a file (the package itself needs the built module).
_spec = importlib.util.spec_from_file_location(
    "_torch_check", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "arcal", "_torch_check.py"))
_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_check)
SUPPORTED, supported = _check.SUPPORTED, _check.supported


def fail(msg):
    print(f"setup: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import torch
    import torch.utils
except ImportError as e:
    fail(f"no torch in {sys.executable} ({e}); needed: torch {SUPPORTED} (pip install 'torch{SUPPORTED.replace(' ', '')}')")
if not supported(torch.__version__):
    fail(f"torch {torch.__version__} found in {sys.executable}, but arcal needs torch {SUPPORTED}")
prefix = getattr(torch.utils, "cmake_prefix_path", None)
if not prefix or not os.path.isfile(os.path.join(prefix, "Torch", "TorchConfig.cmake")):
    fail(f"torch {torch.__version__} in {sys.executable} has no CMake files (expected {prefix}/Torch/TorchConfig.cmake); "
         "needed: a torch wheel from PyPI or an official LibTorch archive (-DCMAKE_PREFIX_PATH)")
nvcc = shutil.which("nvcc")
if torch.version.cuda and nvcc:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    if m and m.group(1) != torch.version.cuda.split(".")[0]:
        fail(f"nvcc {m.group(1)}.{m.group(2)} ({nvcc}) found, but torch {torch.__version__} was built with CUDA "
             f"{torch.version.cuda}: needed a CUDA {torch.version.cuda.split('.')[0]}.x toolkit on PATH, or none")
print(f"setup: torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}) from {os.path.dirname(torch.__file__)}")
