"""Pods bound per second by ``hetsched k8s scheduler`` against the API server double.

The shape of kube-scheduler's scheduler_perf ``SchedulingBasic`` test at 5,000 nodes: the
cluster has ``--nodes`` nodes (8 GPUs each, in the device plugin's annotation) and
``--init-pods`` pods already bound there by another scheduler; then ``--pods`` pending pods
that ask for one GPU each are created as fast as the double takes them, while the scheduler
runs. Measured:

- **pods/s**: the measured pods over the time from the first one's creation to the last
  one's binding (scheduler_perf's SchedulingThroughput averages per-second samples of the
  same count; the median of those samples is given too);
- **creation to binding**: per pod, from the double storing it to the double binding it
  (p50, p99);
- the scheduler's CPU time per 1,000 pods (user + system of its process), since on a shared
  machine wall time measures the other load too.

The double (tests/k8s/apiserver.py) runs in this process on 127.0.0.1; the scheduler is the
real command in a subprocess, talking to it through the official client over HTTP. Every
write the double takes waits ``--latency-ms`` first (a real API server's etcd commit: 1-5 ms
is usual), each value of the comma-separated list one run. Each ``--workers`` value is one
run, side by side: 0 binds on the scheduling loop, one pod after the other; N binds on N
threads off the loop (kube-scheduler's asynchronous binding cycle). ``--qps`` and
``--burst`` are the scheduler's ``--kube-api-qps`` / ``--kube-api-burst`` (0: no limit).
``--profile-double`` profiles the double's request threads (the top functions by their own
time), to check that it is not the bottleneck; ``--profile-scheduler PATH`` runs the
scheduler under cProfile and writes its statistics to PATH (read them with ``pstats``).

    .venv/bin/python bench/k8s_scheduler.py --repeats 3           # 5,000 nodes, 10,000 pods
    .venv/bin/python bench/k8s_scheduler.py --latency-ms 0,1,2,5,10 --workers 0,16
    .venv/bin/python bench/k8s_scheduler.py --latency-ms 2 --workers 16 --qps 50 --burst 100
    .venv/bin/python bench/k8s_scheduler.py --workers 0,16 --nodes 500 --pods 2000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import yaml
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from k8s.apiserver import ApiServer, gpus, node_json, pod_json  # noqa: E402

Obj = dict[str, Any]
GPUS_PER_NODE = 8


def build_cluster(server: ApiServer, nodes: int, init_pods: int) -> None:
    """Nodes and already bound pods, put straight into the double's store."""
    store = server.store
    for i in range(nodes):
        name = f"node-{i}"
        store.put("nodes", node_json(name, cpu="32", memory="256Gi", devices=gpus(name, 8)))
    for i in range(init_pods):
        node = f"node-{i % nodes}"
        gpu = (i // nodes) % GPUS_PER_NODE
        body = pod_json(f"init-{i}", cpu="100m", memory="500Mi", devices={"gpu": 1})
        body["spec"]["schedulerName"] = "default-scheduler"
        body["spec"]["nodeName"] = node
        body["metadata"]["annotations"]["hetsched.io/assigned-devices"] = json.dumps(
            [{"id": f"{node}-gpu{gpu}", "share": 1000}]
        )
        body["status"] = {"phase": "Running"}
        store.put("pods", body)


def kubeconfig(folder: Path, url: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "double", "cluster": {"server": url}}],
                "users": [{"name": "bench", "user": {}}],
                "contexts": [{"name": "bench", "context": {"cluster": "double", "user": "bench"}}],
                "current-context": "bench",
            }
        )
    )
    return path


def pending_pod(name: str) -> Obj:
    body = pod_json(name, cpu="100m", memory="500Mi", devices={"gpu": 1})
    body["status"] = {"phase": "Pending"}
    return body


def wait_bound(server: ApiServer, keys: set[tuple[str, str]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(k in server.store.bound_at for k in keys):
            return True
        time.sleep(0.05)
    return False


class _Profiler:
    """cProfile on every request thread of the double, merged at the end."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self._local = threading.local()

    def start(self) -> None:
        def hook(frame: Any, event: str, arg: Any) -> None:
            if getattr(self._local, "profile", None) is None:
                # CPU time of this thread: request threads mostly wait on their sockets
                profile = cProfile.Profile(time.thread_time)
                self._local.profile = profile
                self.profiles.append(profile)
                profile.enable()  # replaces this hook in this thread

        threading.setprofile(hook)

    def report(self, top: int = 15) -> str:
        import io

        for profile in self.profiles:
            profile.disable()
        out = io.StringIO()
        stats = pstats.Stats(self.profiles[0], stream=out) if self.profiles else None
        if stats is None:
            return ""
        for profile in self.profiles[1:]:
            stats.add(profile)
        stats.sort_stats("tottime").print_stats(top)
        return out.getvalue()


def run_once(
    args: argparse.Namespace, workers: int, latency_ms: float, progress: Progress
) -> dict[str, Any]:
    profiler = _Profiler() if args.profile_double else None
    if profiler is not None:
        profiler.start()
    server = ApiServer().start()
    server.write_latency_s = latency_ms / 1000
    folder = Path(tempfile.mkdtemp(prefix="hs-bench-k8s-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        build_cluster(server, args.nodes, args.init_pods)
        hetsched = str(Path(sys.executable).parent / "hetsched")
        runner = [hetsched]
        if args.profile_scheduler:
            runner = [sys.executable, "-m", "cProfile", "-o", args.profile_scheduler, hetsched]
        command = [
            *runner,
            "k8s",
            "scheduler",
            "--kubeconfig",
            str(kubeconfig(folder, server.url)),
            "--no-leader-elect",
            "--bind-workers",
            str(workers),
            "--kube-api-qps",
            str(args.qps),
            "--kube-api-burst",
            str(args.burst),
        ]
        log = (folder / "scheduler.log").open("wb")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        server.store.put("pods", pending_pod("probe"))
        if not wait_bound(server, {("default", "probe")}, args.timeout):
            raise RuntimeError(f"the scheduler did not start: see {folder / 'scheduler.log'}")
        cpu_before = psutil.Process(process.pid).cpu_times()
        task = progress.add_task(f"workers={workers} latency={latency_ms} ms", total=args.pods)
        created: dict[tuple[str, str], float] = {}
        for i in range(args.pods):
            name = f"pod-{i}"
            server.store.put("pods", pending_pod(name))
            created[("default", name)] = time.monotonic()
            if i % 500 == 0:
                progress.update(task, completed=len(server.store.bound_at) - 1)
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            done = sum(1 for k in created if k in server.store.bound_at)
            progress.update(task, completed=done)
            if done == len(created):
                break
            time.sleep(0.1)
        cpu_after = psutil.Process(process.pid).cpu_times()
        bound = {k: server.store.bound_at[k] for k in created if k in server.store.bound_at}
        if len(bound) < len(created):
            raise RuntimeError(f"only {len(bound)} of {len(created)} pods bound in time")
        first = min(created.values())
        last = max(bound.values())
        latencies = sorted(bound[k] - created[k] for k in bound)
        per_second = Counter(int(t - first) for t in bound.values())
        samples = [per_second.get(s, 0) for s in range(int(last - first) + 1)]
        cpu = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
        nodes_used = len({n for _, _, n, c in server.store.bindings if c == 201})
        result = {
            "workers": workers,
            "latency_ms": latency_ms,
            "pods": len(bound),
            "seconds": last - first,
            "pods_per_s": len(bound) / (last - first),
            "median_per_s_sample": statistics.median(samples),
            "p50_s": latencies[len(latencies) // 2],
            "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "cpu_s_per_1000": 1000 * cpu / len(bound),
            "nodes_used": nodes_used,
            "requests": {" ".join(k).strip(): n for k, n in server.store.requests.items()},
        }
        if profiler is not None:
            result["double_profile"] = profiler.report()
        return result
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        server.stop()
        threading.setprofile(None)


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median pods/s, with every run's pods/s."""
    ordered = sorted(runs, key=lambda r: float(r["pods_per_s"]))
    median = dict(ordered[len(ordered) // 2])
    median["all_pods_per_s"] = [round(float(r["pods_per_s"])) for r in runs]
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--init-pods", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--workers", default="0,16", help="comma-separated --bind-workers")
    parser.add_argument(
        "--latency-ms", default="2", help="comma-separated: each write's latency in the double"
    )
    parser.add_argument("--qps", type=float, default=0.0, help="--kube-api-qps (0: no limit)")
    parser.add_argument("--burst", type=int, default=100, help="--kube-api-burst")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each, interleaved")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per phase")
    parser.add_argument("--profile-double", action="store_true")
    parser.add_argument(
        "--profile-scheduler",
        metavar="PATH",
        help="run the scheduler under cProfile, its statistics written to PATH (pstats)",
    )
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args()
    console = Console(stderr=True)
    runs: dict[tuple[float, int], list[dict[str, Any]]] = {}
    load_before = os.getloadavg()
    with Progress(console=console, transient=True) as progress:
        for _ in range(args.repeats):
            for latency in [float(x) for x in args.latency_ms.split(",")]:
                for workers in [int(w) for w in args.workers.split(",")]:
                    runs.setdefault((latency, workers), []).append(
                        run_once(args, workers, latency, progress)
                    )
    results = [_median(rs) for rs in runs.values()]
    load = os.getloadavg()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load": [round(x, 2) for x in load],
        "qps": args.qps,
        "burst": args.burst,
        "nodes": args.nodes,
        "init_pods": args.init_pods,
        "pods": args.pods,
    }
    if args.output == "json":
        print(json.dumps({"meta": meta, "results": results}, indent=2))
        return
    table = Table(title=f"hetsched k8s scheduler, {args.nodes} nodes, {args.pods} pods")
    columns = (
        "write latency",
        "bind workers",
        "pods/s",
        "runs",
        "vs on the loop",
        "median 1 s sample",
        "p50",
        "p99",
        "CPU s/1000",
    )
    for column in columns:
        table.add_column(column, justify="right")
    on_loop = {r["latency_ms"]: r["pods_per_s"] for r in results if r["workers"] == 0}
    for r in results:
        base = on_loop.get(r["latency_ms"])
        table.add_row(
            f"{r['latency_ms']:g} ms",
            str(r["workers"]),
            f"{r['pods_per_s']:.0f}",
            " ".join(str(x) for x in r["all_pods_per_s"]),
            f"{r['pods_per_s'] / base:.2f}x" if base else "",
            f"{r['median_per_s_sample']:.0f}",
            f"{r['p50_s']:.2f} s",
            f"{r['p99_s']:.2f} s",
            f"{r['cpu_s_per_1000']:.2f}",
        )
    Console().print(table)
    print(json.dumps(meta))
    for r in results:
        if "double_profile" in r:
            print(f"-- the double's profile, workers={r['workers']}\n{r['double_profile']}")


if __name__ == "__main__":
    main()
