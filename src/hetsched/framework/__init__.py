"""Extension-point protocols, Status, cycle context, the scheduler handle plugins see, the
plugin registry, profiles, runtime."""

from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import DecayedView, QueuedJob, SchedulerHandle, UsageView
from hetsched.framework.interfaces import (
    BindPlugin,
    ChoosesDevices,
    FilterPlugin,
    LanedQueueSort,
    NormalizesScores,
    PermitPlugin,
    Plugin,
    PostFilterPlugin,
    PreFilterPlugin,
    QueueSortPlugin,
    Rejection,
    ReservePlugin,
    ScorePlugin,
)
from hetsched.framework.profile import (
    PluginRef,
    ProfileError,
    ProfileSpec,
    load_profile,
    parse_profile,
)
from hetsched.framework.registry import PluginSpec, Registry, installed, register
from hetsched.framework.runtime import Framework, NodeRejections, SortFailure
from hetsched.framework.status import Code, PluginError, Status

__all__ = [
    "BindPlugin",
    "ChoosesDevices",
    "Code",
    "CycleContext",
    "DecayedView",
    "FilterPlugin",
    "Framework",
    "LanedQueueSort",
    "NodeRejections",
    "NormalizesScores",
    "PermitPlugin",
    "Plugin",
    "PluginError",
    "PluginRef",
    "PluginSpec",
    "PostFilterPlugin",
    "PreFilterPlugin",
    "ProfileError",
    "ProfileSpec",
    "QueueSortPlugin",
    "QueuedJob",
    "Registry",
    "Rejection",
    "ReservePlugin",
    "SchedulerHandle",
    "ScorePlugin",
    "SortFailure",
    "Status",
    "UsageView",
    "installed",
    "load_profile",
    "parse_profile",
    "register",
]
