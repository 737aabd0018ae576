"""Gradient accumulation all-reduces the gradients once per update, not once per step:
two plain MultiWorkerMirroredStrategy processes (TF_CONFIG on this machine, no Spark) run
sparktf's steps (``KerasSteps``) with ``gradient_accumulation_steps=4``; the step function
that accumulates holds no collective, the one that applies holds the gradients' all-reduce,
and 8 steps call it twice. Both workers end with the same weights."""

import json
import multiprocessing
import socket

import numpy as np


def _ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _worker(rank, ports, out):
    import os

    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": rank}})
    import keras
    import tensorflow as tf

    from sparktf.runtime.training import keras_steps

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1, gradient_accumulation_steps=4), "mse")
        keras_steps.check_compiled(model)
        model.build((None, 4))
        model.optimizer.build(model.trainable_variables)
    steps = keras_steps.KerasSteps(strategy, model)
    rng = np.random.default_rng(rank)
    for _ in range(8):
        x = rng.normal(size=(8, 4)).astype("float32")
        steps.train((x, x.sum(axis=1, keepdims=True)), 0.5, reduce=False)
    counts = {}
    for (_, _, update), fn in steps._functions.items():
        graphs = [c.graph for c in fn._list_all_concrete_functions()]
        ops = [op.type for g in graphs for op in g.get_operations()]
        for g in graphs:  # the functions the step calls (strategy.run's replica function)
            for f in g._functions.values():
                ops += [node.op for node in f.definition.node_def]
        counts[str(update)] = sum(op.startswith("CollectiveReduce") for op in ops)
    out.put((rank, counts, [w.tolist() for w in model.get_weights()],
             int(model.optimizer.iterations.numpy())))


def test_accumulated_gradients_are_all_reduced_once_per_update():
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    ports = _ports(2)
    workers = [context.Process(target=_worker, args=(r, ports, out)) for r in range(2)]
    for w in workers:
        w.start()
    results = dict((r, rest) for r, *rest in (out.get(timeout=300) for _ in workers))
    for w in workers:
        w.join(timeout=60)
    print({r: results[r][0] for r in results})
    for counts, _, iterations in results.values():
        assert counts["False"] == 0, counts  # accumulating: no collective at all
        assert counts["True"] >= 1, counts  # applying: the gradients' all-reduce
        assert iterations == 2  # Keras's count of updates: 8 steps // 4
    for a, b in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_array_equal(a, b)
