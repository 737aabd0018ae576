"""A task that cannot reach the driver watches its own child's heartbeats (a real child
process, no Spark): a stalled child is stopped after stallTimeout, a progressing one not."""

import threading

from sparktf import pickling
from sparktf.runtime.context import TaskContext
from sparktf.runtime.events import EventClient
from sparktf.runtime.task import TaskSpec, _Child


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
        with _Child(spec, 0, "", 1, str(tmp_path), events) as child:
            return child.run(ctx, release=lambda: None)


def test_a_stalled_child_is_stopped_when_the_driver_is_unreachable(tmp_path):
    status, value, _, _ = _run(tmp_path, beats_then_blocks)
    assert status == "error"
    assert value["message"].startswith("TaskStalledError: no progress for 1.5 s"), value
    assert "training (epoch 1, step 3)" in value["message"]


def test_a_child_making_progress_is_left_alone(tmp_path):
    status, value, _, _ = _run(tmp_path, beats_and_finishes, {"steps": 8, "every_s": 0.5})
    assert status == "ok", value  # 4 s in all, each step well inside stallTimeout
