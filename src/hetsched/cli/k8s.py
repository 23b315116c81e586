"""``hetsched k8s``: the Kubernetes parts, each a long-running command (the device plugin runs
as a DaemonSet on every node with devices)."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from hetsched.cli.output import fail

__all__ = ["device_plugin", "k8s_app"]

k8s_app = typer.Typer(
    help="Kubernetes: the device plugin, the scheduler and the scheduler extender.",
    no_args_is_help=True,
)

_PLUGIN_BACKENDS = ("nvidia", "pci", "fake")


@k8s_app.command("device-plugin")
def device_plugin(
    resource: Annotated[
        str, typer.Option(help="The extended resource of whole devices, e.g. hetsched.io/gpu.")
    ],
    backend: Annotated[
        str,
        typer.Option(help="Discovery backends, comma-separated: nvidia, pci, fake."),
    ] = "nvidia",
    config: Annotated[
        Path | None, typer.Option("--config", help="The plugin's YAML configuration.")
    ] = None,
    plugin_dir: Annotated[
        Path | None,
        typer.Option(help="The kubelet's device-plugins directory (default from --config)."),
    ] = None,
    node_name: Annotated[
        str | None, typer.Option(help="This node's name (default: $NODE_NAME, hostname).")
    ] = None,
    fake: Annotated[
        Path | None, typer.Option("--fake", help="The fake backend's device file.")
    ] = None,
    shared_slots: Annotated[
        int | None,
        typer.Option(
            min=0, help="Slots per device of the shared resource <resource>-shared (0: none)."
        ),
    ] = None,
    kube_api: Annotated[
        bool | None,
        typer.Option(
            "--kube-api/--no-kube-api",
            help="Annotate the Node and read pods' assignments (default: on).",
        ),
    ] = None,
) -> None:
    """Serve the kubelet device plugin API v1beta1 for one resource of this node's devices."""
    from hetsched.agent.watcher import DeviceWatcher
    from hetsched.k8s.deviceplugin.config import load_config
    from hetsched.k8s.deviceplugin.plugin import DevicePlugin
    from hetsched.k8s.deviceplugin.publisher import KubernetesNodeAPI, NodeAPI
    from hetsched.model.specs import SpecError

    domain, slash, kind = resource.partition("/")
    if not slash or "." not in domain or not kind or domain.endswith("kubernetes.io"):
        fail(f"--resource must be an extended resource name like hetsched.io/gpu, got {resource!r}")
    names = [n.strip() for n in backend.split(",") if n.strip()]
    unknown = [n for n in names if n not in _PLUGIN_BACKENDS]
    if unknown or not names:
        fail(f"unknown backend {unknown[0] if unknown else ''!r} (known: nvidia, pci, fake)")
    try:
        settings_file = load_config(config)
    except SpecError as exc:
        fail(str(exc))
    updates: dict[str, object] = {}
    if plugin_dir is not None:
        updates["plugin_dir"] = plugin_dir
    if node_name is not None:
        updates["node_name"] = node_name
    if fake is not None:
        updates["fake_devices"] = fake
    if shared_slots is not None:
        updates["shared_slots"] = shared_slots
    if kube_api is not None:
        updates["kube_api"] = kube_api
    options = settings_file.model_copy(update=updates)
    if "fake" in names and options.fake_devices is None:
        fail("the fake backend needs a device file: --fake FILE or fake_devices in --config")
    settings = options.settings(resource)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    api: NodeAPI | None = None
    if options.kube_api:
        try:
            api = KubernetesNodeAPI(options.kubeconfig)
        except Exception as exc:
            fail(f"cannot reach the Kubernetes API ({exc}); --no-kube-api runs without it")
    watcher = DeviceWatcher.create(
        settings.node_name,
        names,
        sysfs_root=options.sysfs_root,
        fake_file=options.fake_devices,
        interval_s=options.poll_interval_s,
    )
    plugin = DevicePlugin(settings, watcher, api)

    def _stop(signum: int, frame: FrameType | None) -> None:
        plugin.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        plugin.start()
    except SpecError as exc:
        fail(str(exc))
    plugin.wait()
