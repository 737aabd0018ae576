"""The model folder's write check, as fits that start at once use it."""

import os
import threading

import pyarrow.fs as pafs
import pytest

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


class _Remote(pafs.FileSystemHandler):
    """A pyarrow filesystem handler holding files in memory, as a remote store; with
    ``refuse``, every file's close fails, as an S3 upload whose parts are refused
    (the object is never made)."""

    def __init__(self, refuse: bool):
        self.refuse, self.files, self.dirs, self.deleted = refuse, {}, set(), []

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def get_type_name(self):
        return "remote-in-memory"

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        return [pafs.FileInfo(p, pafs.FileType.File, size=len(self.files[p]))
                if p in self.files else pafs.FileInfo(p, pafs.FileType.NotFound)
                for p in paths]

    def get_file_info_selector(self, selector):
        return []

    def create_dir(self, path, recursive):
        self.dirs.add(path)

    def open_output_stream(self, path, metadata):
        import pyarrow as pa
        handler = self

        class Upload:
            closed, parts = False, []

            def write(self, data):
                self.parts.append(bytes(data))
                return len(data)

            def writable(self):
                return True

            def flush(self):
                pass

            def close(self):
                self.closed = True
                if handler.refuse:
                    raise OSError("ACCESS_DENIED during UploadPart")
                handler.files[path] = b"".join(self.parts)

        return pa.PythonFile(Upload(), mode="w")

    def delete_dir_contents(self, path, missing_dir_ok=False):
        pass

    def open_input_stream(self, path):
        raise NotImplementedError

    def delete_file(self, path):
        self.deleted.append(path)
        self.files.pop(path, None)

    open_input_file = open_append_stream = delete_dir = delete_root_dir_contents = \
        move = copy_file = open_input_stream


def _export_folder(tmp_path):
    local = tmp_path / "export"
    (local / "saved_model" / "variables").mkdir(parents=True)
    (local / "saved_model" / "saved_model.pb").write_bytes(b"pb" * 1000)
    (local / "saved_model" / "variables" / "variables.data").write_bytes(os.urandom(3 << 20))
    return local


def test_a_refused_upload_raises_naming_its_file_where_pyarrow_copy_files_returns(tmp_path):
    """Found by review: ``pyarrow.fs.copy_files`` returns normally when a file's close
    fails, so a fit reported an export that was never made."""
    local = _export_folder(tmp_path)
    remote = _Remote(refuse=True)
    refused = pafs.PyFileSystem(remote)
    pafs.copy_files(str(local), "m/export", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=refused)  # pyarrow's: no error
    with pytest.raises(OSError, match=r"could not write m/export/saved_model/\S+: "
                                      r"ACCESS_DENIED"):
        storage.copy_tree(str(local), refused, "m/export")
    # found by review: an S3 upload's close completes it with the parts it had
    assert len(remote.deleted) == 1 and remote.files == {}, remote.deleted


def test_a_tree_is_copied_file_by_file_with_its_folders(tmp_path):
    local = _export_folder(tmp_path)
    remote = _Remote(refuse=False)
    storage.copy_tree(str(local), pafs.PyFileSystem(remote), "m/export")
    assert remote.files == {
        "m/export/saved_model/saved_model.pb": b"pb" * 1000,
        "m/export/saved_model/variables/variables.data":
            (local / "saved_model" / "variables" / "variables.data").read_bytes()}
    assert remote.dirs == {"m/export/saved_model", "m/export/saved_model/variables"}


def test_a_remote_put_counts_as_unseen_work_for_the_export_s_heartbeats(tmp_path, monkeypatch):
    """An upload's sends go from Arrow's threads over sockets, which Linux does not count:
    ``put_dir`` to a remote URI (pyarrow's in-process ``mock://`` here) runs its copy in
    ``heartbeats.unseen_work``."""
    from sparktf._protocol import heartbeats

    seen = []
    copy = storage.copy_tree

    def noted(*args):
        seen.append(heartbeats._unseen_work)
        copy(*args)

    monkeypatch.setattr(storage, "copy_tree", noted)
    storage.put_dir(str(_export_folder(tmp_path)), "mock:///m/export")
    assert seen == [1] and heartbeats._unseen_work == 0
