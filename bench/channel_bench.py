"""The driver's event channel at scale: 256 simulated tasks against one ``EventServer``.

    .venv/bin/python bench/channel_bench.py [--tasks 256] [--seconds 10]

The server runs in this process, as on the driver; the tasks are threads of a second
process, each an ``EventClient`` as a barrier task uses it: connect with the job's secret,
exchange addresses (``gather``: answered once every task asked), then a heartbeat every
0.5 s and a log line every second for ``--seconds``, then the exit barrier (``done``).
Beside them, one client that connects and never speaks, and one that writes its hello a
byte every 0.2 s: neither may hold the others back. Printed: the address exchange's
latency (first request to last answer, and each task's wait), the events per second
served, and this process's threads and open file descriptors at their peak.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def tasks_process(address: str, secret: str, tasks: int, seconds: float) -> None:
    """The simulated tasks (run in their own process): prints one JSON line of timings."""
    from sparktf._protocol.client import EventClient

    host, port = address.rsplit(":", 1)
    waits: list[float] = [0.0] * tasks
    answered: list[float] = [0.0] * tasks
    asked: list[float] = [0.0] * tasks
    released: list[bool] = [False] * tasks

    def task(rank: int) -> None:
        with EventClient((host, int(port)), secret, rank) as client:
            client.phase("task started")
            asked[rank] = time.monotonic()
            reply = client.request({"kind": "gather",
                                    "value": json.dumps({"address": f"10.0.0.{rank}:1"})})
            answered[rank] = time.monotonic()
            waits[rank] = answered[rank] - asked[rank]
            assert reply and len(reply.get("values", [])) == tasks, reply
            end = time.monotonic() + seconds
            beat = 0
            while time.monotonic() < end:
                client.send({"kind": "heartbeat", "rank": rank, "phase": "training",
                             "epoch": 1, "step": beat})
                if beat % 2 == 0:
                    client.send({"kind": "log", "rank": rank, "line": f"step {beat}"})
                beat += 1
                time.sleep(0.5)  # the simulated task's own cadence, not a wait for the server
            released[rank] = client.send({"kind": "done", "ack": True}, wait_ack=True)

    threads = [threading.Thread(target=task, args=(r,)) for r in range(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("TASKS " + json.dumps({"exchange_s": max(answered) - min(asked),
                                 "max_wait_s": max(waits), "released": sum(released)}),
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tasks-process", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tasks_process:
        tasks_process(args.tasks_process[0], args.tasks_process[1], args.tasks, args.seconds)
        return 0

    from sparktf._protocol.server import EventServer

    events = {"n": 0}
    lock = threading.Lock()

    def on_event(event):
        with lock:
            events["n"] += 1

    peak = {"threads": 0, "fds": 0, "rss": 0}
    stop = threading.Event()

    def rss_kb():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def sample():
        while not stop.wait(0.1):
            peak["threads"] = max(peak["threads"], threading.active_count())
            peak["fds"] = max(peak["fds"], len(os.listdir("/proc/self/fd")))
            peak["rss"] = max(peak["rss"], rss_kb())

    before = threading.active_count(), len(os.listdir("/proc/self/fd")), rss_kb()
    cpu = sum(os.times()[:2])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with EventServer("127.0.0.1", on_event, num_tasks=args.tasks) as server:
        host, port = server.address
        silent = socket.create_connection((host, port))
        slow = socket.create_connection((host, port))

        def slow_hello():
            for byte in json.dumps({"secret": "wrong", "rank": -1}).encode() + b"\n":
                try:
                    slow.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.2)
        threading.Thread(target=slow_hello, daemon=True).start()
        started = time.monotonic()
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--tasks",
                               str(args.tasks), "--seconds", str(args.seconds),
                               "--tasks-process", f"{host}:{port}", server.secret],
                              capture_output=True, text=True)
        elapsed = time.monotonic() - started
        silent.close()
        slow.close()
    stop.set()
    lines = [line for line in done.stdout.splitlines() if line.startswith("TASKS ")]
    if not lines:
        print(done.stderr[-3000:])
        return 1
    found = json.loads(lines[-1][6:])
    print(f"\nevent channel, {args.tasks} simulated tasks (+1 silent, +1 slow client), "
          f"{args.seconds:.0f} s of heartbeats every 0.5 s and a log line every second")
    exchange_ms, wait_ms = found["exchange_s"] * 1e3, found["max_wait_s"] * 1e3
    print(f"  address exchange, first request to last answer   {exchange_ms:8.1f} ms")
    print(f"  longest wait of one task for the exchange         {wait_ms:8.1f} ms")
    print(f"  tasks released by the exit barrier                {found['released']:8d}")
    print(f"  events served                                     {events['n']:8d} "
          f"({events['n'] / elapsed:,.0f}/s over {elapsed:.1f} s)")
    print(f"  driver threads: before {before[0]}, peak {peak['threads']}")
    print(f"  driver open file descriptors: before {before[1]}, peak {peak['fds']}")
    print(f"  driver resident memory: before {before[2] / 1024:.1f} MB, peak "
          f"{peak['rss'] / 1024:.1f} MB ({(peak['rss'] - before[2]) / args.tasks:.1f} KB a task)")
    used = sum(os.times()[:2]) - cpu
    print(f"  driver CPU time (server and handler)             {used:8.2f} s "
          f"({used / max(events['n'], 1) * 1e6:.0f} us an event)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
