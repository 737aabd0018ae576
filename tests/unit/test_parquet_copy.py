"""Issue 32 item 3: the publication of inputMode="parquet" copies, raced by threads on a local
folder with a stand-in frame (no Spark): every reader sees a whole copy, exactly once."""

import os
import threading
import time

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from sparktf.ml import parquet_copy
from sparktf.runtime import storage

ROWS = 1000


class Frame:
    """What training_copy asks of a DataFrame, with a plan and input files of its own."""

    def __init__(self, plan="p", files=(("src", 1, 1),)):
        self.plan, self.files = plan, [list(f) for f in files]

    def semanticHash(self):
        return hash(self.plan) & 0xFFFFFFFF


def _write(frame, uri, num_workers):
    """Writes ROWS rows in 4 files slowly, as Spark's job would, then _SUCCESS."""
    path = storage.local_path(uri)
    os.makedirs(path, exist_ok=True)
    for part in range(4):
        pq.write_table(pa.table({"x": list(range(ROWS // 4))}),
                       os.path.join(path, f"part-{part}.parquet"))
        time.sleep(0.02)
    open(os.path.join(path, "_SUCCESS"), "w").close()


@pytest.fixture(params=["rename", "manifest"])
def publish(request, monkeypatch):
    """Local folders publish by rename; the others by manifest, tried here on a local folder
    through pyarrow's filesystem."""
    monkeypatch.setattr(parquet_copy, "_write", _write)
    monkeypatch.setattr(parquet_copy, "file_sources", lambda frame: frame.files)
    monkeypatch.setattr(parquet_copy, "_plan", lambda frame: frame.plan, raising=False)
    if request.param == "manifest":
        monkeypatch.setattr(storage, "is_local", lambda uri: False)
    return request.param


def _rows(uri):
    return pads.dataset(storage.local_path(uri), format="parquet").count_rows()


def _race(folder, fits):
    """``fits`` threads entering training_copy at once; the rows each read twice, errors."""
    start, seen, errors = threading.Barrier(fits), [], []

    def fit():
        try:
            start.wait()
            with parquet_copy.training_copy(Frame(), folder, 1) as uri:
                seen.append(_rows(uri))
                time.sleep(0.05)
                seen.append(_rows(uri))
        except Exception as e:  # noqa: BLE001 - reported by the caller's assertion
            errors.append(repr(e))

    threads = [threading.Thread(target=fit) for _ in range(fits)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return seen, errors


def test_fits_racing_on_one_copy_each_read_a_whole_copy(tmp_path, publish):
    for round_ in range(5):
        folder = str(tmp_path / f"r{round_}")
        seen, errors = _race(folder, 4)
        assert errors == [] and seen == [ROWS] * 8, (round_, errors, seen)
        left = os.listdir(folder)
        assert all(".reader-" not in n and ".removing-" not in n for n in left), left
        if publish == "rename":
            assert len(left) == 1 and "." not in left[0], left  # one published copy
        assert all(_rows(os.path.join(folder, n)) == ROWS for n in left), left


def test_a_copy_being_read_is_never_removed(tmp_path, publish):
    folder = str(tmp_path / "data")
    with parquet_copy.training_copy(Frame("read"), folder, 1) as uri:
        for plan in range(parquet_copy.KEEP + 2):  # more copies than KEEP
            with parquet_copy.training_copy(Frame(f"other{plan}"), folder, 1):
                pass
        # the same plan with changed input files: a new copy; the one being read stays
        with parquet_copy.training_copy(Frame("read", files=[("src", 2, 2)]), folder, 1) \
                as newer:
            assert newer != uri and _rows(newer) == ROWS
        assert _rows(uri) == ROWS
    with parquet_copy.training_copy(Frame("last"), folder, 1):
        pass
    copies = [n for n in os.listdir(folder) if ".reader-" not in n]
    assert len(copies) == parquet_copy.KEEP, copies
    assert not os.path.exists(storage.local_path(uri))  # unread now, and stale


def test_a_copy_is_reused_only_for_the_same_plan_and_files(tmp_path, publish):
    folder = str(tmp_path / "data")
    with parquet_copy.training_copy(Frame(), folder, 1) as first:
        pass
    with parquet_copy.training_copy(Frame(), folder, 1) as again:
        assert again == first
    for other in (Frame("q"), Frame(files=[("src", 1, 3)])):
        with parquet_copy.training_copy(other, folder, 1) as uri:
            assert uri != first
    with parquet_copy.training_copy(Frame(), folder, 2) as uri:
        assert uri != first
