"""The torch releases arcal supports (pyproject.toml's `torch` extra and CMakeLists.txt say the same
range), and the check that refuses a torch other than the one arcal-torch was built against."""
import re

MIN = (2, 6)
BELOW = (2, 16)
SUPPORTED = f">= {MIN[0]}.{MIN[1]}, < {BELOW[0]}.{BELOW[1]}"


def release(version):
    """(major, minor) of a version string such as '2.15.0+cu132'; None if it has none."""
    m = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def supported(version):
    r = release(version)
    return r is not None and MIN <= r < BELOW
