"""Prints, one a line, the ``name==version`` of every package a ``pip install --dry-run
--report`` chose (the project itself left out): pip decides what the newest environment
holds, as a user's ``pip install`` would, and uv installs exactly that, in seconds instead
of pip's minute (the Makefile's .venv-newest).
Usage: python scripts/resolved_pins.py report.json
"""

import json
import sys


def main(path: str) -> int:
    with open(path) as f:
        report = json.load(f)
    for item in report["install"]:
        metadata = item["metadata"]
        if item.get("download_info", {}).get("dir_info") is not None:
            continue  # the project's own source tree: installed editable by the Makefile
        print(f"{metadata['name']}=={metadata['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
