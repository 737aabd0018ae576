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
    ("sparktf/ml/tuning/__init__.py", "sparktf.ml.tuning.tracking"):
        "imports MLflow, which is optional",
}


def _imported(root: pathlib.Path, module: str, name: str) -> str:
    """The module ``from module import name`` imports: ``module.name`` where that is one."""
    package = root.joinpath(*module.split("."))
    submodule = (package / f"{name}.py").exists() or (package / name).is_dir()
    return f"{module}.{name}" if submodule else module


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
                    names = [_imported(root, node.module, a.name) for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names if a.name.startswith("sparktf")]
                else:
                    continue
                found.update((str(path.relative_to(root)), n) for n in names)
    print("\nfunction-level imports of sparktf modules:", sorted(found))
    assert found <= set(LAZY_IMPORTS), sorted(found - set(LAZY_IMPORTS))


def test_no_package_binds_a_name_of_one_of_its_modules_to_something_else():
    """Importing ``package.sub`` sets the package's attribute ``sub`` to that module, and
    ``from package import sub`` takes the attribute when it is already there: a package
    ``__init__`` that imports another ``sub`` (``from sparktf._driver import checks`` in
    ``sparktf.ml.tuning``, which has a ``checks`` of its own) gives one or the other."""
    root = pathlib.Path(ROOT)
    found = []
    for init in sorted((root / "sparktf").rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(root).parts)
        modules = {p.stem for p in init.parent.glob("*.py")} | {
            p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module != package:
                bound = [a.asname or a.name for a in node.names]
            elif isinstance(node, ast.Import):
                bound = [a.asname or a.name.split(".")[0] for a in node.names]
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound = [node.name]
            elif isinstance(node, ast.Assign):
                bound = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            found += [f"{package}: {name}" for name in bound if name in modules - {"__init__"}]
    assert not found, found
