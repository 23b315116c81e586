"""Spec files at the boundary: pydantic models with field-path errors, turned into the
frozen dataclasses the core uses. The core never sees an unvalidated value.

The models are the one statement of the rules, one module per kind of file:
:mod:`~hetsched.model.cluster_spec` (nodes), :mod:`~hetsched.model.job_spec` (jobs), with
the value notations (durations, work, speed maps, quantities) in
:mod:`~hetsched.model.spec_values` and what every spec shares (the error, the strict base,
reading YAML) in :mod:`~hetsched.model.spec_common`. This module is the public face.
"""

from __future__ import annotations

from pathlib import Path

from hetsched.model.cluster_spec import (
    ClusterSpec,
    DeviceGroupSpec,
    NodeSpec,
    TaintSpec,
    number_devices,
    parse_cluster,
    validate_cluster,
)
from hetsched.model.device import Node
from hetsched.model.job import Job
from hetsched.model.job_spec import (
    CheckpointSpec,
    DeviceChoiceSpec,
    DeviceRequestSpec,
    JobSpec,
    JobsSpec,
    ResourcesSpec,
    TolerationSpec,
    parse_jobs,
    validate_jobs,
)
from hetsched.model.spec_common import SpecError, Strict, format_errors, load_yaml

# the strict base under its earlier name (the service's, k8s's and the agent's specs use it)
from hetsched.model.spec_common import Strict as _Strict
from hetsched.model.spec_values import build_speed, parse_duration, parse_speed_map, parse_work

__all__ = [
    "CheckpointSpec",
    "ClusterSpec",
    "DeviceChoiceSpec",
    "DeviceGroupSpec",
    "DeviceRequestSpec",
    "JobSpec",
    "JobsSpec",
    "NodeSpec",
    "ResourcesSpec",
    "SpecError",
    "Strict",
    "TaintSpec",
    "TolerationSpec",
    "_Strict",
    "build_speed",
    "format_errors",
    "load_cluster",
    "load_cluster_levels",
    "load_jobs",
    "load_yaml",
    "number_devices",
    "parse_cluster",
    "parse_duration",
    "parse_jobs",
    "parse_speed_map",
    "parse_work",
    "validate_cluster",
    "validate_jobs",
]


def load_cluster(path: str | Path) -> list[Node]:
    return parse_cluster(load_yaml(path), str(path))


def load_cluster_levels(path: str | Path) -> tuple[list[Node], tuple[str, ...]]:
    """The nodes of a cluster file and its network levels (empty without ``topology``)."""
    spec = validate_cluster(load_yaml(path), str(path))
    return spec.build(), spec.levels()


def load_jobs(path: str | Path) -> list[Job]:
    return parse_jobs(load_yaml(path), str(path))
