"""The declared dependency ranges, the exact tested set and the lowest tested set agree."""

import os
import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pins(name: str) -> dict[str, Version]:
    pins = {}
    with open(os.path.join(ROOT, name)) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                package, version = line.split("==")
                pins[re.sub(r"[-_.]+", "-", package).lower()] = Version(version)
    return pins


def _declared() -> list[Requirement]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return [Requirement(r) for r in tomllib.load(f)["project"]["dependencies"]]


def test_dependencies_are_ranges_with_lower_bounds_equal_to_the_lowest_tested_set():
    lowest = _pins("constraints-lowest.txt")
    declared = _declared()
    for req in declared:
        assert not any(s.operator == "==" for s in req.specifier), f"{req} is an exact pin"
        lower = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert lower, f"{req} has no lower bound"
        assert lowest[req.name] == lower[0], f"{req}: constraints-lowest.txt has " \
                                             f"{lowest.get(req.name)}"
    assert set(lowest) == {r.name for r in declared}


def test_the_exact_tested_set_lies_inside_the_declared_ranges():
    exact = _pins("constraints.txt")
    for req in _declared():
        assert req.name in exact, f"constraints.txt does not pin {req.name}"
        assert exact[req.name] in req.specifier, f"{req.name}=={exact[req.name]} not in {req}"
