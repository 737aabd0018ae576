"""Fails when an environment does not hold the versions a constraints file pins.

`make test` installs the lowest versions sparktf declares (constraints-lowest.txt) into
.venv-lowest, then sparktf into it as a user would (`pip install` with no constraints):
this check then proves the install moved none of them, as a runtime that holds pyspark
3.5 and TensorFlow 2.16 needs. Usage: python scripts/check_pins.py constraints-lowest.txt
"""

import importlib.metadata
import sys


def main(path: str) -> int:
    moved = []
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                name, pinned = line.split("==")
                try:
                    installed = importlib.metadata.version(name)
                except importlib.metadata.PackageNotFoundError:
                    installed = "not installed"
                if installed != pinned:
                    moved.append(f"{name} {pinned} -> {installed}")
    if moved:
        print(f"installing sparktf moved what {path} pins: {', '.join(moved)}",
              file=sys.stderr)
        return 1
    print(f"{path}: every pinned version held after sparktf's install")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
