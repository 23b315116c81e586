"""``hetsched k8s dra-driver``: the DRA kubelet plugin of this node, as a long-running
command (a DaemonSet on every node with devices), or ``--print-slices`` to show the
ResourceSlices it would publish and exit."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hetsched.cli.k8s_options import (
    Backend,
    ConfigFile,
    FakeFile,
    Kubeconfig,
    NodeName,
    absolute,
    check_socket,
    existing_file,
    make_dir,
)
from hetsched.cli.output import OutputFormat, fail, print_json
from hetsched.cli.signals import stop_on_signals

if TYPE_CHECKING:
    from hetsched.k8s.dra.config import DriverConfig
    from hetsched.k8s.dra.driver import DriverSettings

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


_PluginsDir = Annotated[
    Path | None,
    typer.Option(help="The kubelet's plugins directory (default /var/lib/kubelet/plugins)."),
]
_RegistryDir = Annotated[
    Path | None,
    typer.Option(help="The kubelet's plugin registry (default /var/lib/kubelet/plugins_registry)."),
]
_CdiDir = Annotated[
    Path | None, typer.Option(help="Where CDI specs are written (default /var/run/cdi).")
]
_DriverName = Annotated[
    str | None, typer.Option(help="The DRA driver name (default: hetsched.io).")
]
_PrintSlices = Annotated[
    bool,
    typer.Option(
        "--print-slices",
        help="Print the ResourceSlices this node would publish, then exit (no API server).",
    ),
]
_Output = Annotated[
    OutputFormat, typer.Option("-o", "--output", help="With --print-slices: table or json.")
]


def dra_driver(
    backend: Backend = "nvidia",
    config: ConfigFile = None,
    node_name: NodeName = None,
    driver_name: _DriverName = None,
    fake: FakeFile = None,
    plugins_dir: _PluginsDir = None,
    registry_dir: _RegistryDir = None,
    cdi_dir: _CdiDir = None,
    kubeconfig: Kubeconfig = None,
    print_slices: _PrintSlices = False,
    output: _Output = OutputFormat.table,
) -> None:
    """Serve Dynamic Resource Allocation (resource.k8s.io/v1) for this node's devices: publish
    them as ResourceSlices, prepare the ResourceClaims the kubelet starts pods with (CDI),
    stream their health, and register with the kubelet's plugin watcher."""
    from hetsched.agent.watcher import DeviceWatcher

    names = _backends(backend)
    options = _options(
        absolute(config),
        node_name=node_name,
        driver_name=driver_name,
        fake_devices=absolute(fake),
        plugins_dir=absolute(plugins_dir),
        registry_dir=absolute(registry_dir),
        cdi_dir=absolute(cdi_dir),
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
    _check_paths(settings)
    given = existing_file(kubeconfig, "--kubeconfig")
    _serve(settings, watcher, str(given) if given else options.kubeconfig)


def _check_paths(settings: DriverSettings) -> None:
    """Refuse, in one line each, the folders and sockets the driver cannot use."""
    if not settings.registry_dir.is_dir():
        fail(
            f"{settings.registry_dir} is not a directory: mount the kubelet's plugins_registry "
            "directory, or pass --registry-dir"
        )
    make_dir(settings.data_dir, "--plugins-dir")
    make_dir(settings.cdi_dir, "--cdi-dir")
    check_socket(settings.socket, "--plugins-dir")
    check_socket(settings.registration_socket, "--registry-dir")


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
    stopping = stop_on_signals()
    try:
        try:
            driver.start()
        except (OSError, RuntimeError) as exc:
            # a socket that cannot be served (a folder mounted read-only, ...)
            fail(f"cannot serve DRA driver {settings.driver_name} on {settings.socket}: {exc}")
        stopping.wait()
    finally:
        # the gRPC servers' worker threads hold the process open until their streams end
        driver.stop()
