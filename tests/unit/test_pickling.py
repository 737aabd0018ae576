"""Shipping main_fn: the user's own modules travel by value, the modules they reach too."""

import subprocess
import sys
import textwrap

import cloudpickle

from sparktf._driver import pickling


def test_a_helper_module_the_scripts_module_imports_travels_by_value(tmp_path, monkeypatch):
    # a user's folder: train_lib.py imports helpers.py; neither is installed, so neither
    # imports on an executor (a process whose sys.path does not hold the folder)
    (tmp_path / "helpers.py").write_text(textwrap.dedent("""
        def scale(x):
            return 10 * x
    """))
    (tmp_path / "train_lib.py").write_text(textwrap.dedent("""
        from helpers import scale

        def main(args, ctx):
            return scale(args)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import train_lib

    payload = pickling.pickle_main(train_lib.main, 4)
    (tmp_path / "payload").write_bytes(payload)
    executor = subprocess.run(
        [sys.executable, "-c", "import cloudpickle, sys; f, a = cloudpickle.loads("
         "open(sys.argv[1], 'rb').read()); print(f(a, None))", str(tmp_path / "payload")],
        capture_output=True, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
    print(executor.stderr[-2000:])
    assert executor.returncode == 0
    assert executor.stdout.strip() == "40"
    # registered by value for this pickling only
    assert not {"train_lib", "helpers"} & cloudpickle.list_registry_pickle_by_value()
    for name in ("train_lib", "helpers"):
        sys.modules.pop(name)


def test_a_module_the_executors_cannot_import_is_named_with_the_ways_to_ship_it(
        tmp_path, monkeypatch):
    from sparktf.runtime import child

    (tmp_path / "site_helpers.py").write_text("def f(args, ctx):\n    return args\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import site_helpers

    payload = cloudpickle.dumps((site_helpers.f, 1))  # by reference, as an installed module
    sys.modules.pop("site_helpers")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    (tmp_path / "order").write_bytes(cloudpickle.dumps((payload, None, {})))

    status, error = child._run(str(tmp_path / "order"))
    print(error["message"])
    assert status == "error"
    assert error["message"].startswith("ModuleNotFoundError: No module named 'site_helpers': ")
    assert "executors' Python cannot import" in error["message"]
    assert "addPyFile" in error["message"] and "--py-files" in error["message"]
