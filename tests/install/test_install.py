"""The install paths (issue 25): `cmake --install` (CLI, libraries, headers, a CMake package that a
project of its own finds and links), and `pip install --no-build-isolation .` into a venv with the
system site packages, whose `import torch; import arcal` holds one libtorch and runs an audit. The pip
build reuses this build directory (ARCAL_BUILD_DIR), so the test costs a copy, not a second compile.

Run by ctest (`install_paths`) with ARCAL_SOURCE_DIR and ARCAL_BUILD_DIR set."""
import json
import os
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
    libdir = next(d for d in ("lib", "lib64", "lib/x86_64-linux-gnu") if (prefix / d / "libarcal_std.a").exists())
    assert (prefix / libdir / "libarcal_torch.a").exists()
    assert (prefix / "include" / "arcal" / "calib" / "metrics.hpp").exists()
    assert (prefix / libdir / "cmake" / "arcal" / "arcalConfig.cmake").exists()


def test_a_project_of_its_own_finds_and_links_arcal(prefix, tmp_path):
    # The consumer computes ECE with arcal's library; the value must be arcal.metrics' own.
    (tmp_path / "CMakeLists.txt").write_text(textwrap.dedent("""
        cmake_minimum_required(VERSION 3.18)
        project(consumer LANGUAGES CXX)
        set(CMAKE_CXX_STANDARD 17)
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


def test_pip_install_into_a_venv_imports_with_torch_and_audits(tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    env = dict(os.environ, ARCAL_BUILD_DIR=BUILD, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    run([venv / "bin" / "python", "-m", "pip", "install", "--no-build-isolation", "--no-deps", SRC], env=env, cwd=tmp_path)
    script = textwrap.dedent("""
        import json, os, numpy as np, torch, arcal
        assert os.path.dirname(arcal.__file__).startswith(os.environ["VENV"]), arcal.__file__
        maps = open("/proc/self/maps").read().split("\\n")
        libs = {os.path.realpath(l.split()[-1]) for l in maps if "libtorch_cpu" in l}
        rng = np.random.default_rng(0)
        z = rng.normal(size=(400, 3)); y = rng.integers(0, 3, 400)
        r = arcal.audit([{"logits": z, "labels": y, "features": rng.normal(size=(400, 1)),
                          "feature_names": ["s"]}], permutations=50, probes=False, quiet=True)
        print(json.dumps({"libtorch": sorted(libs), "answer": r["verdict"]["answer"]}))
        """)
    out = run([venv / "bin" / "python", "-c", script], env=dict(env, VENV=str(venv)), cwd=tmp_path).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert len(got["libtorch"]) == 1, got  # torch and arcal share one libtorch
    assert got["answer"]
