"""Training on the executors: what ``TFEstimator.fit`` runs in every task's process.

``train_main`` picks the strategy by the task's role: all-reduce workers
(``allreduce``), a parameter-server cluster (``parameter_servers``) or the
evaluator side-car (``evaluator``). The strategies share ``spec`` (what the
tasks are given and agree on), ``loop`` (model, epochs, validation, export),
``keras_steps`` (Keras's steps under a strategy), ``tf_keras`` (Keras 2 models'
own fit), ``checkpoint`` and ``summaries``, and never import one another.
"""

from __future__ import annotations

from sparktf._protocol import heartbeats
from sparktf.runtime.process import cluster
from sparktf.runtime.training import allreduce, evaluator, file_callbacks, parameter_servers
from sparktf.runtime.training.spec import KERAS_FILE, SAVED_MODEL, TrainSpec

__all__ = ["TrainSpec", "train_main", "SAVED_MODEL", "KERAS_FILE"]


def train_main(spec: TrainSpec, ctx) -> dict | None:
    """What one task of ``fit`` does, by its role; the chief (and evaluator) report results.

    All-reduce workers train on their shards in lockstep; with parameter servers
    see ``parameter_servers``; the evaluator side-car is ``evaluator``.
    """
    if ctx.jobName == cluster.EVALUATOR:
        return evaluator.evaluate_checkpoints(spec, ctx)
    with file_callbacks.private_paths(spec.callbacks, ctx.isChief):
        result = (parameter_servers.train(spec, ctx) if ctx.numPs
                  else allreduce.train(spec, ctx))
    heartbeats.Heartbeat(ctx).finished()
    return result
