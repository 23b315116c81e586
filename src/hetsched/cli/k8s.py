"""``hetsched k8s``: the Kubernetes parts, each a long-running command (the device plugin runs
as a DaemonSet on every node with devices)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hetsched.cli.k8s_dra import dra_driver
from hetsched.cli.k8s_options import (
    Backend,
    FakeFile,
    Kubeconfig,
    NodeName,
    Profile,
    absolute,
    check_socket,
    existing_file,
)
from hetsched.cli.output import fail
from hetsched.cli.signals import stop_on_signals
from hetsched.cli.up import topology_levels
from hetsched.k8s.names import SCHEDULER_NAME

if TYPE_CHECKING:
    from hetsched.framework.profile import ProfileSpec
    from hetsched.k8s.api import ClusterAPI
    from hetsched.k8s.deviceplugin.config import PluginConfig
    from hetsched.k8s.deviceplugin.plugin import DevicePlugin
    from hetsched.k8s.deviceplugin.publisher import NodeAPI
    from hetsched.k8s.scheduler import PodScheduler

__all__ = ["device_plugin", "extender", "k8s_app", "scheduler"]

k8s_app = typer.Typer(
    help="Kubernetes: the device plugin, the DRA driver, the scheduler and the extender.",
    no_args_is_help=True,
)

_PLUGIN_BACKENDS = ("nvidia", "pci", "fake")


#: the options of ``device-plugin``
_DevicePluginResource = Annotated[
    str, typer.Option(help="The extended resource of whole devices, e.g. hetsched.io/gpu.")
]
_DevicePluginConfig = Annotated[
    Path | None, typer.Option("--config", help="The plugin's YAML configuration.")
]
_DevicePluginPluginDir = Annotated[
    Path | None,
    typer.Option(help="The kubelet's device-plugins directory (default from --config)."),
]
_DevicePluginSharedSlots = Annotated[
    int | None,
    typer.Option(
        min=0, help="Slots per device of the shared resource <resource>-shared (0: none)."
    ),
]
_DevicePluginKubeApi = Annotated[
    bool | None,
    typer.Option(
        "--kube-api/--no-kube-api",
        help="Annotate the Node and read pods' assignments (default: on).",
    ),
]


@k8s_app.command("device-plugin")
def device_plugin(
    resource: _DevicePluginResource,
    backend: Backend = "nvidia",
    config: _DevicePluginConfig = None,
    plugin_dir: _DevicePluginPluginDir = None,
    node_name: NodeName = None,
    fake: FakeFile = None,
    shared_slots: _DevicePluginSharedSlots = None,
    kube_api: _DevicePluginKubeApi = None,
) -> None:
    """Serve the kubelet device plugin API v1beta1 for one resource of this node's devices."""
    from hetsched.agent.watcher import DeviceWatcher
    from hetsched.k8s.deviceplugin.plugin import DevicePlugin

    domain, slash, kind = resource.partition("/")
    if not slash or "." not in domain or not kind or domain.endswith("kubernetes.io"):
        fail(f"--resource must be an extended resource name like hetsched.io/gpu, got {resource!r}")
    names = [n.strip() for n in backend.split(",") if n.strip()]
    unknown = [n for n in names if n not in _PLUGIN_BACKENDS]
    if unknown or not names:
        fail(f"unknown backend {unknown[0] if unknown else ''!r} (known: nvidia, pci, fake)")
    updates = {
        "plugin_dir": absolute(plugin_dir),
        "node_name": node_name,
        "fake_devices": absolute(fake),
        "shared_slots": shared_slots,
        "kube_api": kube_api,
    }
    options = _plugin_options(absolute(config), updates)
    if "fake" in names and options.fake_devices is None:
        fail("the fake backend needs a device file: --fake FILE or fake_devices in --config")
    settings = options.settings(resource)
    if not settings.plugin_dir.is_dir():
        fail(
            f"{settings.plugin_dir} is not a directory: mount the kubelet's device-plugins "
            "directory, or pass --plugin-dir"
        )
    check_socket(settings.plugin_dir / "kubelet.sock", "--plugin-dir")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    watcher = DeviceWatcher.create(
        settings.node_name,
        names,
        sysfs_root=options.sysfs_root,
        fake_file=options.fake_devices,
        interval_s=options.poll_interval_s,
    )
    _serve_plugin(DevicePlugin(settings, watcher, _node_api(options)))


def _plugin_options(config: Path | None, updates: Mapping[str, object]) -> PluginConfig:
    """The file's configuration with the options given (not None) over it."""
    from hetsched.k8s.deviceplugin.config import load_config
    from hetsched.model.specs import SpecError

    try:
        settings_file = load_config(config)
    except SpecError as exc:
        fail(str(exc))
    given = {k: v for k, v in updates.items() if v is not None}
    return settings_file.model_copy(update=given)


def _node_api(options: PluginConfig) -> NodeAPI | None:
    from hetsched.k8s.deviceplugin.publisher import KubernetesNodeAPI

    if not options.kube_api:
        return None
    try:
        return KubernetesNodeAPI(options.kubeconfig)
    except Exception as exc:
        fail(f"cannot reach the Kubernetes API ({exc}); --no-kube-api runs without it")


def _serve_plugin(plugin: DevicePlugin) -> None:
    stopping = stop_on_signals()
    try:
        try:
            plugin.start()
        except (OSError, RuntimeError) as exc:
            # a socket that cannot be served (a folder mounted read-only, ...)
            fail(f"cannot serve the device plugin in {plugin.settings.plugin_dir}: {exc}")
        stopping.wait()
    finally:
        # the gRPC servers' worker threads hold the process open until their streams end
        plugin.stop()


def _profile(path: Path | None) -> ProfileSpec:
    from hetsched.framework.profile import ProfileError, load_profile

    path = absolute(path)
    try:
        return load_profile(path)
    except (OSError, ProfileError, ValueError) as exc:
        fail(f"{path}: {exc}")


def _api(
    kubeconfig: Path | None, connections: int = 0, qps: float = 0.0, burst: int = 100
) -> ClusterAPI:
    from hetsched.k8s.api import POOL_SIZE, load_api
    from hetsched.k8s.ratelimit import TokenBucket

    path = existing_file(kubeconfig, "--kubeconfig")
    limit = TokenBucket(qps, burst) if qps > 0 else None
    try:
        return load_api(str(path) if path else None, max(POOL_SIZE, connections), limit)
    except Exception as exc:
        fail(f"cannot load a Kubernetes configuration: {exc}")


#: Events waiting to be posted before new ones are dropped (client-go's broadcaster keeps
#: as many for kube-scheduler)
EVENT_QUEUE = 1000


_SchedulerName = Annotated[
    str, typer.Option(help="Schedule the pods whose spec.schedulerName is this.")
]
_LeaderElect = Annotated[
    bool, typer.Option("--leader-elect/--no-leader-elect", help="Hold a Lease to act.")
]
_LeaseNamespace = Annotated[str, typer.Option(help="The Lease's namespace.")]
_LeaseName = Annotated[str, typer.Option(help="The Lease's name.")]
_Identity = Annotated[
    str | None, typer.Option(help="This instance's Lease identity (default: $POD_NAME).")
]
_FederationNamespace = Annotated[
    str | None,
    typer.Option(
        help="Serve federations: pods labelled hetsched.io/federation=NAME run only while "
        "the Lease hetsched-federation-NAME in this namespace is live (docs/federation.md).",
    ),
]
_Federations = Annotated[
    list[str] | None,
    typer.Option(
        help="A federation served from the start (repeatable; with --federation-namespace)."
    ),
]
_BindWorkers = Annotated[
    int,
    typer.Option(
        min=0,
        help="Threads that bind pods off the scheduling loop, each on a kept-alive "
        "connection (0: bind on the loop, one pod after the other).",
    ),
]
_Qps = Annotated[
    float,
    typer.Option(
        "--kube-api-qps",
        min=0,
        help="Requests per second to the API server, the client's rate limit (0: none; "
        "kube-scheduler's default is 50). See docs/kubernetes.md for the pods/s each allows.",
    ),
]
_Burst = Annotated[
    int,
    typer.Option(
        "--kube-api-burst",
        min=1,
        help="Requests above --kube-api-qps allowed at once (kube-scheduler's default: 100).",
    ),
]

_TopologyLevels = Annotated[
    list[str] | None,
    typer.Option(
        "--topology-level",
        help="A network level: a node label, broadest first (repeatable; e.g. "
        "network.hetsched.io/block, then network.hetsched.io/rack). Pods ask for one with "
        "hetsched.io/topology-required or Kueue's podset-required-topology annotation.",
    ),
]


@k8s_app.command("scheduler")
def scheduler(
    kubeconfig: Kubeconfig = None,
    scheduler_name: _SchedulerName = SCHEDULER_NAME,
    profile: Profile = None,
    leader_elect: _LeaderElect = True,
    lease_namespace: _LeaseNamespace = "kube-system",
    lease_name: _LeaseName = SCHEDULER_NAME,
    identity: _Identity = None,
    federation_namespace: _FederationNamespace = None,
    federation: _Federations = None,
    bind_workers: _BindWorkers = 16,
    kube_api_qps: _Qps = 0.0,
    kube_api_burst: _Burst = 100,
    topology_level: _TopologyLevels = None,
) -> None:
    """Schedule pods naming hetsched: watch pods and nodes, bind, explain what waits."""
    levels = topology_levels(topology_level)
    from hetsched.k8s.leader import LeaseLock
    from hetsched.k8s.scheduler import PodScheduler, run_leading

    spec = _profile(profile)
    # a connection per binding worker, plus the watches, the events and the lease
    api = _api(kubeconfig, bind_workers + 8, kube_api_qps, kube_api_burst)
    me = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    sched = PodScheduler(
        api,
        spec,
        scheduler_name=scheduler_name,
        identity=me,
        bind_workers=bind_workers,
        event_queue=EVENT_QUEUE if bind_workers else 0,
        topology_levels=levels,
    )
    if federation_namespace is not None:
        from hetsched.k8s.fencing import LeaseFencing

        sched.fencing = LeaseFencing(federation_namespace, federation or ())
    stop = stop_on_signals()
    if not leader_elect:
        sched.run(stop)
        return
    lock = LeaseLock(api, lease_namespace, lease_name, me)
    code = run_leading(sched, lock, stop)
    if code:
        raise typer.Exit(code)


_TlsCert = Annotated[
    Path | None,
    typer.Option(help="Serve https with this certificate chain (PEM); needs --tls-key."),
]
_TlsKey = Annotated[Path | None, typer.Option(help="The key of --tls-cert (PEM, unencrypted).")]
_TlsClientCa = Annotated[
    Path | None,
    typer.Option(help="Accept only clients with a certificate signed by this CA (PEM)."),
]


@k8s_app.command("extender")
def extender(
    port: Annotated[int, typer.Option(help="The port to serve the webhook on.")] = 8888,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "0.0.0.0",
    kubeconfig: Kubeconfig = None,
    profile: Profile = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch/--no-watch",
            help="Keep a node and pod cache from the API server (needed for nodeCacheCapable "
            "and bind); --no-watch judges only the Nodes each request carries.",
        ),
    ] = True,
    tls_cert: _TlsCert = None,
    tls_key: _TlsKey = None,
    tls_client_ca: _TlsClientCa = None,
) -> None:
    """Serve the kube-scheduler extender webhook: /filter, /prioritize, /bind, /preempt.

    With --tls-cert and --tls-key it serves https (the extender configuration's
    enableHTTPS, with tlsConfig.caData the CA that signed the certificate); with
    --tls-client-ca it accepts only clients with a certificate of that CA
    (tlsConfig.certData and keyData)."""
    import uvicorn

    from hetsched.k8s.extender import create_app
    from hetsched.k8s.scheduler import PodScheduler
    from hetsched.tls import TlsError, server_tls

    try:
        tls = server_tls(tls_cert, tls_key, tls_client_ca)
    except TlsError as exc:
        fail(str(exc), 2)
    spec = _profile(profile)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cache = None
    if watch:
        # a name no pod uses: the cache only watches and accounts, it never schedules
        cache = PodScheduler(_api(kubeconfig), spec, scheduler_name="hetsched-extender-cache")
        cache.sync()
        cache.start_watches()
        feeder = threading.Thread(target=_feed, args=(cache,), daemon=True, name="cache")
        feeder.start()
    app = create_app(spec, cache)
    uvicorn.run(app, host=host, port=port, log_level="info", **(tls.uvicorn() if tls else {}))


def _feed(cache: PodScheduler) -> None:
    while True:
        cache.step(1.0)


k8s_app.command("dra-driver")(dra_driver)
