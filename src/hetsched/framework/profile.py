"""Profiles: which plugins run at which extension point, with typed arguments and weights.

```yaml
name: default
queue_sort: fifo
prefilter: [fit]
filter: [fit, node-selector, taints]
score:
  - {name: bestfit, weight: 1}
device_choice: most_used     # or least_used: which shared device a fractional task takes
tie_break: first             # or random (seeded): among nodes with the best score
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hetsched.framework.registry import lookup

__all__ = ["PluginRef", "ProfileError", "ProfileSpec", "load_profile", "parse_profile"]


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
    score: list[PluginRef] = Field(default_factory=lambda: [PluginRef(name="bestfit")])
    reserve: list[PluginRef] = Field(default_factory=list)
    permit: list[PluginRef] = Field(default_factory=list)
    post_filter: list[PluginRef] = Field(default_factory=list)
    bind: list[PluginRef] = Field(default_factory=list)
    device_choice: Literal["most_used", "least_used"] = "most_used"
    tie_break: Literal["first", "random"] = "first"

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


def check_plugins(spec: ProfileSpec) -> list[str]:
    """Every unknown plugin, plugin at the wrong point and bad argument, with field paths."""
    errors: list[str] = []
    for point, index, ref in spec.refs():
        where = point if index is None else f"{point}[{index}]"
        try:
            plugin = lookup(ref.name)
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


def parse_profile(data: Any) -> ProfileSpec:
    """Validate a profile document; raises ProfileError listing every problem."""
    try:
        spec = ProfileSpec.model_validate(data or {})
    except ValidationError as exc:
        raise ProfileError(
            "\n".join(f"{_path(tuple(e['loc']))}: {e['msg']}" for e in exc.errors())
        ) from None
    errors = check_plugins(spec)
    if errors:
        raise ProfileError("\n".join(errors))
    return spec


def load_profile(path: str | Path | None) -> ProfileSpec:
    if path is None:
        return parse_profile({})
    with open(path, encoding="utf-8") as handle:
        return parse_profile(yaml.safe_load(handle))
