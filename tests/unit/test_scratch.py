"""A fit's temp-dir folder: removed when the fit fails, else when the Python process ends."""

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from sparktf.ml.runs import scratch


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_failing_fit_removes_the_folder_it_made_and_a_succeeding_one_keeps_it(temp_dir):
    made = []

    @scratch.removes_its_folder_on_failure
    def fit(fail):
        made.append(scratch.model_folder())
        os.makedirs(os.path.join(made[-1], "fit-1", "checkpoints"))
        if fail:
            raise KeyboardInterrupt  # an interrupted fit too, not only an Exception
        return made[-1]

    with pytest.raises(KeyboardInterrupt):
        fit(True)
    assert not os.path.exists(made[0])
    kept = fit(False)
    assert os.path.isdir(kept)  # the model scores from it until the process ends
    assert sorted(os.listdir(temp_dir)) == [os.path.basename(kept)]
    scratch.remove(kept, os.getpid())


def test_a_folder_made_outside_a_fit_is_left_to_the_exit(temp_dir):
    @scratch.removes_its_folder_on_failure
    def fit():
        raise RuntimeError("fails before making a folder")

    before = scratch.model_folder()
    with pytest.raises(RuntimeError):
        fit()
    assert os.path.isdir(before)
    scratch.remove(before, os.getpid())


def test_the_folders_go_when_the_process_ends_and_not_when_a_forked_child_does(tmp_path):
    program = textwrap.dedent("""
        import os, sys
        from sparktf.ml.runs import scratch

        folders = [scratch.model_folder(), scratch.model_folder()]
        for folder in folders:
            open(os.path.join(folder, "saved_model.pb"), "wb").close()
        child = os.fork()
        if child == 0:
            sys.exit(0)  # runs the exit hooks it inherited
        os.waitpid(child, 0)
        print(all(os.path.isdir(f) for f in folders))
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=120)
    print(done.stderr[-2000:])
    assert done.returncode == 0
    assert done.stdout.strip() == "True"  # still there after the child's exit
    assert os.listdir(tmp_path) == []  # gone after the process's


def test_a_killed_drivers_folder_is_removed_by_the_next_fit_and_a_live_ones_kept(temp_dir):
    """A driver killed during a fit cannot remove its sparktf-model-* folder: the next
    driver's first fit does, and leaves alone those of live drivers and of other folders."""
    dead = subprocess.run(
        [sys.executable, "-c", "import tempfile; from sparktf.ml.runs import scratch\n"
         f"tempfile.tempdir = {str(temp_dir)!r}\n"
         "import os; print(scratch.model_folder(), flush=True); os._exit(0)"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.isdir(dead)  # os._exit: its exit hooks never ran, as when killed
    live = scratch.model_folder()  # sweeps first
    other = temp_dir / "sparktf-model-unrelated"
    other.mkdir()
    assert not os.path.exists(dead)
    scratch.model_folder()
    assert os.path.isdir(live) and other.is_dir()
