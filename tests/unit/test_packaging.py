"""The declared dependency ranges, the exact tested set and the lowest tested set agree;
the package's modules import one another at the top only."""

import ast
import os
import pathlib
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


# sparktf modules a function may import lazily, and why: none of them may hide a cycle.
LAZY_IMPORTS = {
    ("sparktf/ml/estimator.py", "sparktf.ml.tracking"): "imports MLflow, which is optional",
    ("sparktf/ml/model.py", "sparktf.ml.tracking"): "imports MLflow, which is optional",
    ("sparktf/ml/tuning.py", "sparktf.ml.search_tracking"): "imports MLflow, which is optional",
}


def test_no_sparktf_module_is_imported_inside_a_function_to_hide_a_cycle():
    root = pathlib.Path(ROOT)
    found = set()
    for path in sorted((root / "sparktf").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sparktf"):
                    names = [f"{node.module}.{a.name}" if node.module == "sparktf.ml" else
                             node.module for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names if a.name.startswith("sparktf")]
                else:
                    continue
                found.update((str(path.relative_to(root)), n) for n in names)
    print("\nfunction-level imports of sparktf modules:", sorted(found))
    assert found <= set(LAZY_IMPORTS), sorted(found - set(LAZY_IMPORTS))
