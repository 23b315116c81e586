"""Profiles: which plugins run at which extension point, with typed arguments and weights.

```yaml
name: default
queue_sort: fifo
prefilter: [fit]
filter: [fit, node-selector, taints]
score:
  - {name: bestfit, weight: 1}
  - {name: stranding, weight: 1}
device_choice: most_used     # or least_used: which shared device a fractional task takes
tie_break: first             # or random (seeded): among nodes with the best score
```

Queues, quotas and the core's queueing features (all optional; see docs/policies.md):

```yaml
flavors: [gpu, gpu/A100, fpga]      # device flavors quotas may name; cpu and memory always exist
queues:                             # a tree by ``parent``; jobs name a leaf in ``Job.queue``
  - {name: org}
  - {name: team-a, parent: org, weight: 2, nominal: {gpu: 4, cpu: 32, memory: 256Gi},
     borrowing_limit: {gpu: 4}, lending_limit: {gpu: 2}}
gang: {hold: true, timeout_s: 300, backoff_s: 10, max_backoff_s: 600}
backfill: {enabled: true, default_runtime_s: 3600}
timeouts: {max_pending_s: 86400, max_runtime_s: 604800}
overcommit: {cpu: 1.5, memory: 1.0}  # best-effort jobs may use up to factor x capacity
guard: {interval_s: 5, memory_tolerance: 1.0, node_memory_threshold: 0.95, kill_best_effort: true}
speeds: {table: simulation_throughputs.json}  # job types' rates per device model
migration: {min_runtime_s: 600, defrag: {enabled: true, max_moves: 2}}  # moving running jobs
rounds: {policy: las, round_s: 360}  # round-based allocation of devices (docs/heterogeneity.md)
fairness: {units: normalized, reference_model: V100}  # fair shares in reference-device units
```

The queue tree (``QueueSpec``, quota amounts per flavor and their checks) is
``hetsched.framework.queues``; the ``speeds`` section is ``hetsched.framework.speeds``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from hetsched.framework.queues import QueueSpec, check_queue_tree, flavor_amount
from hetsched.framework.registry import Registry, installed
from hetsched.framework.speeds import SpeedsSpec, check_speeds
from hetsched.model.yamlio import safe_load

__all__ = [
    "MAX_OVERCOMMIT",
    "BackfillSpec",
    "DefragSpec",
    "FairnessSpec",
    "GangSpec",
    "GuardSpec",
    "MigrationSpec",
    "OvercommitSpec",
    "PluginRef",
    "ProfileError",
    "ProfileSpec",
    "QueueSpec",
    "RoundsSpec",
    "TimeoutSpec",
    "UpgradeSpec",
    "check_profile",
    "check_queues",
    "check_rounds",
    "flavor_amount",
    "load_profile",
    "parse_profile",
]


class GangSpec(BaseModel):
    """Gang holds (with ``hold: true``): a gang that can place only part of its minimum keeps
    that part, one gang at a time, at most
    ``timeout_s``, then releases it and waits ``backoff_s`` (doubling per timeout, at most
    ``max_backoff_s``) before it is tried again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=300.0, gt=0)
    backoff_s: float = Field(default=10.0, ge=0)
    max_backoff_s: float = Field(default=600.0, ge=0)
    #: hold partial gangs (off by default: a gang then binds only when its minimum fits at
    #: once and holds nothing in between)
    hold: bool = False


class BackfillSpec(BaseModel):
    """EASY backfill: the first job that cannot start gets a reservation; later jobs start
    only if they cannot delay it. Runtimes: the job's estimate, else its maximum runtime,
    else ``default_runtime_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    default_runtime_s: float = Field(default=3600.0, gt=0)


class TimeoutSpec(BaseModel):
    """``max_pending_s``: a job waiting longer is rejected with its explanation.
    ``max_runtime_s``: the default for jobs without their own ``max_runtime_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_pending_s: float | None = Field(default=None, gt=0)
    max_runtime_s: float | None = Field(default=None, gt=0)


#: the hard cap on oversubscription: no node is ever promised more than this x its capacity
MAX_OVERCOMMIT = 4.0


class OvercommitSpec(BaseModel):
    """Explicit oversubscription for best-effort jobs, per resource: a best-effort task fits
    a node while everything allocated there stays within factor x capacity. Guaranteed tasks
    never see more than the capacity itself, and devices are never oversubscribed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: float = Field(default=1.0, ge=1.0, le=MAX_OVERCOMMIT)
    memory: float = Field(default=1.0, ge=1.0, le=MAX_OVERCOMMIT)


class GuardSpec(BaseModel):
    """The overcommit guard (the service measures what tasks use every ``interval_s``).

    A task whose memory (its process tree's resident memory plus GPU memory) exceeds its
    request x ``memory_tolerance`` raises an alert, as does a node whose memory or CPU use
    passes its threshold (a fraction of the whole machine). With ``kill_best_effort`` the
    offending best-effort task is killed (on a node alert: the best-effort task that uses
    the most memory); guaranteed tasks are never killed by the guard."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    interval_s: float = Field(default=5.0, gt=0)
    memory_tolerance: float = Field(default=1.0, ge=1.0)
    node_memory_threshold: float = Field(default=0.95, gt=0, le=1)
    node_cpu_threshold: float | None = Field(default=None, gt=0, le=1)
    kill_best_effort: bool = False


class DefragSpec(BaseModel):
    """Defragmentation: when a pending job fits nowhere but would fit if at most
    ``max_moves`` checkpointable running jobs moved, they move (Migrate) and the room is
    kept for it. At most ``max_moved_fraction`` of the running jobs (at least
    ``min_budget``) move in one cycle, and a plan is made at most every ``min_interval_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    max_moves: int = Field(default=2, ge=1, le=16)
    max_moved_fraction: float = Field(default=0.01, gt=0, le=1)
    min_budget: int = Field(default=1, ge=0)
    min_interval_s: float = Field(default=60.0, ge=0)
    #: candidate nodes tried per task of the pending job
    max_nodes: int = Field(default=16, ge=1, le=1024)


class UpgradeSpec(BaseModel):
    """Upgrades: when capacity frees, a checkpointable running job moves to a device model
    on which it runs at least ``min_speedup`` times faster (the speed model), at most
    ``max_moves`` jobs per cycle. ``hetsched.scheduler.migration.upgrade`` is the hook a
    policy calls for one job."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    min_speedup: float = Field(default=1.25, gt=1)
    max_moves: int = Field(default=1, ge=1)


class ConsolidateSpec(BaseModel):
    """Consolidation: when capacity frees and nothing waits, a checkpointable running job
    that asked for a ``preferred`` network level but spans several of its domains moves
    into one domain of that level that holds it now, at most ``max_moves`` per cycle."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    max_moves: int = Field(default=1, ge=1)


class MigrationSpec(BaseModel):
    """Moving running jobs (docs/checkpointing.md). Only checkpointable, preemptible jobs
    move; a job younger than ``min_runtime_s`` in its current run never does (a move
    starts a new run, so no job moves twice within it); the moved job gets its checkpoint
    notice, then ``grace_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_runtime_s: float = Field(default=600.0, ge=0)
    grace_s: float = Field(default=30.0, ge=0)
    defrag: DefragSpec = DefragSpec()
    upgrade: UpgradeSpec = UpgradeSpec()
    consolidate: ConsolidateSpec = ConsolidateSpec()


class RoundsSpec(BaseModel):
    """Round-based allocation (docs/heterogeneity.md, "Round policies in the core"): every
    ``round_s`` the core solves ``policy`` (``hetsched.rounds``) over the active jobs that
    ask for whole devices of ``device_class`` and realises the round's share with Bind,
    Preempt and Migrate. ``alpha``: the knob of ``fair-throughput`` and ``fair-srtf``;
    ``catchup_floor``: ``fair-catchup``'s, the fraction of its ``las`` share every job keeps.
    A new allocation is solved whenever the set of jobs changed (``solve_on_change``, the
    default; off: only once ``reset_s`` passed since the shares were last reset, Gavel's
    simulator's rule, where new jobs meanwhile get only what the others leave); the
    shares' history is reset every ``reset_s``. ``min_runtime_s`` (default half a round):
    a job younger than this in its current run keeps its devices. ``arrivals``: ``wait``
    (a job waits for the next round boundary, as in Gavel) or ``idle`` (between
    boundaries, once the round's choices have started, waiting jobs may start on devices
    nobody uses)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    policy: str = "las"
    round_s: float = Field(default=360.0, gt=0, allow_inf_nan=False)
    alpha: float = Field(default=0.5, ge=0, le=1)
    catchup_floor: float = Field(default=1.0, ge=0, le=1)
    reset_s: float = Field(default=1920.0, ge=0, allow_inf_nan=False)
    solve_on_change: bool = True
    min_runtime_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    arrivals: Literal["wait", "idle"] = "wait"
    device_class: str = Field(default="gpu", min_length=1)
    grace_s: float = Field(default=30.0, ge=0, allow_inf_nan=False)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        # imported here: the solvers (scipy) load only for profiles that use rounds
        from hetsched.rounds.policies import policy_names

        names = policy_names()
        if value not in names:
            raise ValueError(f"unknown round policy {value!r} (known: {', '.join(names)})")
        return value

    @property
    def min_runtime(self) -> float:
        return self.round_s / 2 if self.min_runtime_s is None else self.min_runtime_s


class FairnessSpec(BaseModel):
    """The units DRF, fair share and quotas count device time in (docs/policies.md).

    ``devices`` (the default): a device share is a device share, whatever its model.
    ``normalized``: a job's share of a device counts in reference-device units, its rate on
    the device's model over its rate on ``reference_model`` (from its speed model), so an
    hour on a device three times faster for the job costs three reference hours. Only a
    device class flavor (``gpu``) is normalized; ``class/model`` flavors (``gpu/A100``)
    keep counting devices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    units: Literal["devices", "normalized"] = "devices"
    #: the device model whose device time is the unit (matched case-insensitively)
    reference_model: str | None = Field(default=None, min_length=1, max_length=253)

    @model_validator(mode="after")
    def _reference(self) -> FairnessSpec:
        if self.units == "normalized" and self.reference_model is None:
            raise ValueError(
                "reference_model: required with units: normalized (the device model one "
                "unit of device time is measured on, e.g. V100)"
            )
        if self.reference_model is not None and not self.reference_model.strip():
            raise ValueError("reference_model: must name a device model, got blank")
        return self

    @property
    def normalized(self) -> bool:
        return self.units == "normalized"


class ProfileError(ValueError):
    """A profile that does not load; the message lists every problem with its field path."""


class PluginRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    weight: float = Field(default=1.0, ge=0)
    args: dict[str, Any] = Field(default_factory=dict)


def _ref(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class ProfileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    queue_sort: PluginRef = PluginRef(name="fifo")
    prefilter: list[PluginRef] = Field(default_factory=lambda: [PluginRef(name="fit")])
    filter: list[PluginRef] = Field(
        default_factory=lambda: [PluginRef(name=n) for n in ("fit", "node-selector", "taints")]
    )
    #: bestfit packs; stranding keeps accelerators fed and CPU-only work off their nodes
    score: list[PluginRef] = Field(
        default_factory=lambda: [PluginRef(name="bestfit"), PluginRef(name="stranding")]
    )
    reserve: list[PluginRef] = Field(default_factory=list)
    permit: list[PluginRef] = Field(default_factory=list)
    post_filter: list[PluginRef] = Field(default_factory=list)
    bind: list[PluginRef] = Field(default_factory=list)
    device_choice: Literal["most_used", "least_used"] = "most_used"
    tie_break: Literal["first", "random"] = "first"
    flavors: list[str] = Field(default_factory=list)
    queues: list[QueueSpec] = Field(default_factory=list)
    gang: GangSpec = GangSpec()
    backfill: BackfillSpec = BackfillSpec()
    timeouts: TimeoutSpec = TimeoutSpec()
    overcommit: OvercommitSpec = OvercommitSpec()
    guard: GuardSpec = GuardSpec()
    #: the throughput table job types resolve in (framework/speeds.py)
    speeds: SpeedsSpec = SpeedsSpec()
    #: moving running jobs: defragmentation and upgrades
    migration: MigrationSpec = MigrationSpec()
    #: round-based allocation policies (None: off)
    rounds: RoundsSpec | None = None
    #: the units of fair shares and quotas: devices, or reference-device units
    fairness: FairnessSpec = FairnessSpec()

    @field_validator("queue_sort", mode="before")
    @classmethod
    def _one(cls, value: Any) -> Any:
        return _ref(value)

    @field_validator(
        "prefilter", "filter", "score", "reserve", "permit", "post_filter", "bind", mode="before"
    )
    @classmethod
    def _many(cls, value: Any) -> Any:
        return [_ref(v) for v in value] if isinstance(value, list) else value

    def refs(self) -> list[tuple[str, int | None, PluginRef]]:
        """Every plugin reference with its point and position, in declaration order."""
        out: list[tuple[str, int | None, PluginRef]] = [("queue_sort", None, self.queue_sort)]
        for point in ("prefilter", "filter", "score", "reserve", "permit", "post_filter", "bind"):
            out += [(point, i, ref) for i, ref in enumerate(getattr(self, point))]
        return out


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def check_plugins(spec: ProfileSpec, registry: Registry | None = None) -> list[str]:
    """Every unknown plugin, plugin at the wrong point and bad argument, with field paths
    (against ``registry``, by default the installed plugins)."""
    plugins = registry or installed()
    errors: list[str] = []
    for point, index, ref in spec.refs():
        where = point if index is None else f"{point}[{index}]"
        try:
            plugin = plugins.lookup(ref.name)
        except KeyError as exc:
            errors.append(f"{where}.name: {exc}")
            continue
        if point not in plugin.points:
            offered = ", ".join(sorted(plugin.points)) or "none"
            errors.append(
                f"{where}.name: plugin {ref.name!r} has no {point} point (it has {offered})"
            )
        if plugin.args_model is None:
            if ref.args:
                errors.append(f"{where}.args: plugin {ref.name!r} takes no arguments")
            continue
        try:
            plugin.args_model.model_validate(ref.args)
        except ValidationError as exc:
            for err in exc.errors():
                errors.append(f"{where}.args.{_path(tuple(err['loc']))}: {err['msg']}")
    return errors


def check_queues(spec: ProfileSpec) -> list[str]:
    """Every problem of the profile's queue tree and its quotas, with field paths (see
    :func:`~hetsched.framework.queues.check_queue_tree`)."""
    return check_queue_tree(spec.flavors, spec.queues)


def check_rounds(spec: ProfileSpec) -> list[str]:
    """What a ``rounds`` section cannot be combined with: queue quotas (a round policy
    divides the devices itself) and gang holds (a round places a job whole or not at all)."""
    if spec.rounds is None:
        return []
    errors: list[str] = []
    for index, queue in enumerate(spec.queues):
        if queue.nominal or queue.borrowing_limit or queue.lending_limit:
            errors.append(
                f"queues[{index}]: quotas do not apply with 'rounds' (the round policy "
                "divides the devices): remove nominal, borrowing_limit and lending_limit, "
                "or the rounds section"
            )
    if spec.gang.hold:
        errors.append("gang.hold: must be false with 'rounds' (a round starts a job whole)")
    return errors


def check_profile(spec: ProfileSpec, registry: Registry | None = None) -> list[str]:
    """Every problem of a parsed profile (plugins, queue tree, quotas, rounds) with field
    paths."""
    return check_plugins(spec, registry) + check_queues(spec) + check_rounds(spec)


def parse_profile(
    data: Any, base: Path | None = None, *, registry: Registry | None = None
) -> ProfileSpec:
    """Validate a profile document; raises ProfileError listing every problem.

    ``base`` is the folder relative file names in the profile (``speeds.table``) are in;
    the returned spec names them by absolute path. Plugins are looked up in ``registry``,
    by default the installed ones.
    """
    try:
        spec = ProfileSpec.model_validate(data or {})
    except ValidationError as exc:
        raise ProfileError(
            "\n".join(
                f"{_path(tuple(e['loc']))}: {str(e['msg']).removeprefix('Value error, ')}"
                for e in exc.errors()
            )
        ) from None
    errors = check_profile(spec, registry) + check_speeds(spec.speeds, base)
    if errors:
        raise ProfileError("\n".join(errors))
    table = spec.speeds.table
    if table is not None and base is not None and not Path(table).is_absolute():
        absolute = str((base / table).resolve())
        spec.speeds = spec.speeds.model_copy(update={"table": absolute})
    return spec


def load_profile(path: str | Path | None) -> ProfileSpec:
    if path is None:
        return parse_profile({})
    with open(path, "rb") as handle:
        return parse_profile(safe_load(handle.read()), Path(path).parent)
