"""The torch checks of the module: `import arcal` refuses a torch other than the release arcal-torch was
built against with an ImportError naming both versions (read from the installed distribution without
importing torch, or from an already imported torch), takes any torch when the build has none, and
arcal.torch_hooks refuses a torch outside the supported range. The module itself links no LibTorch."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

BUILD = os.environ.get("ARCAL_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PKG = os.path.join(BUILD, "python")


def fake_torch(root, version):
    """A stand-in torch distribution of the given version (metadata and a package with __version__)."""
    os.makedirs(os.path.join(root, "torch"))
    with open(os.path.join(root, "torch", "__init__.py"), "w") as f:
        f.write(f"__version__ = {version!r}\n")
    dist = os.path.join(root, f"torch-{version}.dist-info")
    os.makedirs(dist)
    with open(os.path.join(dist, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")


def python(code, path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)


def built_torch():
    sys.path.insert(0, os.path.join(PKG, "arcal"))
    try:
        import _build_info
        return _build_info.TORCH
    finally:
        sys.path.pop(0)


def test_a_mismatched_torch_is_refused_at_import_naming_both(tmp_path):
    built = built_torch()
    if built is None:
        pytest.skip("this build has no arcal-torch: any torch is accepted")
    fake_torch(str(tmp_path), "2.9.1")
    p = python("import arcal", [str(tmp_path), PKG])  # torch not imported: read from its metadata
    assert p.returncode != 0 and "ImportError" in p.stderr, p.stderr
    assert f"built against torch {built}" in p.stderr and "torch 2.9.1" in p.stderr, p.stderr
    p = python("import torch, arcal", [str(tmp_path), PKG])  # already imported
    assert "ImportError" in p.stderr and "torch 2.9.1" in p.stderr, p.stderr


def test_the_matching_torch_imports_in_either_order_and_the_module_links_no_libtorch():
    for order in ("import torch, arcal", "import arcal, torch"):
        p = python(order + "\nprint('ok')", [PKG])
        assert p.returncode == 0 and p.stdout.strip() == "ok", (order, p.stderr)
    module = glob.glob(os.path.join(PKG, "arcal", "_arcal*.so"))
    assert len(module) == 1
    for binary in module + [os.path.join(BUILD, "arcal")]:
        deps = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        assert "libtorch" not in deps and "libc10" not in deps, (binary, deps)
    # The check can fail: the training executable does link LibTorch.
    if os.path.exists(os.path.join(BUILD, "arcal-torch")):
        assert "libtorch" in subprocess.run(["ldd", os.path.join(BUILD, "arcal-torch")], capture_output=True, text=True).stdout
    p = python("""
        import sys, arcal
        maps = open('/proc/self/maps').read()
        print('torch' in sys.modules, 'libtorch' in maps)
        """, [PKG])
    assert p.returncode == 0 and p.stdout.split() == ["False", "False"], p.stdout + p.stderr


def test_torch_hooks_refuses_a_torch_outside_the_supported_range(tmp_path):
    fake_torch(str(tmp_path), "1.13.1")
    # The module's own check passes only for a build without torch; the hooks' range check either way.
    code = """
        import importlib.util, sys, os
        spec = importlib.util.spec_from_file_location('_torch_check', os.path.join(sys.argv[1], 'arcal', '_torch_check.py'))
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        print(m.supported('1.13.1'), m.supported('2.15.0+cu132'), m.supported('2.16.0'), m.SUPPORTED)
        """
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), PKG], capture_output=True, text=True)
    assert p.stdout.split()[:3] == ["False", "True", "False"], p.stdout + p.stderr


def subcommands(binary):
    """The subcommand names a CLI11 --help lists under 'Subcommands:'."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    names, inside = [], False
    for line in out.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
        elif inside and line.startswith("  ") and line.strip():
            names.append(line.split()[0])
    return names


def test_arcal_lists_and_forwards_exactly_the_commands_arcal_torch_has():
    front, back = os.path.join(BUILD, "arcal"), os.path.join(BUILD, "arcal-torch")
    if not os.path.exists(back):
        pytest.skip("this build has no arcal-torch")
    listed = subcommands(front)
    torch_side = subcommands(back)
    assert set(torch_side) <= set(listed), (torch_side, listed)
    assert {"audit", "metrics", "calibrate", "report", "run", "simulate", "cedar"} <= set(listed) - set(torch_side)
    # Each torch command's --help reaches arcal-torch (its own options), and the analysis side never does.
    for name in torch_side:
        p = subprocess.run([front, name, "--help"], capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.startswith(subprocess.run([back, name, "--help"], capture_output=True,
                                                                        text=True).stdout[:200]), name
    assert subprocess.run([back, "audit", "--help"], capture_output=True).returncode != 0


def test_a_torch_command_without_arcal_torch_names_what_is_missing(tmp_path):
    # A copy of `arcal` alone in a directory: the training commands say what to install, exit 2.
    import shutil
    front = tmp_path / "arcal"
    shutil.copy2(os.path.join(BUILD, "arcal"), front)
    p = subprocess.run([str(front), "-q", "train", "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "'train' needs LibTorch" in p.stderr and str(tmp_path / "arcal-torch") in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()
