"""Asynchronous training with parameter servers (``numPs > 0``).

The tasks of the barrier stage take TensorFlow's roles: ``ps`` tasks hold the
variables, ``worker`` tasks run training steps, and the ``chief`` runs
``tf.distribute.coordinator.ClusterCoordinator``, which schedules steps on
whichever worker is free. Workers and parameter servers only start a TensorFlow
server and return; their processes (and servers) live until the task releases
them, which happens after the chief has finished (the job's exit barrier). So no
parameter server outlives the job, and none leaves while the chief needs it.

Data: each worker writes its share of the rows to a TFRecord file in its own
working directory. The chief builds the input pipeline once and TensorFlow runs
it on every worker, where the file's relative path names that worker's own file.
"""

from __future__ import annotations

import collections

import numpy as np

from sparktf._protocol import heartbeats
from sparktf.runtime.feed import columns, shards, tensors
from sparktf.runtime.feed.columns import ColumnInfo
from sparktf.runtime.process import accumulation, cluster, servers
from sparktf.runtime.training import export, keras_steps, loop
from sparktf.runtime.training.spec import TrainSpec, class_weights, plan_steps

SHARD_FILE = "sparktf-train.tfrecord"  # relative: each worker process's working directory
SHUFFLE_ROWS = 10_000  # rows in the workers' shuffle buffer
STEPS_IN_FLIGHT = 200  # steps scheduled ahead of the one awaited


def train(spec: TrainSpec, ctx) -> dict | None:
    """One task of parameter-server training, by its role."""
    if ctx.jobName == cluster.WORKER:
        write_records(ctx.shard, spec.columns, SHARD_FILE, ctx.feedSpec)
    if ctx.jobName in (cluster.WORKER, cluster.PS):
        servers.serve(ctx)
        return None
    return _Chief(spec, ctx).run()


def write_records(shard: shards.Shard | None, names: list[str], path: str,
                  infos: dict) -> None:
    """The shard as TFRecords: one record per chunk, holding each column as a tensor;
    variable-length arrays padded to the longest row over every worker's rows."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        if shard is None or not shard.num_rows:
            return
        for chunk in shards.read_chunks(shard, names):
            parts = [tf.io.serialize_tensor(_dense(chunk[n], infos[n])) for n in names]
            writer.write(tf.io.serialize_tensor(tf.stack(parts)).numpy())


class _Chief(loop.EpochRunner):
    """Schedules the training steps on the workers, epoch by epoch; validates; exports."""

    def __init__(self, spec: TrainSpec, ctx):
        import tensorflow as tf

        workers = ctx.allNumRows[:ctx.numWorkers]  # workers take the first ranks
        if min(workers) == 0:
            raise ValueError(f"A worker received no training rows ({sum(workers)} rows over "
                             f"{len(workers)} workers). Use fewer workers (numWorkers) or more "
                             "data.")
        beat = heartbeats.Heartbeat(ctx)
        beat("connecting to the workers and parameter servers", 0)
        servers.await_servers(ctx)
        self.strategy = tf.distribute.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver())
        with self.strategy.scope():
            model, self.bound = loop.build_model(spec, ctx.feedSpec)
        if keras_steps.is_tf_keras(model):
            raise TypeError("Parameter-server training (numPs > 0) runs Keras 3 models; this "
                            "modelFn returned a tf_keras model. Use numPs=0, or build the "
                            "model with Keras 3.")
        if accumulation.steps(model.optimizer):
            raise ValueError(
                "Parameter-server training (numPs > 0) applies each worker's gradients to "
                "the shared variables as they come, so accumulating them over steps "
                f"(gradient_accumulation_steps={accumulation.steps(model.optimizer)}) "
                "would mix updates of several workers and weights of several ages. Use "
                "numPs=0 (all-reduce: Keras's accumulation, one all-reduce per update), or "
                "set batchSize to the accumulated batch.")
        super().__init__(spec, ctx, model, plan_steps(ctx.allNumRows,
                                                               spec.batch_size), beat)
        # (dtype, row shape) of each column, as every worker's records hold them
        self.rows = [_record_row(ctx.feedSpec[n]) for n in spec.columns]
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.iterator = self.train_step = None
        self.validator = (loop.Validator(model, spec, self.bound, ctx.feedSpec)
                          if self.validates() else None)

    def run(self) -> dict:
        first_epoch, history, state = loop.resume(self.model, self.spec)
        self.beat("creating the workers' datasets", first_epoch)
        self.iterator = iter(self.coordinator.create_per_worker_dataset(self._dataset_fn))
        self.train_step = self._train_step()
        history = self.fit(first_epoch, history, state)
        return export.chief_result(self._plain_copy(), self.spec, self.ctx, history, self.bound)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """Keeps ``STEPS_IN_FLIGHT`` steps scheduled; each step's result, awaited in order,
        is the progress the heartbeats report."""
        self.beat("training", epoch + 1, 0)
        pending: collections.deque = collections.deque()
        scheduled = 0
        for step in range(self.steps):
            while scheduled < self.steps and len(pending) < STEPS_IN_FLIGHT:
                pending.append(self.coordinator.schedule(self.train_step,
                                                         args=(self.iterator,)))
                scheduled += 1
            logs = pending.popleft().fetch()  # raises the error of a failed step
            self.beat("training", epoch + 1, step + 1, force=False)
            if self.spec.summary_steps:
                self.summaries.write_step(epoch * self.steps + step + 1, logs.get("loss"))
        self.coordinator.join()
        self.rows_trained = sum(self.ctx.allNumRows)
        return keras_steps.metric_results(self.model)

    def validates(self) -> bool:
        return self.spec.validates_in_loop and self.ctx.validationShard is not None

    def validate(self) -> dict[str, float]:
        return self.validator(self.ctx.validationShard, self.validation_step)

    def _train_step(self):
        """The model's own ``train_step`` on one worker's next batch (Keras's step; one
        worker's batch is the whole batch of an asynchronous step, so nothing is scaled)."""
        import tensorflow as tf

        model, strategy = self.model, self.strategy

        @tf.function(autograph=keras_steps.autograph(model))
        def train_step(iterator):
            return strategy.run(model.train_step, args=(next(iterator),))
        return train_step

    def _dataset_fn(self):
        """Built on the chief, run by TensorFlow on each worker over that worker's file."""
        import tensorflow as tf

        rows, bound, spec = self.rows, self.bound, self.spec
        position = {name: i for i, name in enumerate(spec.columns)}
        class_table = (tf.constant(class_weights(
            np.arange(max(spec.class_weight) + 1), spec.class_weight))
            if spec.class_weight else None)

        def parse(record):
            parts = tf.io.parse_tensor(record, tf.string)
            return tuple(tf.ensure_shape(tf.io.parse_tensor(parts[i], dtype), [None, *shape])
                         for i, (dtype, shape) in enumerate(rows))

        def to_model(*values):
            inputs = [_graph_input(values[position[b.column]], b) for b in bound.inputs]
            x = ({b.name: v for b, v in zip(bound.inputs, inputs)} if bound.inputs_as_dict
                 else inputs[0] if len(inputs) == 1 else tuple(inputs))
            labels = [_graph_label(values[position[c]]) for c in bound.labels]
            y = bound.arrange_labels(labels)
            if spec.weight_column:
                return x, y, tf.cast(values[position[spec.weight_column]], tf.float32)
            if class_table is not None:
                return x, y, _class_weights(y, class_table)
            return x, y

        ds = tf.data.TFRecordDataset(SHARD_FILE).map(parse).unbatch()
        if spec.shuffle:
            ds = ds.shuffle(SHUFFLE_ROWS, seed=spec.seed, reshuffle_each_iteration=True)
        return ds.repeat().batch(spec.batch_size).map(to_model).prefetch(tf.data.AUTOTUNE)

    def _plain_copy(self):
        """The trained model outside the strategy (its variables on the parameter servers)."""
        plain, _ = loop.build_model(self.spec, self.ctx.feedSpec)
        plain.set_weights(self.model.get_weights())
        return plain


def _record_row(info) -> tuple:
    """(TensorFlow dtype, row shape) of a column in the records (``_dense``)."""
    import tensorflow as tf

    info = info if isinstance(info, ColumnInfo) else ColumnInfo.from_json(info)
    dtype = tf.string if info.is_text else tf.as_dtype(info.dtype)
    return dtype, tuple(info.longest if d is None else d for d in info.shape)


def _dense(values, info) -> np.ndarray:
    """Chunk values as one dense array: variable-length rows padded to the longest row."""
    info = info if isinstance(info, ColumnInfo) else ColumnInfo.from_json(info)
    if isinstance(values, columns.Padded):
        return columns.widen(values.values, info.longest)
    if info.varies and values.shape[1] < info.longest:
        return columns.widen(values, info.longest)
    return values


def _graph_input(column, binding):
    """One feature batch as its model input declares it, in the graph: reshaped, padded
    (or cut back from the longest row) to the declared length, cast."""
    import tensorflow as tf

    shape, dtype = binding.shape, binding.dtype
    if shape is not None and all(d is not None for d in shape):
        row = tuple(column.shape[1:])
        if len(row) == len(shape) and row[1:] == tuple(shape[1:]) and row[0] != shape[0]:
            column = column[:, :shape[0]]
            pad = [[0, 0], [0, max(0, shape[0] - row[0])]] + [[0, 0]] * (len(row) - 1)
            column = tf.pad(column, pad)
        elif row != tuple(shape):
            column = tf.reshape(column, [-1, *shape])
    elif shape is not None and len(shape) == 1 and column.shape.rank == 1:
        column = column[:, None]
    if dtype is not None and not tensors.is_string_dtype(dtype) and column.dtype != tf.string:
        column = tf.cast(column, dtype)
    elif dtype is None and column.dtype.is_floating:
        column = tf.cast(column, tf.float32)
    return column


def _graph_label(column):
    import tensorflow as tf

    return tf.cast(column, tf.float32) if column.dtype.is_floating else column


def _class_weights(labels, table):
    """``class_weights`` in the graph: ``table[class]``, 1 outside it."""
    import tensorflow as tf

    classes = labels
    if labels.shape.rank > 1:
        classes = (tf.argmax(labels, -1) if labels.shape[-1] != 1 else labels[..., 0])
    classes = tf.cast(tf.round(tf.cast(classes, tf.float32)), tf.int32)
    inside = (classes >= 0) & (classes < tf.shape(table)[0])
    return tf.where(inside, tf.gather(table, tf.clip_by_value(classes, 0, tf.shape(table)[0] - 1)),
                    tf.ones_like(classes, tf.float32))
