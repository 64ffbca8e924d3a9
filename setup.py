"""The build of the Python package: the pure-Python files of python/arcal, the extension _arcal and the
`arcal` executables (arcal, and arcal-torch where torch is present), all built by the project's CMake
(pyproject.toml declares the metadata; this file only adds the CMake step, which setuptools cannot
express declaratively). The console entry point `arcal` (arcal._cli) runs the packaged executable.

Environment:
  ARCAL_BUILD_DIR   an existing, configured CMake build of this checkout to build in (the README's
                    build/ reuses everything already compiled); default: build-pip/ here, configured
                    without tests.
  ARCAL_CMAKE_ARGS  extra -D arguments for a fresh configure (space-separated).
  ARCAL_JOBS        parallel build jobs (default: the number of CPUs).

LibTorch: arcal-torch links the libtorch of the `torch` that this Python imports (PyPI's wheels ship
their CMake files; CMake finds them through torch.utils.cmake_prefix_path of sys.executable), so the
training commands use the user's own torch. Without torch (`pip install .` into a venv without it) the
analysis side alone is built: the module, `arcal audit/metrics/calibrate/report/simulate/run`, no
LibTorch anywhere. The module never links LibTorch, so `import torch; import arcal` in either order
holds one libtorch (torch's).
"""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def have_torch():
    return importlib.util.find_spec("torch") is not None


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("ARCAL_BUILD_DIR") or os.path.join(HERE, "build-pip")
        jobs = os.environ.get("ARCAL_JOBS") or str(os.cpu_count() or 1)
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            args = ["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DARCAL_BUILD_TESTS=OFF",
                    "-DARCAL_PYTHON=" + sys.executable, "-DARCAL_WITH_TORCH=" + ("ON" if have_torch() else "OFF")]
            try:
                import pybind11
                args.append("-Dpybind11_DIR=" + pybind11.get_cmake_dir())
            except ImportError:
                pass
            args += os.environ.get("ARCAL_CMAKE_ARGS", "").split()
            subprocess.run(args, check=True)
        subprocess.run(["cmake", "--build", build_dir, "--target", "arcal_python", "arcal", "-j", jobs], check=True)
        built = glob.glob(os.path.join(build_dir, "python", "arcal", "_arcal*.so"))
        if len(built) != 1:
            raise RuntimeError(f"arcal: expected one _arcal*.so under {build_dir}/python/arcal, found {built}")
        target = self.get_ext_fullpath(ext.name)
        package = os.path.dirname(target)
        os.makedirs(os.path.join(package, "bin"), exist_ok=True)
        shutil.copyfile(built[0], target)
        # The executables beside the module (arcal._cli runs them), and the build's record of its torch.
        # setuptools' staging directory (build-pip/setuptools) outlives one install: an arcal-torch left
        # there by a build with torch must not ship in a build without it.
        for exe in ("arcal", "arcal-torch"):
            src, dst = os.path.join(build_dir, exe), os.path.join(package, "bin", exe)
            if os.path.exists(src):
                shutil.copy2(src, dst)
            elif os.path.exists(dst):
                os.remove(dst)
        shutil.copyfile(os.path.join(build_dir, "python", "arcal", "_build_info.py"), os.path.join(package, "_build_info.py"))


# setuptools' own staging goes under build-pip/ (build/ is the README's CMake build directory).
setup(ext_modules=[Extension("arcal._arcal", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build-pip", "setuptools")},
               "egg_info": {"egg_base": "build-pip"}})
