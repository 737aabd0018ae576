"""A task that cannot reach the driver watches its own child's heartbeats (a real child
process, no Spark): a stalled child is stopped after stallTimeout, a progressing one not."""

import threading

from sparktf._driver import pickling
from sparktf._protocol.client import EventClient
from sparktf.runtime.process.context import TaskContext
from sparktf.runtime.process.task import TaskSpec
from sparktf.runtime.process.task_process import TaskProcess


def beats_then_blocks(args, ctx):
    ctx.emit("heartbeat", role="worker:0", where="training", epoch=1, step=3)
    threading.Event().wait()  # never returns: only the task's own watchdog ends this


def beats_and_finishes(args, ctx):
    done = threading.Event()
    for step in range(args["steps"]):
        ctx.emit("heartbeat", role="worker:0", where="training", epoch=1, step=step)
        done.wait(args["every_s"])  # a step's work
    return "finished"


def _run(tmp_path, main_fn, args=None, stall_timeout=1.5):
    spec = TaskSpec(payload=pickling.pickle_main(main_fn, args), num_workers=1,
                    stall_timeout=stall_timeout)
    ctx = TaskContext(jobName="worker", taskIndex=0, rank=0,
                      clusterSpec={"worker": ["localhost:1"]}, numWorkers=1)
    with EventClient(None, "", 0) as events:  # the driver is out of reach
        assert not events.connected
        with TaskProcess(spec, 0, "", 1, str(tmp_path), events) as child:
            return child.run(ctx, release=lambda: None)


def test_a_stalled_child_is_stopped_when_the_driver_is_unreachable(tmp_path):
    status, value, _, _ = _run(tmp_path, beats_then_blocks)
    assert status == "error"
    assert value["message"].startswith("TaskStalledError: no progress for 1.5 s"), value
    assert "training (epoch 1, step 3)" in value["message"]


def test_a_child_making_progress_is_left_alone(tmp_path):
    status, value, _, _ = _run(tmp_path, beats_and_finishes, {"steps": 8, "every_s": 0.5})
    assert status == "ok", value  # 4 s in all, each step well inside stallTimeout


def waits_for_peers(args, ctx):
    print("waiting for peers that are gone", flush=True)
    threading.Event().wait()  # e.g. a collective whose other worker died


def test_a_child_is_stopped_when_the_driver_ends_the_job_without_this_task(tmp_path):
    """Spark may fail a stage and leave a killed task's Python worker running; when the
    driver hangs up the event channel, the task stops its child instead of waiting."""
    from sparktf._protocol.server import EventServer

    ctx = TaskContext(jobName="worker", taskIndex=0, rank=0,
                      clusterSpec={"worker": ["localhost:1"]}, numWorkers=1)
    waiting = threading.Event()

    def on_event(event):
        if event.get("line") == "waiting for peers that are gone":
            waiting.set()

    server = EventServer("127.0.0.1", on_event, 1).__enter__()
    spec = TaskSpec(payload=pickling.pickle_main(waits_for_peers, None), num_workers=1,
                    event_address=server.address, event_secret=server.secret)
    outcome = []
    with EventClient(server.address, server.secret, 0) as events:
        assert events.connected
        with TaskProcess(spec, 0, "", 1, str(tmp_path), events) as child:
            runner = threading.Thread(target=lambda: outcome.append(
                child.run(ctx, release=lambda: None)))
            runner.start()
            assert waiting.wait(120), "the child never started"
            server.__exit__(None, None, None)  # the job has ended: the driver hangs up
            runner.join(60)
    assert not runner.is_alive(), "the task still waits for its child"
    status, value, _, _ = outcome[0]
    assert status == "error"
    assert "the driver ended the job while this task's process ran" in value["message"]
