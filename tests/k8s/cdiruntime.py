"""A container runtime's CDI side, as containerd and CRI-O do it through the CDI library:
read every spec in the CDI directory, refuse a spec that breaks the CDI rules (the whole
spec, with every device in it), resolve the fully qualified names the kubelet passes
(``vendor.com/class=name``) and apply their edits to a container.

The rules are the JSON schema ``schemas/cdi-spec.json`` (written from the CDI
specification), checked with ``jsonschema``; besides it, two specs of one kind may not
define the same device (both are then refused for that device, as the library reports a
conflict). Injection goes through the requested devices in order: the first device of a
spec brings the spec's own ``containerEdits`` (once), then each device its edits; environment
variables are set in order (a later value of a name replaces an earlier one), device nodes
and mounts are added once each. A name that no valid spec defines fails the injection, as
it fails the container's creation.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

SCHEMA = Path(__file__).with_name("schemas") / "cdi-spec.json"


@functools.cache
def _validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema", reason="checking CDI specs needs jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def problems(spec: Any) -> list[str]:
    """What a runtime would refuse in ``spec`` (empty: valid), with the field path."""
    found = sorted(_validator().iter_errors(spec), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '<spec>'}: {e.message}" for e in found]


class InjectionError(Exception):
    """The container would not be created: a device is unresolvable."""


@dataclass
class Container:
    """What the edits made of a container: env in order, device nodes, mounts."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: list[str] = field(default_factory=list)
    mounts: list[tuple[str, str]] = field(default_factory=list)

    def apply(self, edits: dict[str, Any]) -> None:
        for entry in edits.get("env") or []:
            name, _, value = entry.partition("=")
            self.env[name] = value
        for node in edits.get("deviceNodes") or []:
            if node["path"] not in self.device_nodes:
                self.device_nodes.append(node["path"])
        for mount in edits.get("mounts") or []:
            pair = (mount["hostPath"], mount["containerPath"])
            if pair not in self.mounts:
                self.mounts.append(pair)


@dataclass
class CdiRuntime:
    """The runtime's CDI cache over one directory, refreshed on every :meth:`inject`."""

    directory: Path
    #: file name -> why the whole spec was refused
    refused: dict[str, list[str]] = field(default_factory=dict)

    def specs(self) -> dict[str, dict[str, Any]]:
        """The valid specs by file name (refused ones recorded in :attr:`refused`)."""
        self.refused = {}
        out: dict[str, dict[str, Any]] = {}
        if not self.directory.is_dir():
            return out
        for path in sorted(self.directory.iterdir()):
            if path.suffix not in (".json", ".yaml") or path.name.startswith("."):
                continue
            try:
                spec = (
                    json.loads(path.read_text())
                    if path.suffix == ".json"
                    else yaml.safe_load(path.read_text())
                )
            except (ValueError, yaml.YAMLError) as exc:
                self.refused[path.name] = [f"unreadable: {exc}"]
                continue
            found = problems(spec)
            if found:
                self.refused[path.name] = found
            else:
                out[path.name] = spec
        return out

    def devices(self) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        """Qualified name -> (spec, device), conflicting definitions left out."""
        seen: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
        for spec in self.specs().values():
            for device in spec["devices"]:
                seen.setdefault(f"{spec['kind']}={device['name']}", []).append((spec, device))
        return {name: found[0] for name, found in seen.items() if len(found) == 1}

    def inject(self, names: list[str]) -> Container:
        """The container the runtime creates with CDI devices ``names``."""
        known = self.devices()
        missing = [n for n in names if n not in known]
        if missing:
            raise InjectionError(
                f"unresolvable CDI devices {', '.join(missing)} (refused specs: {self.refused})"
            )
        container = Container()
        applied: list[int] = []
        for name in names:
            spec, device = known[name]
            if id(spec) not in applied:
                applied.append(id(spec))
                container.apply(spec.get("containerEdits") or {})
            container.apply(device["containerEdits"])
        return container


__all__ = ["CdiRuntime", "Container", "InjectionError", "problems"]
