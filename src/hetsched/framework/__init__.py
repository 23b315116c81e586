"""Extension-point protocols, Status, cycle context, plugin registry, profiles, runtime."""

from hetsched.framework.cycle import CycleContext
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
from hetsched.framework.registry import REGISTRY, PluginSpec, register
from hetsched.framework.runtime import Framework, NodeRejections
from hetsched.framework.status import Code, Status

__all__ = [
    "REGISTRY",
    "BindPlugin",
    "ChoosesDevices",
    "Code",
    "CycleContext",
    "FilterPlugin",
    "Framework",
    "LanedQueueSort",
    "NodeRejections",
    "NormalizesScores",
    "PermitPlugin",
    "Plugin",
    "PluginRef",
    "PluginSpec",
    "PostFilterPlugin",
    "PreFilterPlugin",
    "ProfileError",
    "ProfileSpec",
    "QueueSortPlugin",
    "Rejection",
    "ReservePlugin",
    "ScorePlugin",
    "Status",
    "load_profile",
    "parse_profile",
    "register",
]
