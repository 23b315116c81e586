"""Plugins registered by name, with typed arguments.

A plugin module declares itself with :func:`register`; profiles enable plugins by name.
An unknown name or an argument that fails its model is an error at load, never mid-cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["POINT_METHODS", "REGISTRY", "PluginSpec", "UnknownPlugin", "register"]

#: extension point -> the method that marks a plugin as implementing it
POINT_METHODS: Mapping[str, str] = {
    "queue_sort": "sort_key",
    "prefilter": "prefilter",
    "filter": "filter",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "post_filter": "post_filter",
    "bind": "bind",
}


class UnknownPlugin(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class PluginSpec:
    name: str
    #: ``factory(args, handle)``: args is an instance of ``args_model`` (or None without one);
    #: handle is what the driver hands plugins that need more than the cycle (the scheduler).
    factory: Callable[[BaseModel | None, Any], Any]
    args_model: type[BaseModel] | None
    points: frozenset[str]
    doc: str


REGISTRY: dict[str, PluginSpec] = {}

_C = TypeVar("_C", bound=type)


def register(name: str, args: type[BaseModel] | None = None) -> Callable[[_C], _C]:
    """Class decorator: make the plugin available to profiles under ``name``.

    The class is constructed as ``cls(args, handle)``.
    """

    def decorate(cls: _C) -> _C:
        if name in REGISTRY:
            raise ValueError(f"plugin {name!r} is registered twice")
        points = frozenset(p for p, method in POINT_METHODS.items() if hasattr(cls, method))
        doc = (cls.__doc__ or "").strip().splitlines()
        REGISTRY[name] = PluginSpec(name, cls, args, points, doc[0] if doc else "")
        setattr(cls, "name", name)  # noqa: B010 - the class itself may not declare it
        return cls

    return decorate


def lookup(name: str) -> PluginSpec:
    _load_builtins()
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UnknownPlugin(f"unknown plugin {name!r} (known: {known})") from None


def _load_builtins() -> None:
    # The built-in plugins register themselves on import; importing here keeps the
    # framework free of a static dependency on them.
    import hetsched.plugins
    import hetsched.queueing
    import hetsched.scheduler.preemption  # noqa: F401 - the core's post-filter
