"""``hetsched place`` end to end: YAML in, placements out, for thousands of jobs and nodes.

Writes a cluster YAML of N explicit node entries (A100, H100, V100, T4, FPGA and CPU-only
nodes, each with its own labels) and a jobs YAML of M jobs (whole, multi-GPU and fractional
GPU requests, a third with a model selector, CPU-only and FPGA jobs), sized so that most
jobs fit. Then:

1. end to end: ``hetsched place -o json`` as a subprocess (interpreter start, imports, YAML
   parsing, validation, one scheduling pass, JSON output), wall time; placements/s is the
   number of tasks placed divided by it;
2. the phases in process, each as wall and CPU time: reading both YAML files with PyYAML's
   pure-Python loader, with its C loader (libyaml) and with hetsched's loader
   (``hetsched.model.yamlio``: libyaml's events built straight into plain mappings and
   lists, the garbage collector paused) side by side; validation by the spec models
   (``parse_cluster``, ``parse_jobs``) with the collector on and paused; the whole
   ``place_jobs`` (read, validate, schedule); JSON output with ``json.dumps`` and with
   hetsched's encoder (``hetsched.cli.json_text``, the same text).

CPU time is reported beside wall time because the machine is shared: under load, wall time
measures the other work as much as this one.

Each checkout runs once unmeasured first (as a user's first run after installing: it fills
the CEL parser cache, kept here in a temporary folder, and the file cache). Each checkout's
``hetsched`` package is copied (without any ``__pycache__``) into a temporary folder and run
from there (``PYTHONPATH``), ``PYTHONDONTWRITEBYTECODE=1`` set, two ways side by side:
"compiled at every start" (the copy has no compiled modules, so every start compiles
hetsched's modules from source, as a checkout without them does) and "compiled modules"
(the copy compiled once with ``compileall``, as pip does when it installs a package and as
``make setup`` does for the checkout). Both checkouts are measured the same way, whatever
compiled modules their own folders hold; third-party modules keep theirs.

    .venv/bin/python bench/place_e2e.py                     # 5,000 jobs on 5,000 nodes
    .venv/bin/python bench/place_e2e.py --jobs 20000 --nodes 10000 --repeats 5
    .venv/bin/python bench/place_e2e.py --compare-src /path/to/older/checkout/src
    .venv/bin/python bench/place_e2e.py --bytecode-cache --compare-src /path/to/older/src
    .venv/bin/python bench/place_e2e.py --style flow           # hand-written style files
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import hetsched
from hetsched.cli.json_text import dumps_indented
from hetsched.cli.place import place_jobs
from hetsched.model.specs import parse_cluster, parse_jobs
from hetsched.model.yamlio import C_LOADER, gc_paused, safe_load

_KINDS = [  # (kind, share of nodes, cpu cores, memory GiB, devices)
    ("A100", 0.30, 96, 1024, ("gpu", "nvidia", "A100", 8, 80)),
    ("H100", 0.15, 128, 2048, ("gpu", "nvidia", "H100", 8, 80)),
    ("V100", 0.20, 48, 384, ("gpu", "nvidia", "V100", 4, 32)),
    ("T4", 0.10, 32, 192, ("gpu", "nvidia", "T4", 2, 16)),
    ("FPGA", 0.05, 32, 128, ("fpga", "xilinx", "U250", 2, 64)),
    ("CPU", 0.20, 128, 512, None),
]


def cluster_doc(nodes: int) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    bounds, total = [], 0.0
    for kind in _KINDS:
        total += kind[1]
        bounds.append(total)
    for i in range(nodes):
        at = (i * 0.6180339887) % 1.0  # spread the kinds over the list, deterministically
        kind = next(k for k, b in zip(_KINDS, bounds, strict=True) if at < b)
        name, _share, cores, gib, devices = kind
        node: dict[str, Any] = {
            "name": f"{name.lower()}-{i:05d}",
            "cpu": str(cores),
            "memory": f"{gib}Gi",
            "labels": {"zone": f"z{i % 3}", "rack": f"r{i % 40}"},
        }
        if devices is not None:
            cls, vendor, model, count, mem = devices
            node["devices"] = [
                {
                    "class": cls,
                    "vendor": vendor,
                    "model": model,
                    "count": count,
                    "attributes": {"memory_gib": mem},
                }
            ]
        out.append(node)
    return {"nodes": out}


def jobs_doc(jobs: int) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for i in range(jobs):
        kind = i % 10
        resources: dict[str, Any] = {"cpu": "4", "memory": "16Gi"}
        if kind < 3:
            resources["devices"] = [{"class": "gpu", "count": 1}]
        elif kind < 5:
            resources["devices"] = [{"class": "gpu", "count": 2, "model": ["A100", "H100"]}]
        elif kind < 7:
            resources["devices"] = [{"class": "gpu", "share": 250 + 250 * (i % 3)}]
        elif kind == 7:
            selector = 'device.attributes["memory_gib"] >= 32'
            resources["devices"] = [{"class": "gpu", "count": 4, "selector": selector}]
        elif kind == 8:
            resources["devices"] = [{"class": "fpga"}]
        out.append(
            {"name": f"job-{i:05d}", "user": f"u{i % 7}", "priority": i % 3, "resources": resources}
        )
    return {"jobs": out}


def _timed(fn: Any, repeats: int) -> tuple[float, float, Any]:
    """Medians of (wall seconds, CPU seconds of this process) over ``repeats`` calls."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


#: the digests of every output printed: one when every run and checkout printed the same
OUTPUTS: set[str] = set()


#: the two ways hetsched's modules are found at a start (see the module's docstring)
MODES = {"source": "compiled at every start", "compiled": "compiled modules"}


def run_env(src: Path | None, scratch: Path, mode: str) -> dict[str, str]:
    """The environment of one checkout's runs in ``mode`` (a key of :data:`MODES`): its
    ``hetsched`` package (of ``src``, else of this checkout) copied under ``scratch`` without
    compiled modules, then compiled there for ``compiled``; its own parser cache there."""
    package = Path(hetsched.__file__).parent if src is None else src / "hetsched"
    copy = scratch / "src"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(package, copy / "hetsched", ignore=shutil.ignore_patterns("__pycache__"))
    if mode == "compiled" and not compileall.compile_dir(copy, quiet=1):
        raise SystemExit(f"{package}: does not compile")
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(scratch / "cache")
    env.pop("HETSCHED_NO_CACHE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a run leaves the copy as it found it
    env["PYTHONPATH"] = str(copy)
    return env


def end_to_end(
    cluster: Path, jobs: Path, repeats: int, env: dict[str, str] | None = None
) -> tuple[float, float, int]:
    """Medians of (wall, CPU = user + system) seconds of ``hetsched place -o json`` run in
    ``env`` (see :func:`run_env`)."""
    argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()", "place"]
    argv += ["--cluster", str(cluster), "--jobs", str(jobs), "-o", "json"]
    env = dict(os.environ) if env is None else env
    walls, cpus, placed = [], [], 0
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, check=True, env=env)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        placed = len(json.loads(done.stdout)["placements"])
        OUTPUTS.add(hashlib.sha256(done.stdout).hexdigest())
    return statistics.median(walls), statistics.median(cpus), placed


def phases(cluster: Path, jobs: Path, repeats: int) -> dict[str, tuple[float, float]]:
    def read(load: Any) -> tuple[Any, Any]:
        return load(cluster.read_bytes()), load(jobs.read_bytes())

    out: dict[str, tuple[float, float]] = {}
    loaders: dict[str, Any] = {
        "read YAML: yaml.safe_load (pure Python)": yaml.safe_load,
        "read YAML: yaml.load, CSafeLoader": lambda t: yaml.load(t, Loader=yaml.CSafeLoader),
        "read YAML: hetsched's safe_load": safe_load,
    }
    if not C_LOADER:
        del loaders["read YAML: yaml.load, CSafeLoader"]
    docs: Any = None
    for name, load in loaders.items():
        *out[name], docs = _timed(lambda load=load: read(load), repeats)

    def validate() -> Any:
        return parse_cluster(docs[0]), parse_jobs(docs[1])

    *out["validate (GC on)"], _ = _timed(validate, repeats)

    def validate_paused() -> Any:
        with gc_paused():
            return validate()

    *out["validate (GC paused)"], _ = _timed(validate_paused, repeats)
    *out["place_jobs: read, validate, schedule"], result = _timed(
        lambda: place_jobs(cluster, jobs, None), repeats
    )
    *out["JSON output: json.dumps(indent=2)"], _ = _timed(
        lambda: json.dumps(result, indent=2), repeats
    )
    *out["JSON output: hetsched's dumps_indented"], _ = _timed(
        lambda: dumps_indented(result), repeats
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--style",
        choices=["block", "flow"],
        default="block",
        help="YAML style of the files written: block (as yaml.safe_dump writes) or flow "
        "(innermost collections on one line, as in hand-written files)",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--bytecode-cache",
        action="store_true",
        help="measure only with compiled modules, as an installed package (or a checkout after "
        "make setup) has them (default: that and compiling hetsched's modules at every "
        "start, side by side)",
    )
    only.add_argument(
        "--source-only",
        action="store_true",
        help="measure only compiling hetsched's modules at every start",
    )
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="also run the src/ directory of another checkout (e.g. the previous release), "
        "alternating run by run with this one",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetsched-place-") as tmp:
        cluster, jobs = Path(tmp) / "cluster.yaml", Path(tmp) / "jobs.yaml"
        # block style: every collection on lines of its own; flow: the innermost ones on
        # one line each (``labels: {zone: z1, rack: r3}``), as files are often written by hand
        flow = None if args.style == "flow" else False
        dump: dict[str, Any] = {"sort_keys": False, "default_flow_style": flow}
        cluster.write_text(yaml.safe_dump(cluster_doc(args.nodes), **dump))
        jobs.write_text(yaml.safe_dump(jobs_doc(args.jobs), **dump))
        sizes = f"{os.path.getsize(cluster) >> 10} KiB + {os.path.getsize(jobs) >> 10} KiB"
        modes = ["compiled"] if args.bytecode_cache else ["source"] if args.source_only else []
        runs: list[tuple[str, dict[str, str]]] = []
        checkouts: list[tuple[str, Path | None]] = [("this checkout", None)]
        if args.compare_src is not None:
            checkouts.insert(0, (str(args.compare_src), args.compare_src))
        for mode in modes or list(MODES):
            for i, (label, src) in enumerate(checkouts):
                scratch = Path(tmp) / f"{mode}-{i}"
                runs.append((f"{label}, {MODES[mode]}", run_env(src, scratch, mode)))
        print(
            f"{args.jobs} jobs on {args.nodes} nodes ({sizes} of {args.style}-style YAML), "
            f"{args.repeats} runs"
        )
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        print()
        print("| hetsched place -o json | placed | wall | placements/s (wall) | CPU | /s (CPU) |")
        print("|---|---|---|---|---|---|")
        for _label, env in runs:
            end_to_end(cluster, jobs, 1, env)  # a first run, unmeasured: caches filled
        # the checkouts alternate run by run, so a change of the machine's load meets both
        measured: dict[str, list[tuple[float, float, int]]] = {label: [] for label, _ in runs}
        for _ in range(args.repeats):
            for label, env in runs:
                measured[label].append(end_to_end(cluster, jobs, 1, env))
        for label, _ in runs:
            wall = statistics.median(m[0] for m in measured[label])
            cpu = statistics.median(m[1] for m in measured[label])
            placed = measured[label][-1][2]
            print(
                f"| {label} | {placed} | {wall:.2f} s | {placed / wall:,.0f} | {cpu:.2f} s | "
                f"{placed / cpu:,.0f} |"
            )
        same = "byte for byte the same" if len(OUTPUTS) == 1 else "NOT the same"
        print(f"\nthe output of every run: {same}")
        print()
        print("| phase, in process | wall (median) | CPU (median) |")
        print("|---|---|---|")
        for name, (w, c) in phases(cluster, jobs, args.repeats).items():
            print(f"| {name} | {w * 1000:.0f} ms | {c * 1000:.0f} ms |")
        print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
