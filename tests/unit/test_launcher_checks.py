"""Launcher argument checks, capacity arithmetic and the event channel, without a JVM."""

import socket
import threading
import time

import pytest

import sparktf
from sparktf._driver import checks, launch, pickling, supervision
from sparktf._driver.resources import TaskResources
from sparktf._protocol.client import EventClient
from sparktf._protocol.server import EventServer
from sparktf._protocol.wire import encode


@pytest.mark.parametrize("kwargs,fragment", [
    ({"num_workers": 0}, "numWorkers must be an integer >= 1. Received: numWorkers=0"),
    ({"num_workers": 2.0}, "numWorkers=2.0"),
    ({"num_workers": True}, "numWorkers=True"),
    ({"num_ps": -1}, "numPs=-1"),
    ({"use_gpu": "yes"}, "useGpu='yes'"),
    ({"timeout": 0}, "timeout=0"),
])
def test_bad_launch_arguments_are_refused_with_the_value(kwargs, fragment):
    args = {"num_workers": 2, "num_ps": 0, "use_gpu": "auto", "timeout": None, **kwargs}
    with pytest.raises(sparktf.InvalidInputError) as info:
        launch.validate_launch(**args)
    assert fragment in str(info.value)


def test_unpicklable_main_fn_is_refused_before_launch():
    lock = threading.Lock()

    def main(args, ctx):
        return lock.locked()

    with pytest.raises(sparktf.InvalidInputError, match="picklable.*lock"):
        pickling.pickle_main(main, None)


def test_non_callable_main_fn_is_refused():
    with pytest.raises(sparktf.InvalidInputError, match="callable"):
        pickling.pickle_main(42, None)


@pytest.mark.parametrize("master,conf,slots", [
    ("local", {}, 1),
    ("local[4]", {}, 4),
    ("local[4]", {"spark.task.cpus": "2"}, 2),
    ("local-cluster[2,1,1024]", {}, 2),
    ("local-cluster[3, 2, 512]", {}, 6),
    ("spark://h:7077", {"spark.executor.instances": "4", "spark.executor.cores": "2"}, 8),
    ("yarn", {}, None),
    # GPUs limit the slots too: two GPUs and one core per executor is one slot each
    ("local-cluster[2,1,1024]", {"spark.executor.resource.gpu.amount": "2",
                                 "spark.task.resource.gpu.amount": "1"}, 2),
    ("local-cluster[2,4,1024]", {"spark.executor.resource.gpu.amount": "2",
                                 "spark.task.resource.gpu.amount": "1"}, 4),
    ("local-cluster[1,4,1024]", {"spark.executor.resource.gpu.amount": "1",
                                 "spark.task.resource.gpu.amount": "0.5"}, 2),
    ("spark://h:7077", {"spark.executor.instances": "3", "spark.executor.cores": "8",
                        "spark.executor.resource.gpu.amount": "4",
                        "spark.task.resource.gpu.amount": "2"}, 6),
])
def test_expected_slots(master, conf, slots):
    assert checks.expected_slots(master, conf) == slots


class _Slots:
    """What ``relaunch_workers`` reads of a session: the registered slots (one reading
    after another, the last one repeated: executors coming back) and the conf."""

    def __init__(self, slots, conf=None):
        self._readings = list(slots) if isinstance(slots, list) else [slots]
        self._conf = conf or {}

    def slots_now(self):
        return self._readings.pop(0) if len(self._readings) > 1 else self._readings[0]

    def conf(self):
        return self._conf

    def setting(self, key):
        return self._conf.get(key)


@pytest.mark.parametrize("slots,wanted,fewest,others,scale,expected", [
    (4, 2, 1, 0, None, (2, 4)),  # the slots hold them all
    (1, 2, 1, 0, None, (1, 1)),  # a lost executor: continue with one
    (2, 3, 1, 1, None, (1, 2)),  # an evaluator takes a slot too
    (1, 3, 2, 0, None, (2, 1)),  # never fewer than minWorkers: the capacity check then waits
    (2, 2, 2, 0, None, (2, 2)),  # minWorkers = numWorkers: today's relaunch
    (None, 2, 1, 0, None, (2, None)),  # Spark Connect does not say: numWorkers
    (4, 4, 1, 0, TaskResources(2, None), (2, 2)),  # 2 CPUs per task: half the slots
])
def test_a_relaunch_takes_the_workers_the_slots_hold_within_min_workers(
        slots, wanted, fewest, others, scale, expected):
    session = _Slots(slots, {"spark.task.cpus": "1"})
    assert checks.relaunch_workers(session, wanted, fewest, others,
                                   scale.slots if scale else None, wait_s=0) == expected


def test_a_relaunch_waits_for_a_replaced_executor_before_it_takes_fewer_workers():
    """Issue 34 review: right after the failure the lost executor's replacement has not
    registered yet; the relaunch takes numWorkers once it has (a standalone master's
    replacement, which check_capacity does not wait for without executor.instances)."""
    coming_back = _Slots([1, 1, 1, 2])
    assert checks.relaunch_workers(coming_back, 2, 1, 0, wait_s=30) == (2, 2)
    gone = _Slots([1])  # not replaced: fewer workers once the wait is over
    started = time.monotonic()
    assert checks.relaunch_workers(gone, 2, 1, 0, wait_s=0.6) == (1, 1)
    assert 0.5 < time.monotonic() - started < 5


@pytest.mark.parametrize("value,seconds", [(None, 60.0), ("5", 5.0), ("2.5s", 2.5),
                                           ("0", 0.0), ("1min", 60.0), ("2m", 120.0),
                                           ("1h", 3600.0), ("500ms", 0.5), (" 90 s ", 90.0),
                                           ("soon", None), ("-1", None), ("inf", None),
                                           ("1 fortnight", None), ("min", None)])
def test_the_relaunch_wait_is_a_time_in_sparks_syntax(value, seconds):
    session = _Slots(2, {} if value is None else {checks.RELAUNCH_WAIT_CONF: value})
    if seconds is None:
        with pytest.raises(sparktf.InvalidInputError, match="relaunchWait must be a time"):
            checks.relaunch_wait_s(session)
    else:
        assert checks.relaunch_wait_s(session) == seconds


def test_executors_that_cannot_start_are_named_at_once():
    conf = {"spark.executor.resource.gpu.amount": "2", "spark.task.resource.gpu.amount": "1"}
    reason = checks.unplaceable("local-cluster[2,1,1024]", conf)
    assert "spark.executor.resource.gpu.amount=2" in reason
    assert "Set spark.worker.resource.gpu.amount" in reason
    conf["spark.worker.resource.gpu.amount"] = "2"
    assert checks.unplaceable("local-cluster[2,1,1024]", conf) is None
    assert checks.unplaceable("spark://h:7077", {}) is None


def test_event_channel_delivers_events_and_acknowledges():
    received = []
    with EventServer("127.0.0.1", received.append) as server:
        with EventClient(server.address, server.secret, rank=1) as client:
            assert client.send({"kind": "log", "line": "hello"})
            assert client.send({"kind": "error", "message": "x", "ack": True}, wait_ack=True)
    assert [e["kind"] for e in received] == ["log", "error"]
    assert received[0]["rank"] == 1 and received[0]["line"] == "hello"


def test_event_channel_ignores_connections_without_the_secret():
    received = []
    with EventServer("127.0.0.1", received.append) as server:
        with socket.create_connection(server.address, timeout=5) as s:
            s.sendall(encode({"secret": "wrong"}) + encode({"kind": "log", "line": "x"}))
            assert s.recv(10) == b""  # the server closed the connection
    assert received == []


def test_event_client_without_a_driver_degrades_quietly():
    client = EventClient(None, "", rank=0)
    assert client.send({"kind": "log"}) is False


@pytest.mark.parametrize("setting", checks.SECURE_SETTINGS)
def test_secured_spark_apps_refuse_unauthenticated_tensorflow_unless_allowed(setting):
    with pytest.raises(sparktf.ClusterCapacityError, match=f"{setting}=true"):
        checks.check_security({setting: "true"}, "TFEstimator.fit")
    checks.check_security({setting: "true", checks.ALLOW_PLAIN_TF: "true"}, "x")
    checks.check_security({}, "x")  # an unsecured app needs nothing


@pytest.mark.parametrize("cpus,gpus,fragment", [
    (0, None, "taskCpus=0"), (1.5, None, "taskCpus=1.5"), (True, None, "taskCpus=True"),
    (None, 0, "taskGpus=0"), (None, 1.5, "taskGpus=1.5"), (None, "1", "taskGpus='1'"),
])
def test_bad_task_resources_are_refused_with_the_value(cpus, gpus, fragment):
    with pytest.raises(sparktf.InvalidInputError) as info:
        TaskResources.checked(cpus, gpus)
    assert fragment in str(info.value)


def test_task_resources_fit_fewer_tasks_per_executor_when_they_ask_for_more_cpus():
    assert TaskResources.checked(None, None) is None
    assert TaskResources.checked(None, 0.5) == TaskResources(None, 0.5)
    assert TaskResources(cpus=2).scale(slots=4, default_cpus=1) == 2
    assert TaskResources(cpus=3).scale(slots=4, default_cpus=2) == 2
    assert TaskResources(gpus=1.0).scale(slots=4, default_cpus=1) == 4


def test_event_channel_tells_a_waiting_evaluator_of_each_epoch_and_of_the_end():
    with EventServer("127.0.0.1", lambda e: None, num_tasks=3) as server:
        with EventClient(server.address, server.secret, rank=0) as chief, \
                EventClient(server.address, server.secret, rank=1) as worker, \
                EventClient(server.address, server.secret, rank=2) as evaluator:
            replies = []
            waiting = threading.Thread(target=lambda: replies.append(
                evaluator.request({"kind": "await_epoch", "after": 0})))
            waiting.start()
            waiting.join(0.3)
            assert replies == []  # blocked: no epoch yet
            assert chief.send({"kind": "epoch", "epoch": 1, "ack": True}, wait_ack=True)
            waiting.join(10)
            assert replies == [{"epoch": 1, "finished": False}]
            done = [threading.Thread(target=c.send, args=({"kind": "done", "ack": True},),
                                     kwargs={"wait_ack": True}) for c in (chief, worker)]
            for thread in done:
                thread.start()
            assert evaluator.request({"kind": "await_epoch", "after": 1}) == {
                "epoch": 1, "finished": True}  # every other task is done: training is over
            assert evaluator.send({"kind": "done", "ack": True}, wait_ack=True)
            for thread in done:
                thread.join(10)
                assert not thread.is_alive()


def test_event_channel_is_an_exit_barrier_for_all_tasks():
    with EventServer("127.0.0.1", lambda e: None, num_tasks=2) as server:
        with EventClient(server.address, server.secret, rank=0) as a, \
                EventClient(server.address, server.secret, rank=1) as b:
            released = threading.Event()
            results = []

            def first():
                results.append(a.send({"kind": "done", "ack": True}, wait_ack=True))
                released.set()

            thread = threading.Thread(target=first)
            thread.start()
            assert not released.wait(0.3)  # rank 0 waits for rank 1
            assert b.send({"kind": "done", "ack": True}, wait_ack=True)
            thread.join(10)
            assert results == [True]


def _gather_in_thread(client, value, replies):
    thread = threading.Thread(target=lambda: replies.append(
        client.request({"kind": "gather", "value": value})))
    thread.start()
    return thread


def test_event_channel_gathers_every_tasks_message_in_rank_order():
    with EventServer("127.0.0.1", lambda e: None, num_tasks=2) as server:
        with EventClient(server.address, server.secret, rank=0) as a, \
                EventClient(server.address, server.secret, rank=1) as b:
            replies = []
            thread = _gather_in_thread(b, "from 1", replies)
            thread.join(0.3)
            assert replies == []  # rank 1 waits for rank 0's message
            assert a.request({"kind": "gather", "value": "from 0"}) == {
                "values": ["from 0", "from 1"]}
            thread.join(10)
            assert replies == [{"values": ["from 0", "from 1"]}]


def test_the_tasks_second_exchange_is_its_own_round():
    """Addresses first (round 0), rows once they are in (round 1): a task already in round
    1 does not answer, nor take the values of, one still in round 0."""
    with EventServer("127.0.0.1", lambda e: None, num_tasks=2) as server:
        with EventClient(server.address, server.secret, rank=0) as a, \
                EventClient(server.address, server.secret, rank=1) as b:
            replies = []
            thread = _gather_in_thread(b, "address 1", replies)
            assert a.request({"kind": "gather", "value": "address 0"}) == {
                "values": ["address 0", "address 1"]}
            thread.join(10)
            rows = threading.Thread(target=lambda: replies.append(
                a.request({"kind": "gather", "value": "rows 0", "round": 1})))
            rows.start()
            rows.join(0.3)
            assert len(replies) == 1  # rank 0's rows wait for rank 1's
            assert b.request({"kind": "gather", "value": "rows 1", "round": 1}) == {
                "values": ["rows 0", "rows 1"]}
            rows.join(10)
            assert replies[1] == {"values": ["rows 0", "rows 1"]}


def test_a_gather_falls_back_to_spark_for_all_when_a_task_never_connects(monkeypatch):
    monkeypatch.setattr("sparktf._protocol.meeting.GATHER_GRACE_S", 0.5)
    with EventServer("127.0.0.1", lambda e: None, num_tasks=3) as server:
        with EventClient(server.address, server.secret, rank=0) as a, \
                EventClient(server.address, server.secret, rank=1) as b:
            # rank 2 cannot reach the channel: it calls allGather, so must everyone
            assert a.request({"kind": "gather", "value": "0"}) == {"fallback": True}
            assert b.request({"kind": "gather", "value": "1"}) == {"fallback": True}


def test_a_gather_ends_when_the_job_ends():
    server = EventServer("127.0.0.1", lambda e: None, num_tasks=2)
    replies = []
    with server:
        client = EventClient(server.address, server.secret, rank=0)
        late = EventClient(server.address, server.secret, rank=1)  # connected, never asks
        thread = _gather_in_thread(client, "0", replies)
        thread.join(0.3)
        assert replies == []
    thread.join(10)
    assert not thread.is_alive() and replies in ([{"ended": True}], [None])
    client.close()
    late.close()


def test_a_reported_failure_ends_the_job_for_every_task():
    events = []
    with EventServer("127.0.0.1", events.append, num_tasks=3) as server:
        with EventClient(server.address, server.secret, rank=0) as waiting, \
                EventClient(server.address, server.secret, rank=1) as failing:
            replies = []
            thread = _gather_in_thread(waiting, "0", replies)
            assert failing.send({"kind": "error", "message": "boom", "ack": True},
                                wait_ack=True)  # the report lands before the hang-up
            thread.join(10)
            assert replies in ([{"ended": True}], [None])  # the exchange ends, unanswered
            assert _wait_ended(waiting) and _wait_ended(failing)
            # a task that connects after the failure hears at once that the job is over
            with EventClient(server.address, server.secret, rank=2) as late:
                assert late.request({"kind": "gather", "value": "2"}) in (None,
                                                                          {"ended": True})
    assert [e["message"] for e in events if e["kind"] == "error"] == ["boom"]


def _wait_ended(client: EventClient) -> bool:
    """The hang-up reaches the client's socket (a blocking poll, bounded)."""
    import select
    if client.fileno() is not None:
        poller = select.poll()
        poller.register(client.fileno(), select.POLLRDHUP)
        poller.poll(10_000)
    return client.ended


def test_a_waiting_task_is_not_released_by_shutdown():
    server = EventServer("127.0.0.1", lambda e: None, num_tasks=2)
    with server:
        client = EventClient(server.address, server.secret, rank=0)
        outcome = []
        thread = threading.Thread(
            target=lambda: outcome.append(client.send({"kind": "done", "ack": True},
                                                      wait_ack=True)))
        thread.start()
        # rank 1 learns that rank 0 is done: rank 0 now waits at the exit barrier, so the
        # shutdown below meets a waiting task (not one whose message it never read)
        with EventClient(server.address, server.secret, rank=1) as observer:
            assert observer.request({"kind": "await_epoch", "after": 0}) == \
                {"epoch": 0, "finished": True}
        # the first step of shutting down, alone: the connections stay up, so a release
        # (an acknowledgement) would reach the task now
        server._server.close_barrier()
        thread.join(10)
    client.close()
    assert not thread.is_alive()
    assert outcome == [False]  # the stage is failing: no release, the task fails instead


def test_one_log_line_says_when_no_task_reaches_the_channel(monkeypatch, caplog):
    import logging

    monkeypatch.setattr(supervision, "CHANNEL_GRACE_S", 0.3)
    stage = launch.LaunchSpec(b"", 2, what="TFEstimator.fit")
    caplog.set_level(logging.WARNING, logger="sparktf")
    with EventServer("127.0.0.1", lambda e: None, num_tasks=2) as server:
        with supervision.reachability(server, stage) as watcher:
            watcher.join(10)
    lines = [r.getMessage() for r in caplog.records if "event channel" in r.getMessage()]
    assert len(lines) == 1 and "no task of TFEstimator.fit has reached" in lines[0]
    assert "spark.sparktf.channelHost" in lines[0]
    caplog.clear()
    with EventServer("127.0.0.1", lambda e: None, num_tasks=1) as server:
        with supervision.reachability(server, stage) as watcher:
            with EventClient(server.address, server.secret, rank=0):
                watcher.join(10)
    assert not [r for r in caplog.records if "event channel" in r.getMessage()]


def test_the_channel_serves_many_waiting_tasks_with_two_threads_and_a_silent_one_stalls_none():
    tasks = 64
    with EventServer("127.0.0.1", lambda e: None, num_tasks=tasks) as server:
        silent = socket.create_connection(server.address, timeout=5)  # connects, never speaks
        clients = [EventClient(server.address, server.secret, rank=r) for r in range(tasks)]
        replies: list = []
        threads = [_gather_in_thread(c, str(c.rank), replies) for c in clients[1:]]
        for thread in threads:
            thread.join(0.01)
        # 63 tasks wait at the exchange: on the driver that is no thread of their own
        serving = [t.name for t in threading.enumerate() if t.name.startswith("sparktf-events")]
        assert len(serving) <= 2, serving
        assert clients[0].request({"kind": "gather", "value": "0"}) == {
            "values": [str(r) for r in range(tasks)]}
        for thread in threads:
            thread.join(10)
        assert len(replies) == tasks - 1 and all(len(r["values"]) == tasks for r in replies)
        for client in clients:
            client.close()
        silent.close()


@pytest.mark.parametrize("num_ps,evaluator,slots,said", [
    (0, False, 1, "on 1 of 2 workers: the cluster has 1 task slot now (minWorkers=1)"),
    (0, True, 2, "on 1 of 2 workers: the cluster has 2 task slots now, 1 of them for the "
                 "evaluator (minWorkers=1)"),
    (1, False, 3, "on 1 of 2 workers: the cluster has 3 task slots now, 2 of them for the "
                  "chief and 1 parameter server (minWorkers=1)"),
    (2, True, 5, "on 1 of 2 workers: the cluster has 5 task slots now, 4 of them for the "
                 "chief, 2 parameter servers and the evaluator (minWorkers=1)"),
])
def test_a_shrunk_relaunch_says_which_slots_are_not_for_workers(monkeypatch, num_ps,
                                                                 evaluator, slots, said):
    """The slots a relaunch line names include those of the tasks minWorkers does not
    count: it says so, or "1 of 2 workers: 3 task slots" reads as a contradiction."""
    from sparktf._driver import launch, sessions
    from sparktf.ml import TFEstimator
    no_wait = {checks.RELAUNCH_WAIT_CONF: "0"}
    monkeypatch.setattr(sessions, "Session", lambda spark: _Slots(slots, no_wait))
    stage = launch.LaunchSpec(b"", 2, num_ps, evaluator=evaluator)
    est = TFEstimator(numWorkers=2, minWorkers=1, numPs=num_ps, evaluator=evaluator)
    resized, message = est._resized(None, stage, None, 0.0)
    assert resized.num_workers == 1 and message == said
    # fewer slots than minWorkers needs: refused at once, saying what was lost
    monkeypatch.setattr(sessions, "Session", lambda spark: _Slots(slots - 1, no_wait))
    with pytest.raises(sparktf.ClusterCapacityError, match=(
            f"needs {slots} task slots .* and the cluster has {slots - 1} 0 s after the "
            "attempt failed .*executors were lost and not replaced")):
        est._resized(None, stage, None, 0.0)


def test_a_fit_in_another_thread_gets_the_drivers_interpreter_too(monkeypatch):
    """CrossValidator(parallelism=2): while one fit's job is made with the driver's
    interpreter, another thread's fit must not read that as 'already the driver's' and
    make its job after the first put Spark's default back (its workers then ran python3:
    'No module named sparktf')."""
    import sys
    import types

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    session = types.SimpleNamespace(connect=False, master="local-cluster[2,1,1024]",
                                    sc=types.SimpleNamespace(pythonExec="python3"),
                                    get=lambda key: None)
    first_in, first_may_leave, first_left = (threading.Event() for _ in range(3))
    second_in = threading.Event()
    seen = []

    def first():
        with checks.executor_python(session):
            first_in.set()
            first_may_leave.wait(30)
        first_left.set()

    def second():
        first_in.wait(30)
        with checks.executor_python(session):
            second_in.set()
            first_left.wait(30)
            seen.append(session.sc.pythonExec)  # as the second fit's job is made

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    second_in.wait(0.5)  # the second waits for the first (before: it went ahead)
    first_may_leave.set()
    for t in threads:
        t.join(30)
    assert seen == [sys.executable]
    assert session.sc.pythonExec == "python3"  # Spark's default back after both


def test_the_driver_s_framework_settings_reach_the_tasks_and_a_foreign_backend_is_refused():
    # a setting the driver lacks is sent as None: the task unsets what its executor may
    # have inherited from the driver's environment (review)
    assert checks.framework_env({"TF_USE_LEGACY_KERAS": "1", "PATH": "/bin"}) == (
        ("TF_USE_LEGACY_KERAS", "1"), ("KERAS_BACKEND", None))
    assert checks.framework_env({"KERAS_BACKEND": ""}) == (
        ("TF_USE_LEGACY_KERAS", None), ("KERAS_BACKEND", ""))
    for refused in ("torch", "TensorFlow", " tensorflow"):  # Keras reads it as it is
        with pytest.raises(sparktf.InvalidInputError,
                           match="Unset it, or set it to 'tensorflow'"):
            checks.framework_env({"KERAS_BACKEND": refused})


def test_a_task_s_process_gets_the_driver_s_framework_settings_and_loses_the_unset_ones(
        monkeypatch):
    from sparktf.runtime.process import task, task_process

    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")  # as an executor inherits it
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    spec = task.TaskSpec(payload=b"", num_workers=1, framework_env=(
        ("TF_USE_LEGACY_KERAS", None), ("KERAS_BACKEND", "tensorflow")))
    env = task_process.child_env(spec, "", 1)
    assert "TF_USE_LEGACY_KERAS" not in env and env["KERAS_BACKEND"] == "tensorflow"
