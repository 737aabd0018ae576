"""TensorFlow programs in the shape of TensorFlow's three distributed-training tutorials
(multi-worker training with Keras ``Model.fit``; a custom training loop under
``MultiWorkerMirroredStrategy``; parameter-server training with ``ClusterCoordinator``),
with data they make instead of MNIST. Each is the tutorial's program with its body in
``main(args, ctx)`` and nothing else of sparktf: it reads ``TF_CONFIG`` as the tutorial
does. ``test_porting.py`` and ``scripts/async_jobs.py`` run them through ``sparktf.run``.
"""

import json
import os
import time

FEATURES, ROWS = 4, 64
COEFFICIENTS = (1.0, -2.0, 0.5, 3.0)


def make_data():
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    y = (x @ np.array(COEFFICIENTS, "float32"))[:, None] + 0.25
    return x, y


def build_and_compile_model(accumulate=None, steps_per_execution=1):
    """``accumulate``: the optimizer's ``gradient_accumulation_steps``."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(
        learning_rate=0.05, gradient_accumulation_steps=accumulate), metrics=["mae"],
        steps_per_execution=steps_per_execution)
    return model


def dataset(global_batch_size):
    """Every step's global batch is the whole data: full-batch steps, whatever the workers."""
    import tensorflow as tf

    x, y = make_data()
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch_size)


def keras_fit(args, ctx):
    """The tutorial "Multi-worker training with Keras": ``model.fit`` under the strategy."""
    import tensorflow as tf

    tf_config = json.loads(os.environ["TF_CONFIG"])
    num_workers = len(tf_config["cluster"]["worker"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch_size = ROWS
    multi_worker_dataset = dataset(global_batch_size)
    with strategy.scope():
        multi_worker_model = build_and_compile_model(args.get("accumulate"),
                                                     args.get("steps_per_execution", 1))
    history = multi_worker_model.fit(multi_worker_dataset, epochs=args["epochs"],
                                     steps_per_epoch=args.get("steps", 2),
                                     validation_data=dataset(ROWS),
                                     validation_steps=1, verbose=0,
                                     callbacks=slowed(args.get("slow"), ctx.rank,
                                                      multi_worker_model))
    x, _ = make_data()
    evaluated = multi_worker_model.evaluate(dataset(ROWS), steps=1, verbose=0)
    predicted = multi_worker_model.predict(tf.data.Dataset.from_tensor_slices(x).batch(16),
                                           verbose=0)
    return {"history": history.history, "evaluate": evaluated, "workers": num_workers,
            "weights": [w.tolist() for w in multi_worker_model.get_weights()],
            "predict": sorted(float(v) for v in predicted.reshape(-1))}


def slowed(slow, rank, model=None):
    """``slow``: (rank, seconds, hook[, "mixed"]) — a callback that works that long in
    ``hook`` (``on_train_batch_end`` after each training step, or once an epoch in
    ``on_epoch_begin`` / ``on_epoch_end``) on that rank (a straggler: a slow callback, disk
    or neighbour), on every rank for ("all", seconds, hook); else none. With "mixed", the
    workers pass callbacks of different kinds: the slowed rank the bare callback, the
    others a ``keras.callbacks.CallbackList`` of none (Keras takes both)."""
    import keras

    mixed = bool(slow) and slow[3:] == ("mixed",)
    if not slow or slow[0] not in (rank, "all"):
        return keras.callbacks.CallbackList([], add_history=True, model=model) if mixed else []

    class Slow(keras.callbacks.Callback):
        pass

    # stands for work this worker does alone
    setattr(Slow, slow[2], lambda self, *args, **kwargs: time.sleep(slow[1]))
    return Slow() if mixed else [Slow()]


def keras_fit_alone(epochs, accumulate=None, steps=2, steps_per_execution=1):
    """Keras's own fit in one process on the same data: the oracle."""
    import tensorflow as tf

    model = build_and_compile_model(accumulate, steps_per_execution)
    history = model.fit(dataset(ROWS), epochs=epochs, steps_per_epoch=steps,
                        validation_data=dataset(ROWS), validation_steps=1, verbose=0)
    x, _ = make_data()
    predicted = model.predict(tf.data.Dataset.from_tensor_slices(x).batch(16), verbose=0)
    return {"history": history.history,
            "evaluate": model.evaluate(dataset(ROWS), steps=1, verbose=0),
            "weights": [w.tolist() for w in model.get_weights()],
            "predict": sorted(float(v) for v in predicted.reshape(-1))}


def custom_loop(args, ctx):
    """The tutorial "Custom training loop with Keras and MultiWorkerMirroredStrategy":
    ``strategy.run`` of a step whose loss is averaged over the global batch, a checkpoint
    the chief writes (worker 0: no chief in this cluster) and the others write aside."""
    import tensorflow as tf

    per_worker_batch_size = 16
    tf_config = json.loads(os.environ["TF_CONFIG"])
    num_workers = len(tf_config["cluster"]["worker"])
    global_batch_size = per_worker_batch_size * num_workers
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        x, y = make_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.batch(batch_size)

    multi_worker_dataset = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        multi_worker_model = build_and_compile_model()
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)

    @tf.function
    def train_step(iterator):
        def step_fn(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                predictions = multi_worker_model(x, training=True)
                per_example_loss = tf.keras.losses.MeanSquaredError(
                    reduction="none")(y, predictions)
                loss = tf.nn.compute_average_loss(per_example_loss,
                                                  global_batch_size=global_batch_size)
            grads = tape.gradient(loss, multi_worker_model.trainable_variables)
            optimizer.apply_gradients(zip(grads, multi_worker_model.trainable_variables))
            return loss

        per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    task_type, task_id = tf_config["task"]["type"], tf_config["task"]["index"]
    is_chief = task_type == "chief" or (task_type == "worker" and task_id == 0)
    checkpoint_dir = os.path.join(args["model_dir"], "ckpt" if is_chief else f"tmp_{task_id}")
    checkpoint = tf.train.Checkpoint(model=multi_worker_model)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=1)
    iterator = iter(multi_worker_dataset)
    losses = []
    for _ in range(args["epochs"]):
        total = 0.0
        for _ in range(4):
            total += float(train_step(iterator))
        losses.append(total / 4)
        manager.save()
    return {"losses": losses, "chief": is_chief, "checkpoint": manager.latest_checkpoint}


def parameter_servers(args, ctx):
    """The tutorial "Parameter server training with ClusterCoordinator" (Keras 2: its
    checks of a sharded variable's parts are tf_keras's): a variable partitioner, a
    per-worker dataset, ``schedule`` and ``join``. Runs on the chief only: sparktf serves
    the ps and worker tasks."""
    import tensorflow as tf

    cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    num_ps = len(cluster_resolver.cluster_spec().as_dict().get("ps", []))
    variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=(64 << 10), max_shards=num_ps)
    strategy = tf.distribute.ParameterServerStrategy(
        cluster_resolver, variable_partitioner=variable_partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():
        embedding = tf.keras.layers.Embedding(input_dim=1024, output_dim=64)
        dense = tf.keras.layers.Dense(1)
        model = tf.keras.Sequential([tf.keras.Input((1,), dtype="int64"), embedding,
                                     tf.keras.layers.Flatten(), dense])
        optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=0.5)
        accuracy = tf.keras.metrics.Accuracy()

    def dataset_fn(input_context):
        ids = tf.range(1024, dtype=tf.int64) % 32  # 32 of the 1,024 ids, each seen often
        labels = tf.cast(ids % 2, tf.float32)
        return tf.data.Dataset.from_tensor_slices((ids[:, None], labels[:, None])) \
            .shuffle(1024, seed=0).repeat() \
            .batch(input_context.get_per_replica_batch_size(64))

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch):
            ids, labels = batch
            with tf.GradientTape() as tape:
                logits = model(ids, training=True)
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            accuracy.update_state(labels, tf.cast(logits > 0, tf.float32))
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)
    first = [coordinator.schedule(step_fn, args=(per_worker_iterator,)) for _ in range(5)]
    coordinator.join()
    for _ in range(args["steps"]):
        last = coordinator.schedule(step_fn, args=(per_worker_iterator,))
    coordinator.join()
    shards = len(embedding.embeddings.variables)
    saved = os.path.join(args["model_dir"], "saved")
    model.save(saved)
    return {"first_loss": float(first[0].fetch()), "last_loss": float(last.fetch()),
            "accuracy": float(accuracy.result()), "shards": shards, "saved": saved,
            "keras": type(model).__module__}
