"""Prints the pinned requirements of one list of pyproject.toml's [project.optional-dependencies]
(scripts/setup.sh: `pip install $(python scripts/pins.py setup)`), so the pins live in one place."""
import pathlib
import sys
import tomllib

lists = tomllib.loads((pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
extras = lists["project"]["optional-dependencies"]
for name in sys.argv[1:]:
    if name not in extras:
        sys.exit(f"pins.py: no list '{name}' in pyproject.toml [project.optional-dependencies] ({', '.join(extras)})")
    print("\n".join(extras[name]))
