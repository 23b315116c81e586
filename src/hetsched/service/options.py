"""What ``hetsched up`` is started with (:class:`Options`: its command-line options), apart
from the server that runs it, so that what reads them (the executor's choice, the CLI) need
not import the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hetsched.controlplane import default_home

__all__ = ["Options", "default_home", "examples_dir"]


def examples_dir() -> Path:
    """The repository's examples (the demo's cluster, queues, profile and workload)."""
    return Path(__file__).resolve().parents[3] / "examples"


@dataclass
class Options:
    """The options of ``hetsched up`` (docs/service.md, docs/ray.md), as the CLI parsed them."""

    home: Path = field(default_factory=default_home)
    host: str = "127.0.0.1"
    port: int = 8780
    db: str | None = None
    profile: Path | None = None
    queues: Path | None = None
    cluster: list[Path] = field(default_factory=list)
    fake_devices: Path | None = None
    node_name: str | None = None
    #: discovery backends for this machine (default: cpu, plus fake with fake_devices)
    device_backends: list[str] | None = None
    sysfs_root: Path = Path("/sys")
    #: how often the device watcher looks for hot-plug and health changes
    watch_interval_s: float = 2.0
    demo: bool = False
    run_as: dict[str, str] = field(default_factory=dict)
    rate_limit: float = 200.0
    #: failed authentications per second per client address before 429
    auth_failure_rate: float = 10.0
    kill_grace_s: float = 5.0
    sync: str = "FULL"
    seed: int = 0
    #: serve /metrics without a token (for a Prometheus that cannot send one)
    metrics_public: bool = False
    #: serve /docs, /redoc and /openapi.json without a token
    docs_public: bool = False
    #: where tasks run: "local" (processes on this machine) or "ray" (a Ray cluster)
    executor: str = "local"
    #: the Ray head's GCS address (HOST:PORT), with executor "ray"
    ray_address: str | None = None
    #: seconds to wait for the Ray nodes' first discovery at start
    ray_timeout_s: float = 60.0
    #: serve HTTPS with this certificate chain and key (PEM)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: ask every client for a certificate signed by this CA bundle
    tls_client_ca: Path | None = None
    #: the API's address as tasks reach it (default: this host and port, https with TLS)
    advertise_url: str | None = None
    #: the CA bundle tasks verify ``advertise_url`` with (given to them as PEM text)
    advertise_ca: Path | None = None
    #: lead a standby pair under this lease in the store (None: no standby)
    lease: str | None = None
    #: how long a lease runs without renewal (a standby takes over after it)
    lease_s: float = 8.0
    #: start on a store that fails the check at start (empty, truncated, its WAL lost)
    #: as it is (``--accept-empty-store``)
    accept_empty_store: bool = False
    #: each running task's stdout and stderr are kept under this many bytes (None: no cap)
    max_log_bytes: int | None = None
    #: network levels (node labels, broadest first); empty: those of the first cluster
    #: file that declares them (docs/concepts.md#network-topology)
    topology_levels: tuple[str, ...] = ()
    #: labels of this machine's node (its network domains, say), over those discovered
    node_labels: dict[str, str] = field(default_factory=dict)

    def resolved(self) -> Options:
        """Fill in what ``demo`` implies."""
        if not self.demo:
            return self
        ex = examples_dir()
        return Options(
            **{
                **self.__dict__,
                "cluster": [*self.cluster, ex / "clusters" / "demo.yaml"],
                "queues": self.queues or ex / "queues" / "demo.yaml",
                "profile": self.profile or ex / "profiles" / "demo.yaml",
                "demo": False,
            }
        )
