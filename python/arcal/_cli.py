"""The `arcal` console command of a pip install (pyproject.toml [project.scripts]): runs the packaged
`arcal` executable (arcal/bin/arcal, or the build directory's for an uninstalled build) with the same
arguments, by exec, so its exit code, signals and standard streams are the executable's own."""
import os
import sys

from . import _build_info


def executable():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "arcal")
    return here if os.access(here, os.X_OK) else os.path.join(_build_info.BIN_DIR, "arcal")


def main():
    exe = executable()
    if not os.access(exe, os.X_OK):
        sys.exit(f"arcal: error: the arcal executable is missing ({exe}); reinstall arcal (pip install .)")
    os.execv(exe, ["arcal"] + sys.argv[1:])
