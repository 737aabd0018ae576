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

from sparktf._executor import cluster, feed, servers
from sparktf._executor.training import keras_steps, loop
from sparktf._executor.training.spec import TrainSpec, class_weights, plan_steps
from sparktf._protocol import heartbeats

SHARD_FILE = "sparktf-train.tfrecord"  # relative: each worker process's working directory
SHUFFLE_ROWS = 10_000  # rows in the workers' shuffle buffer
STEPS_IN_FLIGHT = 200  # steps scheduled ahead of the one awaited


def train(spec: TrainSpec, ctx) -> dict | None:
    """One task of parameter-server training, by its role."""
    if ctx.jobName == cluster.WORKER:
        write_records(ctx.shard, spec.columns, SHARD_FILE)
    if ctx.jobName in (cluster.WORKER, cluster.PS):
        servers.serve(ctx)
        return None
    return _Chief(spec, ctx).run()


def write_records(shard: feed.Shard | None, names: list[str], path: str) -> None:
    """The shard as TFRecords: one record per chunk, holding each column as a tensor."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        if shard is None or not shard.num_rows:
            return
        for chunk in feed.read_chunks(shard, names):
            parts = [tf.io.serialize_tensor(chunk[n]) for n in names]
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
            model = loop.build_model(spec, ctx.feedSpec)
        if keras_steps.is_tf_keras(model):
            raise TypeError("Parameter-server training (numPs > 0) runs Keras 3 models; this "
                            "modelFn returned a tf_keras model. Use numPs=0, or build the "
                            "model with Keras 3.")
        super().__init__(spec, ctx, model, plan_steps(ctx.allNumRows,
                                                               spec.batch_size), beat)
        self.specs = keras_steps.input_specs(model)
        # (dtype, row shape) of each column, as every worker's records hold them
        self.rows = [(np.dtype(ctx.feedSpec[n][0]), () if ctx.feedSpec[n][1] == 0
                      else (ctx.feedSpec[n][1],)) for n in spec.columns]
        # the width check the all-reduce loop makes on its first batch, before any step
        keras_steps.check_input_widths([np.empty((0, *shape), dtype) for dtype, shape
                                        in self.rows[:len(spec.feature_columns)]], self.specs,
                                       spec.feature_columns)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.iterator = self.train_step = None
        self.validator = loop.Validator(model, spec) if self.validates() else None

    def run(self) -> dict:
        first_epoch, history = loop.resume(self.model, self.spec)
        self.beat("creating the workers' datasets", first_epoch)
        self.iterator = iter(self.coordinator.create_per_worker_dataset(self._dataset_fn))
        self.train_step = self._train_step()
        history = self.fit(first_epoch, history)
        return loop.chief_result(self._plain_copy(), self.spec, self.ctx, history)

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

        @tf.function
        def train_step(iterator):
            return strategy.run(model.train_step, args=(next(iterator),))
        return train_step

    def _dataset_fn(self):
        """Built on the chief, run by TensorFlow on each worker over that worker's file."""
        import tensorflow as tf

        rows, specs, spec = self.rows, self.specs, self.spec
        features = len(spec.feature_columns)
        class_table = (tf.constant(class_weights(
            np.arange(max(spec.class_weight) + 1), spec.class_weight))
            if spec.class_weight else None)

        def parse(record):
            parts = tf.io.parse_tensor(record, tf.string)
            return tuple(tf.ensure_shape(tf.io.parse_tensor(parts[i], tf.as_dtype(dtype)),
                                         [None, *shape])
                         for i, (dtype, shape) in enumerate(rows))

        def to_model(*columns):
            x = tuple(_shape_input(c, rows[i], specs[i] if i < len(specs) else (None, None))
                      for i, c in enumerate(columns[:features]))
            x = x[0] if len(x) == 1 else x
            y = columns[features]
            if spec.weight_column:
                return x, y, tf.cast(columns[features + 1], tf.float32)
            if class_table is not None:
                return x, y, _class_weights(y, class_table)
            return x, y

        ds = tf.data.TFRecordDataset(SHARD_FILE).map(parse).unbatch()
        if spec.shuffle:
            ds = ds.shuffle(SHUFFLE_ROWS, seed=spec.seed, reshuffle_each_iteration=True)
        return ds.repeat().batch(spec.batch_size).map(to_model).prefetch(tf.data.AUTOTUNE)

    def _plain_copy(self):
        """The trained model outside the strategy (its variables on the parameter servers)."""
        plain = loop.build_model(self.spec, self.ctx.feedSpec)
        plain.set_weights(self.model.get_weights())
        return plain


def _shape_input(column, row, spec):
    """One feature batch shaped and typed for its model input, in the graph, by the rule
    the all-reduce feed applies to numpy batches (``keras_steps.input_conversion``)."""
    import tensorflow as tf

    dtype, shape = row
    reshape, cast = keras_steps.input_conversion(shape, dtype.kind, spec)
    if reshape is not None:
        column = tf.reshape(column, [-1, *reshape])
    if cast is not None:
        column = tf.cast(column, cast)
    return column



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
