"""``make demo``: start ``hetsched up --demo``, run the demo workload, summarize, shut down.

Run as ``python -m hetsched.service.demo``. Everything happens in a temporary home on a free
loopback port; the service runs as a real subprocess and is stopped with SIGTERM at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live

from hetsched.model.yamlio import safe_load
from hetsched.service.demo_view import Events, view

__all__ = ["main", "summarize"]

_TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}
console = Console()
#: the repository's examples (the service's own modules are not imported here: the first
#: line is printed at once, and the service starts in a process of its own)
_EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def examples_dir() -> Path:
    return _EXAMPLES


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def summarize(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Jobs by final state, wait times, device-model utilization and preemptions."""
    waits = [j["first_started_at"] - j["submitted_at"] for j in jobs if j.get("first_started_at")]
    start = min(j["submitted_at"] for j in jobs)
    end = max((j["ended_at"] or time.time()) for j in jobs)
    span = max(end - start, 1e-9)
    models: Counter[str] = Counter()
    model_of: dict[str, str] = {}
    for n in nodes:
        for d in n["devices"]:
            label = f"{d['class']} {d['model']}"
            models[label] += 1
            model_of[d["id"]] = label
    busy: Counter[str] = Counter()
    for j in jobs:
        for t in j.get("tasks", []):
            if not t["started_at"]:
                continue
            duration = (t["ended_at"] or end) - t["started_at"]
            for d in t["devices"]:
                busy[model_of.get(d["id"], "?")] += duration * d["share"] / 1000
    return {
        "jobs": len(jobs),
        "by_state": dict(Counter(j["state"] for j in jobs)),
        "wait_mean_s": sum(waits) / len(waits) if waits else 0.0,
        "wait_p99_s": _percentile(waits, 99),
        "makespan_s": span,
        "utilization": {m: busy[m] / (models[m] * span) for m in sorted(models)},
        "preemptions": sum(j["preemptions"] for j in jobs),
        "preempted": sorted(j["name"] for j in jobs if j["preemptions"]),
        "lost_work_s": {j["name"]: j.get("lost_work_s", 0.0) for j in jobs if j["preemptions"]},
    }


def _with_workdir(body: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A job whose relative ``workdir`` is taken from ``folder`` (the workload's), as
    ``hetsched submit`` takes it from the job file's folder."""
    workdir = body.get("workdir")
    if isinstance(workdir, str) and workdir and not workdir.startswith("/"):
        return {**body, "workdir": str((folder / workdir).resolve())}
    return body


def _wait_ready(url: str, proc: subprocess.Popen[bytes], deadline: float) -> None:
    started = time.monotonic()
    with console.status("waiting for hetsched up to answer") as status:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"hetsched up exited with {proc.returncode}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    console.print(f"hetsched up answered after {time.monotonic() - started:.1f}s")
                    return
            except httpx.TransportError:
                pass
            status.update(f"waiting for hetsched up to answer ({time.monotonic() - started:.0f}s)")
            time.sleep(0.1)
    raise SystemExit("hetsched up did not become ready")


def main() -> int:
    workload = safe_load((examples_dir() / "workloads" / "demo.yaml").read_bytes())
    home = Path(tempfile.mkdtemp(prefix="hetsched-demo-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = open(home / "server.log", "wb")  # noqa: SIM115 - closed in finally
    argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()", "up", "--demo"]
    argv += ["--home", str(home), "--port", str(port), "--kill-grace", "2"]
    console.print(f"[bold]starting[/bold] hetsched up --demo on {url} (home {home})")
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
    )
    status = 1
    try:
        _wait_ready(url, proc, time.monotonic() + 60)
        token = (home / "admin.token").read_text().strip()
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        nodes = client.get("/v1/nodes").json()
        console.print(
            f"{len(nodes)} nodes: "
            + ", ".join(
                f"{n['name']} ({len(n['devices'])} devices)" if n["devices"] else n["name"]
                for n in nodes
            )
        )
        jobs = _run_workload(client, workload)
        summary = summarize(jobs, nodes)
        _print_summary(summary)
        _print_speeds(client, jobs, nodes)
        _print_logs(client, jobs)
        status = 0 if summary["by_state"] == {"succeeded": len(jobs)} else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log_file.close()
        console.print(f"\nhetsched up stopped (exit status {proc.returncode})")
        if status == 0:
            shutil.rmtree(home, ignore_errors=True)
        else:
            console.print(f"state and server log kept in {home}")
    # the demo's service is gone: the hint starts one that stays
    console.print(
        "to try it yourself: [bold].venv/bin/hetsched up --demo &[/bold] then "
        "[bold].venv/bin/hetsched submit examples/workloads/demo.yaml[/bold] "
        "(README.md, A short tour)",
        highlight=False,
    )
    return status


def _run_workload(client: httpx.Client, workload: dict[str, Any]) -> list[dict[str, Any]]:
    """Submit the workload's jobs (its ``later`` ones once the batch job runs, to preempt
    it), show their progress until all have ended, and return them as they ended."""
    ids: list[str] = []

    def submit(body: dict[str, Any]) -> None:
        response = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": body["name"]})
        response.raise_for_status()
        ids.append(response.json()["id"])

    for body in workload["jobs"]:
        submit(_with_workdir(body, examples_dir() / "workloads"))
    later = list(workload.get("later", []))
    started = time.monotonic()
    deadline = started + 100
    events = Events()
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while time.monotonic() < deadline:
            jobs = [client.get(f"/v1/jobs/{i}").json() for i in ids]
            _see(client, jobs, events, live)
            live.update(view(jobs, events, console.size.height, time.monotonic() - started))
            by_name = {j["name"]: j for j in jobs}
            if later and by_name.get("batch-embed", {}).get("state") == "running":
                time.sleep(1.0)  # let it work a little before it is preempted
                for body in later:
                    submit(body)
                later = []
            if not later and all(j["state"] in _TERMINAL for j in jobs):
                break
            time.sleep(0.5)
    return [client.get(f"/v1/jobs/{i}").json() for i in ids]


def _see(client: httpx.Client, jobs: list[dict[str, Any]], events: Events, live: Live) -> None:
    """Feed the events the jobs show; a preempted job's history says by whom. Through a
    pipe, where the live view is printed only at the end, each event is a line at once."""
    history = {
        j["id"]: [h["cause"] for h in client.get(f"/v1/jobs/{j['id']}/why").json()["history"]]
        for j in jobs
        if j["preemptions"] and j["preemptions"] > events.count(j["id"])
    }
    before = len(events.lines)
    events.seen(jobs, history)
    if not console.is_terminal:
        for line in events.lines[before:]:
            live.console.print(f"» {line}", highlight=False)


def _print_logs(client: httpx.Client, jobs: list[dict[str, Any]]) -> None:
    for name in ("allreduce", "batch-embed"):
        shown = next((j for j in jobs if j["name"] == name), jobs[0])
        log = client.get(f"/v1/jobs/{shown['id']}/logs", params={"task": 0}).json()
        console.print(f"\n[bold]log of {shown['name']} (task 0)[/bold]")
        console.print(log["data"].rstrip(), markup=False, highlight=False)


def _print_summary(summary: dict[str, Any]) -> None:
    console.print("\n[bold]summary[/bold]")
    states = ", ".join(f"{n} {s}" for s, n in sorted(summary["by_state"].items()))
    console.print(f"  jobs: {summary['jobs']} ({states})")
    console.print(
        f"  wait: mean {summary['wait_mean_s']:.2f}s, p99 {summary['wait_p99_s']:.2f}s; "
        f"makespan {summary['makespan_s']:.1f}s"
    )
    console.print("  utilization per device model:")
    for model, value in summary["utilization"].items():
        console.print(f"    {model:<12} {value:6.1%}")
    victims = ", ".join(summary["preempted"])
    console.print(f"  preemptions: {summary['preemptions']}" + (f" ({victims})" if victims else ""))
    for name, lost in summary["lost_work_s"].items():
        console.print(f"  {name} lost {lost:.1f}s of work (since its last checkpoint)")


def _print_speeds(client: httpx.Client, jobs: list[dict[str, Any]], nodes: list[Any]) -> None:
    """Where the demo job type ran and the speeds the service learned from its progress."""
    model_of = {d["id"]: d["model"] for n in nodes for d in n["devices"]}
    for job in jobs:
        if job["name"] != "train-speed":
            continue
        models = sorted({model_of.get(d["id"], "?") for t in job["tasks"] for d in t["devices"]})
        console.print(f"  train-speed (job type demo-train) ran on {', '.join(models)}")
    for e in client.get("/v1/speeds").json()["estimates"]:
        console.print(
            f"  learned: {e['job_type']} on {e['model']}: {e['steps_per_second']:.1f} steps/s "
            f"per device ({e['samples']} intervals)"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
