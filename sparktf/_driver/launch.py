"""``sparktf.run``: run a TensorFlow program once per task of one Spark barrier stage.

The driver validates, pickles ``main_fn``, checks that the cluster can hold the
stage, starts the event channel, runs ``mapInArrow(..., barrier=True)`` and
turns the tasks' results (or their failure) into a return value (or one error).
``sparktf.ml.TFEstimator.fit`` is built on the same ``launch``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import uuid
from typing import Any, Callable

import cloudpickle

from sparktf._driver import (
    checks,
    failures,
    pickling,
    routing,
    schema,
    sessions,
    supervision,
)
from sparktf._driver.events import EventCollector, ensure_log_handler, log_phase
from sparktf._driver.resources import (
    TaskResources,
    check_gpu_conf,
    gpus_scheduled,
    positive_number,
)
from sparktf._protocol.server import EventServer
from sparktf.errors import (
    ClusterFormationError,
    InvalidInputError,
    JobTimeoutError,
    SparkTFError,
    TaskFailedError,
)
from sparktf.runtime import gpu, worker_tuning
from sparktf.runtime.feed.row_checks import NO_ROWS, RowChecks, no_rows
from sparktf.runtime.process import cluster, servers
from sparktf.runtime.process import task as task_runtime

logger = logging.getLogger("sparktf")

PORT_CONFLICT_RETRIES = 3
SPARE_IDLE_CONF = "spark.sparktf.spareIdleTimeout"
DEFAULT_SPARE_IDLE_S = 60.0


def run(spark, main_fn: Callable[[Any, Any], Any], args: Any = None, *, numWorkers: int,
        numPs: int = 0, df=None, useGpu: str | bool = "auto",
        timeout: float | None = None, evaluator: bool = False,
        taskCpus: int | None = None, taskGpus: float | None = None,
        allTasks: bool = False) -> list[Any]:
    """Runs ``main_fn(args, ctx)`` once per task of one barrier stage; returns results by rank.

    Each task gets its role (``ctx.jobName``, ``ctx.taskIndex``, ``ctx.rank``),
    the ``ctx.clusterSpec`` all tasks agree on, and ``TF_CONFIG`` in its
    environment before ``main_fn`` starts, so ``tf.distribute`` strategies work
    unchanged. With ``df``, ``ctx.dataset(batch_size)`` is the task's share of it.

    Parameters
    ----------
    spark : SparkSession
    main_fn : callable
        ``main_fn(args, ctx)``; runs in a fresh Python process per task. Its return
        value must be picklable.
    args : object, optional
        Passed to every task's ``main_fn`` unchanged.
    numWorkers : int
        Training tasks (``jobName == "worker"``).
    numPs : int
        Parameter servers. With ``numPs > 0`` the stage also has one ``chief`` task
        (for ``tf.distribute.coordinator.ClusterCoordinator``): ``numWorkers + 1 +
        numPs`` tasks. Parameter servers see no GPU. sparktf starts the ``ps`` and
        ``worker`` tasks' servers itself and runs ``main_fn`` on the chief only, once
        every server is up (the other tasks' results are None), unless ``allTasks``.
    df : DataFrame, optional
        Input data, shared by the worker tasks (chief and parameter servers get none).
    useGpu : "auto", True or False
        GPUs come from Spark's resource scheduler; see the guide's :doc:`/guide/gpus` page.
    timeout : float, optional
        Seconds after which the stage is cancelled and ``JobTimeoutError`` raised.
    evaluator : bool
        Adds one ``evaluator`` task (not in the cluster spec, TensorFlow's convention).
    taskCpus, taskGpus : optional
        CPUs and GPUs each task of this stage asks for, through a Spark
        ``ResourceProfile`` (stage-level scheduling): the rest of the application keeps
        its own settings.
    allTasks : bool
        With ``numPs > 0``: run ``main_fn`` on every task instead; the ``ps`` and
        ``worker`` tasks then call ``ctx.serve()`` and return, and the chief calls
        ``ctx.awaitServers()`` before creating its strategy.

    Returns
    -------
    list
        ``main_fn``'s return value of every task, ordered by rank.

    Examples
    --------
    Examples are in the guide's :doc:`/guide/run` page (the suite runs them).
    """
    validate_launch(numWorkers, numPs, useGpu, timeout)
    if not isinstance(allTasks, bool):
        raise InvalidInputError(f"allTasks must be True or False. Received: {allTasks!r}")
    if numPs and evaluator and not allTasks:
        raise InvalidInputError(
            "With parameter servers, main_fn runs on the chief only (sparktf serves the ps "
            "and worker tasks), but an evaluator task runs a program of its own: pass "
            "allTasks=True and branch on ctx.jobName ('evaluator': read the chief's "
            "checkpoints; 'ps' and 'worker': ctx.serve(); 'chief': ctx.awaitServers(), then "
            f"train). Received: numPs={numPs}, evaluator=True")
    if numPs and not allTasks:  # sparktf serves the ps and worker tasks
        payload = pickling.pickle_main(functools.partial(servers.chief_only, main_fn), args,
                                       also=[main_fn])
    else:
        payload = pickling.pickle_main(main_fn, args)
    columns = tuple(df.columns) if df is not None else ()
    if df is not None:
        schema.check_feedable(df.schema, columns)
    resources = TaskResources.checked(taskCpus, taskGpus)
    if resources is not None:
        resources.check_stage(df is not None or sessions.is_connect(spark))
    return launch(spark, LaunchSpec(payload, numWorkers, numPs, columns=columns, use_gpu=useGpu,
                                    timeout=timeout, evaluator=evaluator,
                                    resources=resources), df)


def validate_launch(num_workers, num_ps, use_gpu, timeout) -> None:
    """Refuses bad launcher arguments before anything starts."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise InvalidInputError(f"numWorkers must be an integer >= 1. "
                                f"Received: numWorkers={num_workers!r}")
    if isinstance(num_ps, bool) or not isinstance(num_ps, int) or num_ps < 0:
        raise InvalidInputError(f"numPs must be an integer >= 0. Received: numPs={num_ps!r}")
    gpu.use_gpu_value(use_gpu)
    if timeout is not None:
        positive_number("timeout", timeout, "a positive number of seconds (or None: none)")


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """One barrier stage to run: what the tasks get, and how the driver waits for it.

    With ``stall_timeout``, a rank that has sent heartbeats and then stays silent that
    long stops the stage with ``TaskStalledError``. With ``row_checks``, the tasks check
    the rows they receive and bad data raises ``InvalidInputError``. ``spare_idle_s``
    is filled in by ``launch`` from the session's configuration.
    """

    payload: bytes  # cloudpickle of (main_fn, args): pickling.pickle_main
    num_workers: int
    num_ps: int = 0
    columns: tuple[str, ...] = ()  # the input columns the tasks receive
    split_column: str | None = None  # boolean column: true rows are held out (validation)
    use_gpu: str | bool = "auto"  # gpu.use_gpu_value
    model_dir: str | None = None
    timeout: float | None = None
    what: str = "sparktf.run"  # how errors and logs name the job
    label: str = ""  # names this job in the tasks' relayed output ("fit 3")
    stall_timeout: float | None = None
    parquet_uri: str | None = None  # inputMode="parquet": the tasks read this copy
    evaluator: bool = False
    resources: TaskResources | None = None
    row_checks: RowChecks | None = None
    spare_idle_s: float = 0.0
    worker_tuning: bool = True  # spark.sparktf.workerTuning: filled in by launch
    framework_env: tuple = ()  # the driver's settings that pick a framework: by launch

    @property
    def layout(self) -> cluster.Layout:
        roles = cluster.assign_roles(self.num_workers, self.num_ps, self.evaluator)
        return cluster.layout(roles, self.split_column is not None)

    @property
    def num_tasks(self) -> int:
        return self.layout.num_tasks

    def task_spec(self, server: EventServer) -> task_runtime.TaskSpec:
        return task_runtime.TaskSpec(
            payload=self.payload, num_workers=self.num_workers, num_ps=self.num_ps,
            use_gpu=self.use_gpu, model_dir=self.model_dir, columns=self.columns,
            split_column=self.split_column, parquet_uri=self.parquet_uri,
            event_address=server.address, event_secret=server.secret,
            evaluator=self.evaluator, stall_timeout=self.stall_timeout,
            spare_idle_s=self.spare_idle_s, row_checks=self.row_checks,
            worker_tuning=self.worker_tuning, framework_env=self.framework_env)


def launch(spark, stage: LaunchSpec, df=None,
           on_event: Callable[[dict], None] | None = None) -> list[Any]:
    """Runs one barrier stage (the tasks of ``cluster.assign_roles``) over ``df``; returns
    the tasks' unpickled results by rank. ``on_event`` hears the tasks' events."""
    ensure_log_handler()
    log_phase(None, "launch")
    session = sessions.Session(spark)
    conf = session.conf()
    stage = dataclasses.replace(
        stage, columns=tuple(stage.columns), use_gpu=gpu.use_gpu_value(stage.use_gpu),
        spare_idle_s=spare_idle_s(conf, session.setting(SPARE_IDLE_CONF)),
        worker_tuning=worker_tuning.from_setting(session.setting(worker_tuning.SETTING)),
        framework_env=checks.framework_env(os.environ))
    what, resources = stage.what, stage.resources
    checks.check_security(conf, what)
    if resources is not None:
        resources.check(conf)
    slots = checks.check_capacity(session, stage.num_tasks, what,
                                  resources.slots if resources is not None else None)
    if stage.use_gpu is True and not (resources is not None and resources.gpus):
        check_gpu_conf(conf)
    elif stage.use_gpu == "auto" and not gpus_scheduled(conf):
        logger.info("sparktf: %s runs on CPU: Spark schedules no GPUs "
                    "(spark.task.resource.gpu.amount is not set)", what)
    log_phase(None, "checked")
    with checks.SlotGate.hold(stage.num_tasks, slots, what):
        rows = _run_stage(session, stage, df, EventCollector(on_event, stage.label))
    log_phase(None, "collected")
    results = sorted(((r["rank"], r["result"]) for r in rows))
    results = [cloudpickle.loads(blob) for _, blob in results]
    log_phase(None, "returned")
    return results


def spare_idle_s(conf: dict[str, str], chosen: str | None = None) -> float:
    """How long a task's spare process (TensorFlow imported, see
    ``sparktf.runtime.process.spare``) waits for the next task:
    ``spark.sparktf.spareIdleTimeout`` seconds (``chosen``, else from ``conf``; default 60;
    0 turns spares off). Off when Spark does not reuse its Python
    workers."""
    if conf.get("spark.python.worker.reuse", "true").strip().lower() == "false":
        return 0.0
    chosen = conf.get(SPARE_IDLE_CONF) if chosen is None else chosen
    return checks.seconds_setting(SPARE_IDLE_CONF, chosen, DEFAULT_SPARE_IDLE_S,
                                  " (0 turns spare processes off)")


def _run_stage(session: sessions.Session, stage: LaunchSpec, df, collector: EventCollector):
    """Runs the barrier stage, forming the cluster again if a port was taken, and with a
    shuffle before it if Spark cannot run a barrier stage on the input's own plan."""
    host = session.channel_host()
    frame, reshuffled = (
        (None, False) if df is None and session.sc is not None  # no data: an RDD stage
        else routing.input_frame(session.spark, df, stage.layout, stage.split_column))
    attempt = 0
    while True:
        attempt += 1
        collector.reset()
        tag = f"sparktf-{uuid.uuid4().hex[:12]}"
        with EventServer(host, collector, stage.num_tasks) as server, \
                supervision.watching(session, stage, collector, tag), \
                supervision.reachability(server, stage):
            with checks.executor_python(session):
                job = routing.barrier_job(session, frame, stage.num_tasks,
                                          stage.task_spec(server), stage.resources)
            log_phase(None, "submitted")
            try:
                with supervision.cancel_after_failure(session, collector, tag):
                    rows = supervision.collect(session, job, stage.timeout, stage.what, tag)
            except (JobTimeoutError, supervision.NotSubmittedError):
                raise
            except Exception as e:
                if collector.stalled is not None:
                    raise supervision.stall_error(stage, *collector.stalled) from e
                if routing.is_barrier_chain_error(e) and not collector.errors:
                    if reshuffled:  # already behind a shuffle: not a chain sparktf made
                        raise SparkTFError(f"Spark refused {stage.what}'s barrier stage: "
                                           f"{failures.first_line(str(e))}") from e
                    logger.info("sparktf: Spark cannot run a barrier stage directly on this "
                                "DataFrame's plan (a union, coalesce or similar); %s "
                                "repartitions it into %d partitions first", stage.what,
                                stage.num_tasks)
                    frame, reshuffled = routing.shuffled(df, stage.num_tasks), True
                    attempt -= 1
                    continue
                failure, cause = failures.translate(e, collector.errors, stage.what), e
            else:
                if not collector.errors:
                    return _every_rank(rows, stage, collector, frame is not None)
                # the tasks reported a failure and ended quietly: Spark saw none
                failure, cause = failures.translate(None, collector.errors, stage.what), None
            if not _is_port_conflict(failure):
                raise failure from cause
            if attempt == PORT_CONFLICT_RETRIES:
                raise ClusterFormationError(
                    f"{stage.what} could not form a TensorFlow cluster: the ports chosen "
                    f"were taken by other processes in {attempt} attempts in a row. Free "
                    f"ports on the executors' hosts. Last error: {failure}") from cause
            logger.warning("sparktf: %s; forming the cluster again with new ports "
                           "(attempt %d of %d)", failure.message, attempt + 1,
                           PORT_CONFLICT_RETRIES)


def _every_rank(rows: list, stage: LaunchSpec, collector: EventCollector,
                has_input: bool) -> list:
    """The stage's result rows, refused unless every rank returned one (a task that lost
    the event channel ends without a result, as it cannot tell the driver why)."""
    if has_input and not rows and not collector.heard:
        # no task started: Spark planned the input with no partition at all, as it plans a
        # frame it knows to be empty (filter(false), limit(0)), shuffles included
        raise InvalidInputError(NO_ROWS if stage.row_checks is not None else
                                no_rows(stage.what))
    missing = sorted(set(range(stage.num_tasks)) - {r["rank"] for r in rows})
    if missing:
        raise SparkTFError(f"{stage.what}: rank(s) {missing} ended without a result: they "
                           "lost the driver's event channel")
    return rows


def _is_port_conflict(failure: SparkTFError) -> bool:
    return (isinstance(failure, TaskFailedError)
            and failure.message.startswith(task_runtime.PORT_CONFLICT_PREFIX))
