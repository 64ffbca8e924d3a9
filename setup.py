"""The build of the Python package: the pure-Python files of python/arcal and the extension _arcal,
built by the project's CMake (pyproject.toml declares the metadata; this file only adds the CMake
step, which setuptools cannot express declaratively).

Environment:
  ARCAL_BUILD_DIR   an existing, configured CMake build of this checkout to build _arcal in (the
                    README's build/ reuses everything already compiled); default: build-pip/ here,
                    configured without tests.
  ARCAL_CMAKE_ARGS  extra -D arguments for a fresh configure (space-separated).
  ARCAL_JOBS        parallel build jobs (default: the number of CPUs).

LibTorch: the module links the libtorch of the `torch` that this Python imports, so that `import
torch; import arcal` never holds two copies: CMake is pointed at torch.utils.cmake_prefix_path when
that torch ships its CMake files (PyPI wheels do); Debian's python3-torch links Debian's libtorch
(libtorch-dev), which CMake finds by default.
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_prefix():
    try:
        import torch.utils
    except ImportError:
        return None
    p = getattr(torch.utils, "cmake_prefix_path", None)
    return p if p and os.path.isdir(os.path.join(p, "Torch")) else None


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("ARCAL_BUILD_DIR") or os.path.join(HERE, "build-pip")
        jobs = os.environ.get("ARCAL_JOBS") or str(os.cpu_count() or 1)
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            args = ["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DARCAL_BUILD_TESTS=OFF",
                    "-DARCAL_PYTHON=" + sys.executable]
            prefix = torch_prefix()
            if prefix:
                args.append("-DCMAKE_PREFIX_PATH=" + prefix)
            args += os.environ.get("ARCAL_CMAKE_ARGS", "").split()
            subprocess.run(args, check=True)
        subprocess.run(["cmake", "--build", build_dir, "--target", "arcal_python", "-j", jobs], check=True)
        built = glob.glob(os.path.join(build_dir, "python", "arcal", "_arcal*.so"))
        if len(built) != 1:
            raise RuntimeError(f"arcal: expected one _arcal*.so under {build_dir}/python/arcal, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


# setuptools' own staging goes under build-pip/ (build/ is the README's CMake build directory).
setup(ext_modules=[Extension("arcal._arcal", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build-pip", "setuptools")},
               "egg_info": {"egg_base": "build-pip"}})
