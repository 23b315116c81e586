"""``hetsched k8s dra-driver``: the DRA kubelet plugin of this node, as a long-running
command (a DaemonSet on every node with devices), or ``--print-slices`` to show the
ResourceSlices it would publish and exit."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hetsched.cli.output import OutputFormat, fail, print_json

if TYPE_CHECKING:
    from hetsched.k8s.dra.config import DriverConfig

__all__ = ["dra_driver"]

_BACKENDS = ("nvidia", "pci", "fake")


def _backends(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in _BACKENDS]
    if unknown or not names:
        fail(f"unknown backend {unknown[0] if unknown else ''!r} (known: nvidia, pci, fake)")
    return names


def _options(config: Path | None, **overrides: Any) -> DriverConfig:
    """The file's configuration with the options given on the command line over it."""
    from pydantic import ValidationError

    from hetsched.k8s.dra.config import DriverConfig, load_config
    from hetsched.model.specs import SpecError, format_errors

    try:
        file = load_config(config)
        given = {k: v for k, v in overrides.items() if v is not None}
        return DriverConfig.model_validate(file.model_dump() | given)
    except SpecError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(f"bad option: {format_errors(exc)}")


def dra_driver(
    backend: Annotated[
        str, typer.Option(help="Discovery backends, comma-separated: nvidia, pci, fake.")
    ] = "nvidia",
    config: Annotated[
        Path | None, typer.Option("--config", help="The driver's YAML configuration.")
    ] = None,
    node_name: Annotated[
        str | None, typer.Option(help="This node's name (default: $NODE_NAME, hostname).")
    ] = None,
    driver_name: Annotated[
        str | None, typer.Option(help="The DRA driver name (default: hetsched.io).")
    ] = None,
    fake: Annotated[
        Path | None, typer.Option("--fake", help="The fake backend's device file.")
    ] = None,
    plugins_dir: Annotated[
        Path | None,
        typer.Option(help="The kubelet's plugins directory (default /var/lib/kubelet/plugins)."),
    ] = None,
    registry_dir: Annotated[
        Path | None,
        typer.Option(
            help="The kubelet's plugin registry (default /var/lib/kubelet/plugins_registry)."
        ),
    ] = None,
    cdi_dir: Annotated[
        Path | None, typer.Option(help="Where CDI specs are written (default /var/run/cdi).")
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="A kubeconfig file (default: in-cluster config, else ~/.kube/config)."),
    ] = None,
    print_slices: Annotated[
        bool,
        typer.Option(
            "--print-slices",
            help="Print the ResourceSlices this node would publish, then exit (no API server).",
        ),
    ] = False,
    output: Annotated[
        OutputFormat, typer.Option("-o", "--output", help="With --print-slices: table or json.")
    ] = OutputFormat.table,
) -> None:
    """Serve Dynamic Resource Allocation (resource.k8s.io/v1) for this node's devices: publish
    them as ResourceSlices, prepare the ResourceClaims the kubelet starts pods with (CDI),
    stream their health, and register with the kubelet's plugin watcher."""
    from hetsched.agent.watcher import DeviceWatcher

    names = _backends(backend)
    options = _options(
        config,
        node_name=node_name,
        driver_name=driver_name,
        fake_devices=fake,
        plugins_dir=plugins_dir,
        registry_dir=registry_dir,
        cdi_dir=cdi_dir,
    )
    if "fake" in names and options.fake_devices is None:
        fail("the fake backend needs a device file: --fake FILE or fake_devices in --config")
    settings = options.settings()
    watcher = DeviceWatcher.create(
        settings.node_name,
        names,
        sysfs_root=options.sysfs_root,
        fake_file=options.fake_devices,
        interval_s=options.poll_interval_s,
    )
    if print_slices:
        _print_slices(settings, watcher, output)
        return
    if not settings.registry_dir.is_dir():
        fail(
            f"{settings.registry_dir} is not a directory: mount the kubelet's plugins_registry "
            "directory, or pass --registry-dir"
        )
    _serve(settings, watcher, str(kubeconfig) if kubeconfig else options.kubeconfig)


def _print_slices(settings: Any, watcher: Any, output: OutputFormat) -> None:
    from hetsched.cli.tables import Col, Grid, print_table
    from hetsched.k8s.dra.devices import node_slices

    watcher.initial()
    devices = [
        d
        for d in watcher.present.values()
        if not settings.classes or d.device_class in settings.classes
    ]
    slices = node_slices(settings.node_name, settings.driver_name, devices, 1, settings.shareable)
    if output is OutputFormat.json:
        print_json(slices)
        return
    columns = (
        Col("slice", keep=True),
        Col("device", keep=True),
        Col("type", drop=1),
        Col("model", keep=True),
        Col("healthy", keep=True),
        Col("attributes", wrap=True, drop=2),
    )
    grid = Grid(f"ResourceSlices of {settings.node_name} ({len(slices)})", columns)
    for body in slices:
        for device in body["spec"]["devices"]:
            attributes = device["attributes"]
            rest = {
                k: next(iter(v.values()))
                for k, v in attributes.items()
                if k not in ("type", "model", "healthy")
            }
            grid.add(
                body["metadata"]["name"],
                device["name"],
                str(attributes["type"]["string"]),
                str(attributes["model"]["string"]),
                str(attributes["healthy"]["bool"]).lower(),
                ", ".join(f"{k}={v}" for k, v in rest.items()),
            )
    print_table(grid)


def _serve(settings: Any, watcher: Any, kubeconfig: str | None) -> None:
    from hetsched.k8s.api import load_api
    from hetsched.k8s.dra.driver import DraDriver

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        api = load_api(kubeconfig)
    except Exception as exc:
        fail(f"cannot load a Kubernetes configuration: {exc}")
    driver = DraDriver(settings, watcher, api)
    stopping = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        # only a flag: a signal may land anywhere, even inside start()
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        driver.start()
        stopping.wait()
    finally:
        # the gRPC servers' worker threads hold the process open until their streams end
        driver.stop()
