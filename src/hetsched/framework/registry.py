"""Plugins registered by name, with typed arguments.

A plugin class declares its name and argument model with :func:`register`, which marks the
class and changes nothing else. Which plugins exist is said in one place per distribution:
the ``hetsched.plugins`` entry-point group, whose entries name functions that return plugin
classes. hetsched's own are listed in :mod:`hetsched.builtins` (the entry ``builtins`` in
``pyproject.toml``); another package adds its plugins the same way. The framework never
imports a plugin module itself.

Profiles enable plugins by name; an unknown name or an argument that fails its model is an
error at load, never mid-cycle. Argument models say ``defer_build=True``: every plugin is
imported to be registered, and pydantic then builds only the models a profile uses. A
test (or an embedding program) may build its own :class:`Registry` and hand it to
``parse_profile`` and ``Framework``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import TypeVar

from pydantic import BaseModel

from hetsched.framework.handle import SchedulerHandle

__all__ = [
    "ENTRY_POINTS",
    "POINT_METHODS",
    "PluginSpec",
    "Registry",
    "UnknownPlugin",
    "installed",
    "register",
    "spec_of",
]

#: the entry-point group plugin providers are listed under
ENTRY_POINTS = "hetsched.plugins"

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

#: what builds a plugin: ``factory(args, handle)``; args is an instance of the plugin's
#: argument model (or None without one), handle what the core lets plugins read (None when
#: a Framework runs without a core: placement alone, the extender's filters)
Factory = Callable[[BaseModel | None, SchedulerHandle | None], object]


class UnknownPlugin(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class PluginSpec:
    name: str
    factory: Factory
    args_model: type[BaseModel] | None
    points: frozenset[str]
    doc: str


_C = TypeVar("_C", bound=type)

_SPEC = "__hetsched_plugin__"


def register(name: str, args: type[BaseModel] | None = None) -> Callable[[_C], _C]:
    """Class decorator: the plugin's name in profiles and its argument model.

    The class is constructed as ``cls(args, handle)``. Marking a class does not make it
    available: a provider listed under the ``hetsched.plugins`` entry points (or a Registry
    built by hand) must name it.
    """

    def decorate(cls: _C) -> _C:
        points = frozenset(p for p, method in POINT_METHODS.items() if hasattr(cls, method))
        doc = (cls.__doc__ or "").strip().splitlines()
        spec = PluginSpec(name, cls, args, points, doc[0] if doc else "")
        setattr(cls, _SPEC, spec)
        setattr(cls, "name", name)  # noqa: B010 - the class itself may not declare it
        return cls

    return decorate


def spec_of(cls: type) -> PluginSpec:
    """The spec a class was marked with by :func:`register`; TypeError if it was not."""
    spec = getattr(cls, _SPEC, None)
    if not isinstance(spec, PluginSpec):
        raise TypeError(f"{cls.__qualname__} is not a plugin (decorate it with @register)")
    return spec


class Registry:
    """Plugins by name."""

    def __init__(self, plugins: Iterable[type] = ()) -> None:
        self._specs: dict[str, PluginSpec] = {}
        self._classes: dict[str, type] = {}
        for cls in plugins:
            self.add(cls)

    def add(self, cls: type) -> PluginSpec:
        spec = spec_of(cls)
        known = self._classes.get(spec.name)
        if known is not None and known is not cls:
            raise ValueError(f"plugin {spec.name!r} is registered twice")
        self._specs[spec.name] = spec
        self._classes[spec.name] = cls
        return spec

    def lookup(self, name: str) -> PluginSpec:
        try:
            return self._specs[name]
        except KeyError:
            if not self._specs:
                raise UnknownPlugin(
                    f"unknown plugin {name!r}: no plugins are installed (the package's "
                    f"{ENTRY_POINTS!r} entry points are missing: reinstall it, e.g. make setup)"
                ) from None
            known = ", ".join(sorted(self._specs))
            raise UnknownPlugin(f"unknown plugin {name!r} (known: {known})") from None

    def names(self) -> list[str]:
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def with_plugins(self, *classes: type) -> Registry:
        """A copy with more plugins (for tests and embedding programs)."""
        return Registry([*self._classes.values(), *classes])


@cache
def installed() -> Registry:
    """Every plugin the installed distributions provide (the ``hetsched.plugins`` entry
    points), loaded once."""
    registry = Registry()
    for entry in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        provider = entry.load()
        for cls in provider():
            registry.add(cls)
    return registry
