"""The install paths: `cmake --install` (CLI, libraries, headers, a CMake package that a project of its
own finds and links); `pip install --no-build-isolation .` into a venv that holds the user's torch (the
project's .venv torch, seen through a .pth file), where `import torch; import arcal` and the reverse
order, record_routing on a model of that torch, an audit and a report run in one process holding one
libtorch, and the `arcal` console command runs both the analysis and the forwarded training commands;
and `pip install .` into a venv without torch, a statistics-only build: no LibTorch in the module or
the executable, the analysis commands work and the training commands say what is missing.

The pip build with torch reuses this build directory (ARCAL_BUILD_DIR), so it costs a copy; the one
without torch compiles the analysis side afresh (a few minutes). Run by ctest (`install_paths`) with
ARCAL_SOURCE_DIR and ARCAL_BUILD_DIR set."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SRC = os.environ.get("ARCAL_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD = os.environ.get("ARCAL_BUILD_DIR", os.path.join(SRC, "build"))


def run(args, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    run(["cmake", "--install", BUILD, "--prefix", p])
    return p


def test_cmake_install_gives_cli_libraries_headers_and_package(prefix):
    assert run([prefix / "bin" / "arcal", "--version"]).stdout.startswith("arcal ")
    assert run([prefix / "bin" / "arcal-torch", "--version"]).stdout.startswith("arcal ")
    libdir = next(d for d in ("lib", "lib64", "lib/x86_64-linux-gnu") if (prefix / d / "libarcal_std.a").exists())
    assert (prefix / libdir / "libarcal_torch.a").exists()
    assert (prefix / "include" / "arcal" / "calib" / "metrics.hpp").exists()
    assert (prefix / libdir / "cmake" / "arcal" / "arcalConfig.cmake").exists()


def test_a_project_of_its_own_finds_and_links_arcal(prefix, tmp_path):
    # The consumer computes ECE with arcal's library; the value must be arcal.metrics' own.
    (tmp_path / "CMakeLists.txt").write_text(textwrap.dedent("""
        cmake_minimum_required(VERSION 3.18)
        project(consumer LANGUAGES CXX)
        set(CMAKE_CXX_STANDARD 20)
        find_package(arcal 0.1 REQUIRED)
        add_executable(consumer main.cpp)
        target_link_libraries(consumer PRIVATE arcal::arcal_std)
        """))
    (tmp_path / "main.cpp").write_text(textwrap.dedent("""
        #include <cstdio>
        #include <vector>
        #include "calib/metrics.hpp"
        int main() {
          std::vector<double> p = {0.9, 0.1, 0.2, 0.8, 0.6, 0.4, 0.3, 0.7, 0.55, 0.45, 0.95, 0.05};
          std::vector<std::int64_t> y = {0, 1, 1, 1, 0, 0};
          arcal::ReportOptions o;
          o.draws = 0;
          const auto r = arcal::calibration_report(p, 6, 2, y, o);
          std::printf("%.17g\\n", r.ece.value);
        }
        """))
    run(["cmake", "-S", tmp_path, "-B", tmp_path / "b", "-DCMAKE_PREFIX_PATH=" + str(prefix)])
    run(["cmake", "--build", tmp_path / "b", "-j", "2"])
    ece = float(run([tmp_path / "b" / "consumer"]).stdout)
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import arcal
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7], [0.55, 0.45], [0.95, 0.05]])
    assert ece == pytest.approx(arcal.metrics(np.array([0, 1, 1, 1, 0, 0]), p, ci=False)["ece"], abs=1e-15)


def site_packages(python):
    return run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()


def loaded_libtorch_script():
    return textwrap.dedent("""
        def libtorch():
            import os
            maps = open("/proc/self/maps").read().split("\\n")
            return sorted({os.path.realpath(l.split()[-1]) for l in maps if "libtorch_cpu" in l or "libc10.so" in l})
        """)


def test_pip_install_beside_the_users_torch_either_import_order(tmp_path):
    # A venv that already holds the user's torch: the project's .venv packages, seen through a .pth file.
    venv = tmp_path / "venv"
    # Without the venv module's own (older) pip and setuptools: the user's packages come from the .pth.
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    (pathlib.Path(site_packages(venv / "bin" / "python")) / "user_torch.pth").write_text(site_packages(sys.executable) + "\n")
    env = dict(os.environ, ARCAL_BUILD_DIR=BUILD, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", SRC], env=env, cwd=tmp_path)
    for order in ("import torch, arcal", "import arcal, torch"):
        script = loaded_libtorch_script() + textwrap.dedent(f"""
            import json, os, sys, numpy as np
            {order}
            import arcal.torch_hooks
            assert os.path.dirname(arcal.__file__).startswith(os.environ["VENV"]), arcal.__file__
            torch.manual_seed(0)
            class Gated(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.gate = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Softmax(-1))
                    self.head = torch.nn.Linear(4, 3)
                def forward(self, x):
                    return self.head(x) * self.gate(x).sum(-1, keepdim=True)
            model = Gated().eval()
            with torch.no_grad(), arcal.torch_hooks.record_routing(model, "trace.npz", routing=["gate"]) as rec:
                for _ in range(4):
                    x = torch.randn(100, 4)
                    model(x)
                    rec.add_labels(torch.randint(0, 3, (100,)))
            r = arcal.audit(["trace.npz"], permutations=50, probes=False, quiet=True)
            arcal.report(r, out="rep")
            assert os.path.exists("rep/report.html")
            print(json.dumps({{"libtorch": libtorch(), "torch": torch.__file__, "answer": r["verdict"]["answer"]}}))
            """)
        out = run([venv / "bin" / "python", "-c", script], env=dict(env, VENV=str(venv)), cwd=tmp_path).stdout
        got = json.loads(out.strip().splitlines()[-1])
        torch_lib = os.path.join(os.path.dirname(got["torch"]), "lib")
        assert got["libtorch"] and all(l.startswith(torch_lib) for l in got["libtorch"]), (order, got)  # torch's only
        assert got["answer"], order
    # The console command: an analysis subcommand, and a training one forwarded to arcal-torch.
    assert run([venv / "bin" / "arcal", "--version"], env=env).stdout.startswith("arcal ")
    assert "--epochs" in run([venv / "bin" / "arcal", "train", "--help"], env=env).stdout


def test_pip_install_without_torch_is_the_analysis_side_alone(tmp_path):
    # A venv without torch: pip, numpy, setuptools and pybind11 copied from the project's .venv (no index).
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    src_site, dst_site = pathlib.Path(site_packages(sys.executable)), pathlib.Path(site_packages(venv / "bin" / "python"))
    for pattern in ("pip", "pip-*", "numpy", "numpy-*", "numpy.libs", "setuptools", "setuptools-*", "pkg_resources", "_distutils_hack",
                    "distutils-precedence.pth", "pybind11", "pybind11-*"):
        for p in src_site.glob(pattern):
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, dst_site / p.name)
    py = venv / "bin" / "python"
    assert subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0
    env = dict(os.environ, ARCAL_BUILD_DIR=str(tmp_path / "build-notorch"), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", ARCAL_JOBS="2")
    env.pop("PYTHONPATH", None)
    run([py, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", SRC], env=env, cwd=tmp_path)
    build = tmp_path / "build-notorch"
    assert not (build / "arcal-torch").exists()
    for binary in [build / "arcal"] + list((build / "python" / "arcal").glob("_arcal*.so")):
        deps = run(["ldd", binary]).stdout
        assert "libtorch" not in deps and "libc10" not in deps, (binary, deps)
    arcal_cmd = venv / "bin" / "arcal"
    run([arcal_cmd, "simulate", "--out", tmp_path / "s.npz", "--n", "600", "--classes", "3", "--seed", "1"], env=env)
    m = json.loads(run([arcal_cmd, "metrics", tmp_path / "s.npz", "--json"], env=env).stdout)
    assert 0 <= m["ece"] <= 1
    p = subprocess.run([arcal_cmd, "train", "--out", tmp_path / "r"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "needs LibTorch" in p.stderr and "torch >= 2.6" in p.stderr, p.stderr
    script = loaded_libtorch_script() + textwrap.dedent("""
        import json, sys, arcal
        r = arcal.audit([sys.argv[1]], permutations=50, probes=True, probe_repeats=1, quiet=True)
        print(json.dumps({"libtorch": libtorch(), "torch_imported": "torch" in sys.modules,
                          "answer": r["verdict"]["answer"]}))
        """)
    got = json.loads(run([py, "-c", script, tmp_path / "s.npz"], env=env, cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert got["libtorch"] == [] and not got["torch_imported"] and got["answer"], got
