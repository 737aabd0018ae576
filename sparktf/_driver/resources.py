"""What the tasks of a training stage ask Spark for (a task ResourceProfile, GPUs), and the
checks of the numbers given for them and for the stage's time limits."""

from __future__ import annotations

import dataclasses
import math
import numbers

from sparktf._driver import versions
from sparktf.errors import InvalidInputError


@dataclasses.dataclass(frozen=True)
class TaskResources:
    """What each task of the training stage asks Spark for (stage-level scheduling)."""

    cpus: int | None = None
    gpus: float | None = None

    @classmethod
    def checked(cls, cpus, gpus) -> "TaskResources | None":
        """None when nothing is asked; refuses bad amounts with the value received."""
        cpus = None if cpus is None else task_cpus(cpus)
        gpus = None if gpus is None else task_gpus(gpus)
        return None if cpus is None and gpus is None else cls(cpus, gpus)

    def profile(self):
        """The pyspark ``ResourceProfile`` of the training stage."""
        from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

        requests = TaskResourceRequests()
        if self.cpus is not None:
            requests.cpus(self.cpus)
        if self.gpus is not None:
            requests.resource("gpu", float(self.gpus))
        return ResourceProfileBuilder().require(requests).build

    def slots(self, conf: dict[str, str], default_slots: int) -> int:
        """Concurrent tasks of this profile, from the default profile's slots."""
        return self.scale(default_slots, int(conf.get("spark.task.cpus", "1")))

    def scale(self, slots: int, default_cpus: int) -> int:
        """``slots`` tasks of ``default_cpus`` CPUs each, as tasks of this profile."""
        return slots if self.cpus is None else slots * default_cpus // self.cpus

    def check_stage(self, on_frame: bool) -> None:
        """Refuses a profile the installed pyspark cannot put on the training stage:
        ``on_frame`` when the stage is a DataFrame's (``mapInArrow``), which takes one from
        pyspark 4.0 (an RDD's barrier stage takes one from 3.1)."""
        if on_frame:
            versions.require(
                versions.FRAME_STAGE_PROFILE,
                f"taskCpus={self.cpus}, taskGpus={self.gpus} (a ResourceProfile on the "
                "training stage, a DataFrame's barrier mapInArrow)",
                "unset taskCpus and taskGpus and give every task of the application that "
                "much with spark.task.cpus and spark.task.resource.gpu.amount, or upgrade "
                "pyspark")

    def check(self, conf: dict[str, str]) -> None:
        """Refuses GPU requests that no executor can satisfy, before the stage starts."""
        if self.gpus and not conf.get("spark.executor.resource.gpu.amount"):
            raise InvalidInputError(
                f"taskGpus={self.gpus} asks for GPUs, but the executors have none: set "
                "spark.executor.resource.gpu.amount and "
                "spark.executor.resource.gpu.discoveryScript when creating the session.")


def positive_number(name: str, value, what: str = "a positive number") -> float:
    """``value`` as a float when it is a finite number > 0, else ``InvalidInputError``
    naming ``name``: NaN and infinity are refused (``what`` says what is expected)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(value) or value <= 0:
        raise InvalidInputError(f"{name} must be {what}, finite (not NaN or infinity). "
                                f"Received: {name}={value!r}")
    return float(value)


def task_cpus(value) -> int:
    """``taskCpus`` checked: a whole number of CPUs, at least 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value < 1 or value != int(value):
        raise InvalidInputError(f"taskCpus must be an integer >= 1 or None. "
                                f"Received: taskCpus={value!r}")
    return int(value)


def task_gpus(value) -> float:
    """``taskGpus`` checked as Spark takes GPU amounts: a fraction in (0, 1] (tasks share a
    GPU) or a whole number of GPUs."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value <= 0 or (value > 1 and value != int(value)):
        raise InvalidInputError(f"taskGpus must be a fraction in (0, 1] or a whole number "
                                f"of GPUs, or None. Received: taskGpus={value!r}")
    return float(value)


def gpus_scheduled(conf: dict[str, str]) -> bool:
    amount = conf.get("spark.task.resource.gpu.amount", None)
    return bool(amount) and float(amount) > 0


def check_gpu_conf(conf: dict[str, str]) -> None:
    if not gpus_scheduled(conf):
        raise InvalidInputError(
            "useGpu=True, but Spark is not scheduling GPUs: spark.task.resource.gpu.amount is "
            "not set. Set spark.executor.resource.gpu.amount, spark.task.resource.gpu.amount "
            "and a discovery script, or use useGpu='auto' to fall back to CPU.")
