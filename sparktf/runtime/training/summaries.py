"""TensorBoard event files: per-epoch scalars under ``<fit folder>/logs``, written by the chief.

``logs/train`` holds the training metrics and ``logs/validation`` the ``val_*``
ones (under their plain names), the layout Keras' own TensorBoard callback uses,
so ``tensorboard --logdir <fit folder>/logs`` shows both curves on one chart. A metric
with a value per class (``F1Score(average=None)``) is a scalar per element,
``epoch_<name>/<index>`` (Keras's own TensorBoard callback fails on it).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from sparktf.runtime import storage

LOGS = "logs"


def elements(name: str, value) -> list[tuple[str, float]]:
    """``[(name, value)]`` for a scalar; for a vector or any array, each element as
    ``name/<index>`` (``name/<row>/<column>``...), the way to log it as scalars."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        return [(name, float(array))]
    return [("/".join([name, *map(str, index)]), float(number))
            for index, number in np.ndenumerate(array)]


class EpochSummaries:
    """Writes one scalar per metric per epoch, and with ``every_steps`` the training loss
    every that many steps; a no-op on tasks that are not the chief."""

    def __init__(self, model_dir: str, is_chief: bool, every_steps: int = 0):
        self._writers = {}
        self._every = every_steps
        self._target = storage.join(model_dir, LOGS)
        self._local = None
        if not is_chief:
            return
        import tensorflow as tf

        if storage.is_local(self._target):
            root = storage.local_path(self._target)
        else:  # written locally, copied after each epoch
            self._local = tempfile.mkdtemp(prefix="sparktf-logs-", dir=storage.scratch_root())
            root = self._local
        for split in ("train", "validation"):
            self._writers[split] = tf.summary.create_file_writer(os.path.join(root, split))
        from tensorflow.core.framework import summary_pb2

        # tf.summary.write is TensorFlow core; this metadata marks each value as a scalar for
        # TensorBoard's scalars plugin (tf.summary.scalar would need the tensorboard package).
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(
                plugin_name="scalars")).SerializeToString()

    def write(self, epoch: int, logs: dict) -> None:
        """Records ``logs`` for ``epoch`` (1-based): ``val_x`` goes to validation as ``x``."""
        if not self._writers:
            return
        for key, value in logs.items():
            split, name = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            for tag, number in elements(f"epoch_{name}", value):
                self._scalar(split, tag, epoch, number)
        for writer in self._writers.values():
            writer.flush()
        if self._local:
            storage.put_dir(self._local, self._target)

    def write_workers(self, epoch: int, figures: dict) -> None:
        """Each worker's own and waited seconds of ``epoch`` (``step_times``) under
        ``logs/workers``: ``own_seconds/rank_<i>`` and ``wait_seconds/rank_<i>``."""
        if not self._writers:
            return
        if "workers" not in self._writers:
            import tensorflow as tf

            self._writers["workers"] = tf.summary.create_file_writer(
                os.path.join(self._local or storage.local_path(self._target), "workers"))
        for key in ("own_seconds", "wait_seconds"):
            for rank, seconds in enumerate(figures[key]):
                self._scalar("workers", f"{key}/rank_{rank}", epoch, float(seconds))
        self._writers["workers"].flush()

    def write_step(self, step: int, loss) -> None:
        """Records the training loss at global ``step`` (1-based) if it is one to log."""
        if loss is not None and self._writers and self._every and step % self._every == 0:
            self._scalar("train", "batch_loss", step, float(loss))

    def _scalar(self, split: str, tag: str, step: int, value: float) -> None:
        import tensorflow as tf

        with self._writers[split].as_default(step=step):
            tf.summary.write(tag, tf.constant(value), metadata=self._metadata)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
