"""The model folder's write check, as fits that start at once use it."""

import os
import threading

from sparktf.runtime import storage


def test_fits_starting_at_once_probe_one_new_folder_without_tripping_each_other(tmp_path):
    """Two fits of one application in one new modelDir (threads, CrossValidator's
    parallelism) each create the folder and write and remove a probe there; with one
    probe name for all, one fit removed the other's probe and failed (FileNotFoundError,
    seen on a standalone cluster)."""
    folder = str(tmp_path / "new" / "models")
    errors, start = [], threading.Barrier(8)

    def probe():
        start.wait()
        try:
            for _ in range(200):
                storage.check_writable(folder)
        except OSError as e:
            errors.append(e)
    threads = [threading.Thread(target=probe) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert os.listdir(folder) == [], "a probe was left behind"
