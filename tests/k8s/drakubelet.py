"""A kubelet for DRA tests, speaking only the OFFICIAL kubelet APIs (compiled at test time
from ``../shared/reference/k8s-api``, see official.py): the plugin watcher's registration,
the DRA plugin manager's NodePrepareResources / NodeUnprepareResources, and its health
stream.

:meth:`DraKubelet.register` does what the kubelet's plugin watcher and DRA plugin manager
do with a socket found in the plugins_registry directory: ``GetInfo``, check that the
plugin is a ``DRAPlugin`` with a name and a DRA service the kubelet speaks (``v1.DRAPlugin``
preferred over ``v1beta1.DRAPlugin``), dial the endpoint it names, tell the plugin the
verdict with ``NotifyRegistrationStatus``, and open ``NodeWatchResources`` in the
background when the plugin offers ``v1.DRAResourceHealth``, keeping every list it sends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from k8s.official import Api, api

WAIT_S = 10.0
#: the DRA services the kubelet speaks, newest first
KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@dataclass(frozen=True)
class Prepared:
    """One device of a NodePrepareResources answer."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


#: the timeout the kubelet keeps for a device whose list sets none (its DefaultHealthTimeout)
DEFAULT_HEALTH_TIMEOUT_S = 30


@dataclass(frozen=True)
class DeviceHealth:
    pool: str
    device: str
    health: str
    message: str
    #: ``last_updated_time``: when the driver determined this health (Unix seconds)
    since: int
    #: ``health_check_timeout_seconds`` (0: the kubelet's default)
    timeout: int = 0

    def seen_at(self, now: float) -> str:
        """The health the kubelet reports at ``now``: Unknown once the device's timeout
        passed since ``last_updated_time``, as its health cache does."""
        timeout = self.timeout if self.timeout > 0 else DEFAULT_HEALTH_TIMEOUT_S
        return "UNKNOWN" if now - self.since > timeout else self.health


@dataclass
class Plugin:
    """The kubelet's connection to one registered DRA driver."""

    name: str
    endpoint: str
    versions: tuple[str, ...]
    service: str
    channel: grpc.Channel
    #: every health list the driver sent, in order
    health: list[list[DeviceHealth]] = field(default_factory=list)
    health_ended: bool = False


class DraKubelet:
    def __init__(self, registry_dir: Path) -> None:
        self.registry = registry_dir
        self.registration = api("pluginregistration/v1/api.proto")
        self.dra = api("dra/v1/api.proto")
        self.health_api = api("dra-health/v1/api.proto")
        self.plugins: dict[str, Plugin] = {}
        self._cond = threading.Condition()
        self._streams: list[Any] = []
        self._threads: list[threading.Thread] = []

    # -- the plugin watcher --------------------------------------------------------------

    def sockets(self) -> list[Path]:
        return sorted(p for p in self.registry.iterdir() if p.is_socket())

    def register(self, socket: Path, accept: bool = True, why: str = "") -> Plugin | None:
        """Register the plugin behind ``socket`` (see the module doc); ``accept`` False
        refuses it with ``why``, as the kubelet does when validation fails."""
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            info = self.registration.unary(channel, "Registration", "GetInfo")(
                self.registration.message("InfoRequest")(), timeout=WAIT_S
            )
            versions = tuple(info.supported_versions)
            chosen = next((v for v in KUBELET_SERVICES if v in versions), None)
            problems = []
            if info.type != "DRAPlugin":
                problems.append(f"type {info.type!r} is not DRAPlugin")
            if not info.name:
                problems.append("no driver name")
            if chosen is None:
                problems.append(f"none of {KUBELET_SERVICES} in {versions}")
            if not Path(info.endpoint).is_absolute() or not Path(info.endpoint).is_socket():
                problems.append(f"endpoint {info.endpoint!r} is not a socket")
            if not accept:
                problems.append(why)
            status = self.registration.message("RegistrationStatus")(
                plugin_registered=not problems, error="; ".join(problems)
            )
            self.registration.unary(channel, "Registration", "NotifyRegistrationStatus")(
                status, timeout=WAIT_S
            )
        if problems:
            return None
        assert chosen is not None
        plugin = Plugin(
            info.name,
            info.endpoint,
            versions,
            chosen,
            grpc.insecure_channel(f"unix://{info.endpoint}"),
        )
        old = self.plugins.get(info.name)
        with self._cond:
            self.plugins[info.name] = plugin
            self._cond.notify_all()
        if old is not None:
            old.channel.close()
        if "v1.DRAResourceHealth" in versions:
            thread = threading.Thread(target=self._watch_health, args=(plugin,), daemon=True)
            self._threads.append(thread)
            thread.start()
        return plugin

    def register_all(self) -> list[Plugin]:
        """Every plugin whose socket in the registry answers now (a stale socket left by a
        killed plugin refuses the connection; the plugin watcher tries again later)."""
        out = []
        for socket in self.sockets():
            try:
                plugin = self.register(socket)
            except grpc.RpcError:
                continue
            if plugin is not None:
                out.append(plugin)
        return out

    def _watch_health(self, plugin: Plugin) -> None:
        status = self.health_api.pool.FindEnumTypeByName("v1.HealthStatus")
        try:
            stream = self.health_api.stream(
                plugin.channel, "DRAResourceHealth", "NodeWatchResources"
            )(self.health_api.message("NodeWatchResourcesRequest")())
            with self._cond:
                self._streams.append(stream)
            for answer in stream:
                listed = [
                    DeviceHealth(
                        d.device.pool_name,
                        d.device.device_name,
                        status.values_by_number[d.health].name,
                        d.message,
                        d.last_updated_time,
                        d.health_check_timeout_seconds,
                    )
                    for d in answer.devices
                ]
                with self._cond:
                    plugin.health.append(listed)
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # cancelled: the channel closed, or the plugin's server stopped
        finally:
            with self._cond:
                plugin.health_ended = True
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        """Waits until ``predicate`` holds: woken by the kubelet's own news, and every
        20 ms for what it does not see (files, the API server)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}")
                self._cond.wait(timeout=min(left, 0.02))

    def wait_health(
        self, driver: str, predicate: Callable[[list[DeviceHealth]], bool], what: str
    ) -> list[DeviceHealth]:
        def ok() -> bool:
            plugin = self.plugins.get(driver)
            return plugin is not None and bool(plugin.health) and predicate(plugin.health[-1])

        self.wait_for(ok, what)
        return self.plugins[driver].health[-1]

    def stop(self) -> None:
        with self._cond:
            streams, self._streams = self._streams, []
            plugins = list(self.plugins.values())
        for stream in streams:
            stream.cancel()
        for plugin in plugins:
            plugin.channel.close()
        for thread in self._threads:
            thread.join(timeout=WAIT_S)

    # -- the DRA plugin manager ----------------------------------------------------------------

    def _claims(self, message: str, claims: list[tuple[str, str, str]]) -> Any:
        claim = self.dra.message("Claim")
        return self.dra.message(message)(
            claims=[claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        )

    def prepare(
        self, driver: str, claims: list[tuple[str, str, str]]
    ) -> dict[str, tuple[list[Prepared], str]]:
        """NodePrepareResources of (namespace, uid, name) claims: uid -> (devices, error)."""
        call = self.dra.unary(self.plugins[driver].channel, "DRAPlugin", "NodePrepareResources")
        answer = call(self._claims("NodePrepareResourcesRequest", claims), timeout=WAIT_S)
        return {
            uid: (
                [
                    Prepared(
                        tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids)
                    )
                    for d in result.devices
                ],
                result.error,
            )
            for uid, result in answer.claims.items()
        }

    def unprepare(self, driver: str, claims: list[tuple[str, str, str]]) -> dict[str, str]:
        """NodeUnprepareResources: uid -> error."""
        call = self.dra.unary(self.plugins[driver].channel, "DRAPlugin", "NodeUnprepareResources")
        answer = call(self._claims("NodeUnprepareResourcesRequest", claims), timeout=WAIT_S)
        return {uid: result.error for uid, result in answer.claims.items()}


__all__ = ["Api", "DeviceHealth", "DraKubelet", "Plugin", "Prepared"]
