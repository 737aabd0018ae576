"""Shipping main_fn: the user's own modules travel by value, the modules they reach too;
installed libraries, wherever they are installed, by reference."""

import base64
import hashlib
import site
import subprocess
import sys
import textwrap
import zipfile

import cloudpickle
import pytest

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
    from sparktf.runtime.process import child

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


# A library whose module holds a lock, as a logging handler, a connection pool or a cache
# does: pickled by value, it fails on the lock ("cannot pickle '_thread.lock' object").
LIBRARY = """
import threading

_LOCK = threading.Lock()


def scale(x):
    with _LOCK:
        return 10 * x
"""


def _wheel(folder, name):
    """A wheel of the package ``name`` (a LIBRARY), for pip to install."""
    files = {f"{name}/__init__.py": LIBRARY,
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                               "Version: 1.0\n",
             f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
                                            "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={_digest(text)},{len(text.encode())}"
              for path, text in files.items()]
    files[f"{name}-1.0.dist-info/RECORD"] = "\n".join(
        [*record, f"{name}-1.0.dist-info/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _digest(text):
    digest = hashlib.sha256(text.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _pip_target(tmp_path, name, target):
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--disable-pip-version-check", "--target", str(target),
                    str(_wheel(tmp_path, name))], check=True)
    assert list(target.glob(f"{name}-1.0.dist-info"))  # metadata beside the package
    return target


def _plain_package(name, folder):
    (folder / name).mkdir(parents=True)
    (folder / name / "__init__.py").write_text(LIBRARY)
    return folder


def _on_pythonpath(entry, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(entry))
    monkeypatch.syspath_prepend(str(entry))  # where Python puts PYTHONPATH at start-up
    return entry


def _on_sys_path(entry, monkeypatch):
    monkeypatch.syspath_prepend(str(entry))
    return entry


def pip_target_on_pythonpath(tmp_path, name, monkeypatch):
    return _on_pythonpath(_pip_target(tmp_path, name, tmp_path / "libs"), monkeypatch)


def plain_folder_on_pythonpath(tmp_path, name, monkeypatch):
    return _on_pythonpath(_plain_package(name, tmp_path / "libs"), monkeypatch)


def pip_target_the_script_adds(tmp_path, name, monkeypatch):
    # no PYTHONPATH: only the distribution's metadata says the package is installed
    return _on_sys_path(_pip_target(tmp_path, name, tmp_path / "libs"), monkeypatch)


def py_files_zip(tmp_path, name, monkeypatch):
    archive = tmp_path / "deps.zip"
    with zipfile.ZipFile(archive, "w") as deps:
        deps.writestr(f"{name}/__init__.py", LIBRARY)
    return _on_sys_path(archive, monkeypatch)


def debian_dist_packages(tmp_path, name, monkeypatch):
    return _on_sys_path(_plain_package(name, tmp_path / "usr/lib/python3/dist-packages"),
                        monkeypatch)


def user_site(tmp_path, name, monkeypatch):
    folder = tmp_path / ".local/lib/python3.11/site-packages"
    monkeypatch.setattr(site, "USER_SITE", str(folder))  # what site.getusersitepackages() says
    return _on_sys_path(_pip_target(tmp_path, name, folder), monkeypatch)


def spark_add_py_file(tmp_path, name, monkeypatch):
    # SparkContext.addPyFile("lib.py"): the file lands in SparkFiles' root, on sys.path
    folder = tmp_path / "spark-0a1b/userFiles-2c3d"
    folder.mkdir(parents=True)
    (folder / f"{name}.py").write_text(LIBRARY)
    return _on_sys_path(folder, monkeypatch)


@pytest.mark.parametrize("install", [
    pip_target_on_pythonpath, plain_folder_on_pythonpath, pip_target_the_script_adds,
    py_files_zip, debian_dist_packages, user_site, spark_add_py_file])
def test_an_installed_library_goes_by_reference_and_the_users_modules_by_value(
        install, tmp_path, monkeypatch):
    name = f"locklib_{install.__name__}"
    entry = install(tmp_path, name, monkeypatch)
    # the user's folder (the script's, sys.path[0]): train.py imports helpers.py, which
    # uses the library
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers.py").write_text(f"import {name}\n\n\ndef double(x):\n"
                                        f"    return 2 * {name}.scale(x)\n")
    (project / "train.py").write_text("from helpers import double\n\n\n"
                                      "def main(args, ctx):\n    return double(args)\n")
    monkeypatch.syspath_prepend(str(project))
    try:
        import train

        payload = pickling.pickle_main(train.main, 4)
        assert pickling.own_module(sys.modules[name]) is None
        assert pickling.own_module(train.main) is train
        # an executor: the library installed where the driver has it, not the user's folder
        (tmp_path / "payload").write_bytes(payload)
        executor = subprocess.run(
            [sys.executable, "-c", "import cloudpickle, sys; f, a = cloudpickle.loads("
             "open(sys.argv[1], 'rb').read()); print(f(a, None))", str(tmp_path / "payload")],
            capture_output=True, text=True, cwd="/",
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(entry)})
        print(executor.stderr[-2000:])
        assert executor.returncode == 0
        assert executor.stdout.strip() == "80"
    finally:
        for module in ("train", "helpers", name):
            sys.modules.pop(module, None)


def test_a_relative_pythonpath_entry_leaves_the_users_folder_their_own(tmp_path, monkeypatch):
    # PYTHONPATH=. names the driver's working directory; an executor's is another folder
    (tmp_path / "relative_own.py").write_text("def f(args, ctx):\n    return args\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", ".")
    monkeypatch.syspath_prepend(".")
    try:
        import relative_own

        assert pickling.own_module(relative_own.f) is relative_own
    finally:
        sys.modules.pop("relative_own", None)
