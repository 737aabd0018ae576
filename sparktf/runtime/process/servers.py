"""The TensorFlow servers of a parameter-server cluster: a ``ps`` or ``worker`` task starts
its own (``serve``) and the chief waits until all of them serve (``await_servers``)."""

from __future__ import annotations

from sparktf._protocol.client import EventClient

_servers: list = []  # this process's TensorFlow server, kept until the process exits


def serve(ctx) -> None:
    """Starts this task's TensorFlow server (once: a second call does nothing); it serves
    until the task releases the process."""
    import tensorflow as tf

    if _servers:
        return
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


def chief_only(main_fn, args, ctx):
    """``sparktf.run``'s ``main_fn`` with parameter servers (unless ``allTasks``): the ``ps``
    and ``worker`` tasks serve (sparktf starts their servers), and the chief runs
    ``main_fn`` once every server is up, as TensorFlow's parameter-server programs expect
    (their body runs on the coordinator only). The other tasks' results are None."""
    if ctx.jobName in ("ps", "worker"):
        serve(ctx)
        return None
    if ctx.jobName == "chief":
        await_servers(ctx)
    return main_fn(args, ctx)
