"""Roles, cluster specs and TF_CONFIG as pure functions of the gathered addresses.

Every task computes the same answer from the same exchanged addresses, so the
tasks agree on the cluster without any further communication.
"""

from __future__ import annotations

import json
import random
import socket
from dataclasses import dataclass
from typing import Sequence

CHIEF, WORKER, PS, EVALUATOR = "chief", "worker", "ps", "evaluator"

# Ports below the kernel's ephemeral range are never handed out to outgoing
# connections, which makes a collision between choice and bind much rarer.
_FALLBACK_PORT_RANGE = (20000, 32767)


@dataclass(frozen=True)
class Role:
    """A task's place in the TensorFlow cluster."""

    job_name: str
    task_index: int

    def __str__(self) -> str:
        return f"{self.job_name}:{self.task_index}"


def assign_roles(num_workers: int, num_ps: int = 0, evaluator: bool = False) -> list[Role]:
    """Roles by rank: the training workers first, then the chief, parameter servers, evaluator.

    With ``num_ps == 0`` (all-reduce) there are ``num_workers`` workers and worker 0
    acts as chief, as ``MultiWorkerMirroredStrategy`` expects. With parameter servers
    the ``num_workers`` workers compute, a separate ``chief`` runs TensorFlow's
    ``ClusterCoordinator``, and ``num_ps`` ``ps`` tasks hold the variables. An
    optional ``evaluator`` comes last. Workers take the first ranks because they are
    the tasks that receive the training rows (``Layout``).
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1. Received: num_workers={num_workers}")
    if num_ps < 0:
        raise ValueError(f"num_ps must be >= 0. Received: num_ps={num_ps}")
    roles = [Role(WORKER, i) for i in range(num_workers)]
    if num_ps:
        roles += [Role(CHIEF, 0)] + [Role(PS, i) for i in range(num_ps)]
    if evaluator:
        roles.append(Role(EVALUATOR, 0))
    return roles


@dataclass(frozen=True)
class Layout:
    """Which ranks receive which rows of the input DataFrame.

    ``training_ranks`` share the training rows. Validation rows stay with them
    (each worker holds out its own) unless a task that does not train evaluates:
    the evaluator side-car, or else the parameter-server chief; that task,
    ``validation_rank``, then receives all validation rows. Every other rank gets none.
    """

    num_tasks: int
    training_ranks: tuple[int, ...]
    validation_rank: int | None

    @property
    def simple(self) -> bool:
        """Whether every task trains on an equal share (a plain repartition is enough)."""
        return self.validation_rank is None and len(self.training_ranks) == self.num_tasks


def layout(roles: Sequence[Role], has_validation: bool = False) -> Layout:
    """The data layout for ``roles`` (as ``assign_roles`` orders them)."""
    training = tuple(r for r, role in enumerate(roles) if role.job_name == WORKER)
    validation = None
    if has_validation:
        for job in (EVALUATOR, CHIEF):
            validation = next((r for r, role in enumerate(roles) if role.job_name == job), None)
            if validation is not None:
                break
    return Layout(len(roles), training, validation)


def build_cluster_spec(roles: Sequence[Role], addresses: Sequence[str]) -> dict[str, list[str]]:
    """The ``cluster`` part of TF_CONFIG: job name -> addresses ordered by task index.

    The evaluator is not part of the cluster spec (TensorFlow's convention).
    """
    if len(roles) != len(addresses):
        raise ValueError(f"{len(roles)} roles but {len(addresses)} addresses")
    spec: dict[str, list[str]] = {}
    for role, address in sorted(zip(roles, addresses), key=lambda ra: (ra[0].job_name,
                                                                        ra[0].task_index)):
        if role.job_name == EVALUATOR:
            continue
        spec.setdefault(role.job_name, []).append(address)
    return spec


def build_tf_config(cluster_spec: dict[str, list[str]], role: Role) -> str:
    """TF_CONFIG for one task, as the JSON string TensorFlow reads from the environment."""
    return json.dumps({"cluster": cluster_spec,
                       "task": {"type": role.job_name, "index": role.task_index}},
                      sort_keys=True)


def ephemeral_port_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's ephemeral port range, or Linux's default where it cannot be read."""
    try:
        with open(path) as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def candidate_range(ephemeral: tuple[int, int]) -> tuple[int, int]:
    """A port range that avoids the ephemeral range (below it when there is room)."""
    low, high = ephemeral
    if low > 11000:
        return 10000, low - 1
    if high < 64000:
        return high + 1, 65535
    return _FALLBACK_PORT_RANGE


def pick_port(rng: random.Random | None = None, attempts: int = 50,
              port_range: tuple[int, int] | None = None) -> int:
    """A TCP port that is free on all interfaces right now (TensorFlow binds 0.0.0.0).

    A port can still be taken between this choice and TensorFlow's bind; the
    launcher detects that (``is_port_conflict``) and forms the cluster again.
    """
    rng = rng or random.SystemRandom()
    low, high = port_range or candidate_range(ephemeral_port_range())
    for _ in range(attempts):
        port = rng.randint(low, high)
        if port_is_free(port):
            return port
    with socket.socket() as s:  # a crowded range: let the kernel choose
        s.bind(("", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Whether binding ``port`` on all interfaces succeeds now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


_CONFLICT_MARKERS = ("Could not start gRPC server", "Address already in use",
                     "Failed to add port to server")


def is_port_conflict(error_text: str) -> bool:
    """Whether a task's error means its TensorFlow server could not bind its port."""
    return any(marker in error_text for marker in _CONFLICT_MARKERS)
