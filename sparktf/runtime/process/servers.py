"""The TensorFlow servers of a parameter-server cluster: a ``ps`` or ``worker`` task starts
its own (``serve``) and the chief waits until all of them serve (``await_servers``)."""

from __future__ import annotations

from sparktf._protocol.client import EventClient

_servers: list = []  # this process's TensorFlow server, kept until the process exits


def serve(ctx) -> None:
    """Starts this task's TensorFlow server; it serves until the task releases the process."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    _servers.append(tf.distribute.Server(resolver.cluster_spec(), job_name=ctx.jobName,
                                         task_index=ctx.taskIndex, protocol="grpc",
                                         start=True))
    print(f"sparktf: {ctx.jobName}:{ctx.taskIndex} serving for the chief", flush=True)
    ctx.emit("serving", role=f"{ctx.jobName}:{ctx.taskIndex}")


def await_servers(ctx) -> None:
    """Blocks until every worker and parameter server serves (one request to the driver).

    The coordinator treats a server that is not up yet as a failed worker; waiting
    for all of them first keeps start-up out of its failure handling.
    """
    with EventClient.from_environment(ctx.rank) as channel:
        reply = channel.request({"kind": "await_serving", "count": ctx.numWorkers + ctx.numPs})
    if reply is None or reply["serving"] < ctx.numWorkers + ctx.numPs:
        raise RuntimeError("The chief lost the driver's event channel while waiting for the "
                           "workers and parameter servers to start.")
