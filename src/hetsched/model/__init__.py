"""Quantities, devices, nodes, jobs, selectors, lifecycle; ``specs`` holds the I/O models."""

from hetsched.model.device import SHARE_UNITS, AttrValue, Device, Health, Node, Taint, TaintEffect
from hetsched.model.job import (
    DeviceChoice,
    DeviceFailurePolicy,
    DeviceRequest,
    Job,
    RestartPolicy,
    TaskRequest,
    Toleration,
)
from hetsched.model.lifecycle import TERMINAL, InvalidTransition, JobState, Transition
from hetsched.model.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)
from hetsched.model.selector import SelectorError

__all__ = [
    "SHARE_UNITS",
    "TERMINAL",
    "AttrValue",
    "Device",
    "DeviceChoice",
    "DeviceFailurePolicy",
    "DeviceRequest",
    "Health",
    "InvalidTransition",
    "Job",
    "JobState",
    "Node",
    "QuantityError",
    "RestartPolicy",
    "SelectorError",
    "Taint",
    "TaintEffect",
    "TaskRequest",
    "Toleration",
    "Transition",
    "format_cpu",
    "format_memory",
    "parse_cpu",
    "parse_memory",
]
