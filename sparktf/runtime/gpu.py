"""Which GPUs a task may see: Spark's assignment, mapped through the cluster manager's view."""

from __future__ import annotations

from typing import Sequence

from sparktf.errors import InvalidInputError

HIDE_ALL = ""  # CUDA_VISIBLE_DEVICES value that hides every GPU


def assigned(context) -> list[str]:
    """The GPU addresses Spark's scheduler gave the task of ``context`` (a pyspark
    ``TaskContext`` or ``BarrierTaskContext``; None outside a task)."""
    resource = context.resources().get("gpu") if context is not None else None
    return list(resource.addresses) if resource is not None else []


def use_gpu_value(value) -> str | bool:
    """``useGpu`` in its one inside form: ``"auto"``, ``True`` or ``False``.

    Accepts those and the strings ``"true"``, ``"false"``, ``"auto"`` in any case (as
    SQL, JSON and command lines give them); refuses anything else.
    """
    if isinstance(value, str):
        value = {"true": True, "false": False, "auto": "auto"}.get(value.strip().lower(), value)
    if not (value is True or value is False or value == "auto"):
        raise InvalidInputError("useGpu must be 'auto', True or False. "
                                f"Received: useGpu={value!r}")
    return value


class GpuAssignmentError(RuntimeError):
    """``useGpu=True`` but Spark assigned this task no GPU."""


def visible_devices(assigned: Sequence[str], use_gpu: str | bool,
                    inherited: str | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a task, from the GPU addresses Spark assigned it.

    ``inherited`` is the executor's own CUDA_VISIBLE_DEVICES (set by YARN, k8s or a
    standalone worker): Spark's addresses then index into that list. Without an
    assignment the task runs on CPU (all GPUs hidden), so tasks never share a GPU
    by accident; ``use_gpu=True`` makes that an error instead.
    """
    use_gpu = use_gpu_value(use_gpu)
    if use_gpu is False:
        return HIDE_ALL
    if not assigned:
        if use_gpu is True:
            raise GpuAssignmentError(
                "useGpu=True but Spark assigned this task no GPU. Configure GPU scheduling, "
                "e.g. spark.executor.resource.gpu.amount=1, spark.task.resource.gpu.amount=1 "
                "and a spark.executor.resource.gpu.discoveryScript, or set useGpu='auto'.")
        return HIDE_ALL
    if inherited:
        pool = [d.strip() for d in inherited.split(",") if d.strip()]
        mapped = []
        for address in assigned:
            index = int(address)
            if not 0 <= index < len(pool):
                raise GpuAssignmentError(
                    f"Spark assigned GPU address {address}, but the executor only sees "
                    f"CUDA_VISIBLE_DEVICES={inherited!r}. Check the discovery script.")
            mapped.append(pool[index])
        return ",".join(mapped)
    return ",".join(str(a).strip() for a in assigned)
