"""Replay a workload on a cluster under one or several policies and collect the report.

A policy is a profile: either a profile file, or a built-in name that maps to the default
profile with that queue sort (``fifo``, ``priority``, ``drf``, ``fairshare``). Only names
whose queue-sort plugin is registered at run time are offered, so the list grows as
policies land without this module changing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsched.framework.profile import ProfileError, ProfileSpec, load_profile, parse_profile
from hetsched.framework.registry import installed
from hetsched.model.device import Node
from hetsched.sim.engine import (
    ClusterChange,
    CoreFactory,
    EngineConfig,
    Progress,
    SimResult,
    Simulator,
)
from hetsched.sim.metrics import Summary, job_rows, summarize
from hetsched.sim.workload import Workload

__all__ = [
    "BUILTIN_POLICIES",
    "Policy",
    "Replay",
    "available_policies",
    "policy_from_name",
    "policy_from_profile",
    "replay",
]

#: built-in policy names, in the order a comparison lists them
BUILTIN_POLICIES: tuple[str, ...] = ("fifo", "priority", "drf", "fairshare")


@dataclass(frozen=True, slots=True)
class Policy:
    """A named profile to replay under."""

    name: str
    profile: ProfileSpec


def _has_queue_sort(name: str) -> bool:
    plugins = installed()
    return name in plugins and "queue_sort" in plugins.lookup(name).points


def available_policies() -> list[str]:
    """Built-in policy names whose queue-sort plugin is installed."""
    return [n for n in BUILTIN_POLICIES if _has_queue_sort(n)]


def policy_from_name(name: str) -> Policy:
    """The default profile with queue sort ``name``; ValueError if it is not registered."""
    if name not in available_policies():
        have = ", ".join(available_policies())
        raise ValueError(f"unknown policy {name!r} (available now: {have})")
    return Policy(name, parse_profile({"name": name, "queue_sort": name}))


def policy_from_profile(path: str | Path) -> Policy:
    """The profile in ``path``; ProfileError lines are prefixed with the file."""
    try:
        profile = load_profile(path)
    except ProfileError as exc:
        raise ProfileError("\n".join(f"{path}: {line}" for line in str(exc).splitlines())) from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
    label = profile.name if profile.name != "default" else Path(path).stem
    return Policy(label, profile)


@dataclass(frozen=True, slots=True)
class Replay:
    """One replay: the policy, the raw result and its summary."""

    policy: str
    seed: int
    result: SimResult
    summary: Summary
    wall_s: float

    def to_dict(self, jobs: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "seed": self.seed,
            "summary": self.summary.to_dict(),
        }
        if jobs:
            out["jobs"] = list(job_rows(self.result.jobs))
        return out


def replay(
    nodes: Sequence[Node],
    workload: Workload,
    policy: Policy | None = None,
    seed: int = 0,
    config: EngineConfig | None = None,
    changes: Sequence[ClusterChange] = (),
    progress: Progress | None = None,
    core: CoreFactory | None = None,
) -> Replay:
    """Replay ``workload`` on ``nodes`` under ``policy`` (FIFO by default)."""
    import time

    chosen = policy or Policy("fifo", ProfileSpec())
    extra: dict[str, Any] = {} if core is None else {"core": core}
    simulator = Simulator(
        nodes,
        workload,
        chosen.profile,
        seed,
        config,
        changes=changes,
        progress=progress,
        **extra,
    )
    started = time.perf_counter()
    result = simulator.run()
    wall = time.perf_counter() - started
    return Replay(chosen.name, seed, result, summarize(result), wall)
