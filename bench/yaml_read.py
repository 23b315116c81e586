"""Reading the YAML files of ``hetsched place``: ``hetsched.model.yamlio.safe_load`` in process.

Writes the cluster (N explicit nodes) and jobs (M jobs) files of ``bench/place_e2e.py`` and
reads each with ``safe_load`` from bytes (each written twice by default: in block style,
``yaml.safe_dump(doc)``, and with leaf collections on one line in flow style,
``yaml.safe_dump(doc, default_flow_style=None)`` as hand-written files look; ``--styles``
picks), as ``place`` does: the first read of a fresh
process (as ``place`` reads each file once) and the median of the next ``--repeats`` reads,
each as CPU time (``time.process_time``) and wall time. With ``--compare-src``, the
``src/`` directory of another checkout is measured the same way, each round in a fresh
process per checkout, alternating, so a change of the machine's load meets both; the
values both read are checked to be the same (types and key order included).

    .venv/bin/python bench/yaml_read.py
    .venv/bin/python bench/yaml_read.py --rounds 5 --compare-src /path/to/older/checkout/src
    .venv/bin/python bench/yaml_read.py --styles flow
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from place_e2e import cluster_doc, jobs_doc

#: run in a fresh process: read each file once, then ``repeats`` times; prints JSON
_MEASURE = """
import hashlib, json, sys, time
from hetsched.model import yamlio
def typed(v):
    if isinstance(v, dict):
        return ["dict", [[typed(k), typed(x)] for k, x in v.items()]]
    if isinstance(v, list):
        return ["list", [typed(x) for x in v]]
    return [type(v).__name__, repr(v)]
out = {}
for path in sys.argv[2:]:
    data = open(path, "rb").read()
    cpu, wall = time.process_time(), time.perf_counter()
    value = yamlio.safe_load(data)
    first = (time.process_time() - cpu, time.perf_counter() - wall)
    runs = []
    for _ in range(int(sys.argv[1])):
        cpu, wall = time.process_time(), time.perf_counter()
        yamlio.safe_load(data)
        runs.append((time.process_time() - cpu, time.perf_counter() - wall))
    digest = hashlib.sha256(json.dumps(typed(value)).encode()).hexdigest()
    out[path] = {"first": first, "runs": runs, "digest": digest}
print(json.dumps(out))
"""


def measure(src: Path | None, files: list[Path], repeats: int) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    argv = [sys.executable, "-c", _MEASURE, str(repeats), *map(str, files)]
    done = subprocess.run(argv, capture_output=True, check=True, env=env, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5, help="reads after the first")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per checkout")
    parser.add_argument("--compare-src", type=Path, help="the src/ of another checkout")
    parser.add_argument(
        "--styles",
        default="block,flow",
        help="comma-separated: block (default_flow_style=False), flow (=None: leaf "
        "collections on one line)",
    )
    args = parser.parse_args()
    styles = {"block": False, "flow": None}
    chosen = args.styles.split(",")
    if not chosen or any(style not in styles for style in chosen):
        parser.error(f"--styles: expected block and/or flow, got {args.styles!r}")
    with tempfile.TemporaryDirectory(prefix="hetsched-yaml-") as tmp:
        files = []
        docs = {"cluster": cluster_doc(args.nodes), "jobs": jobs_doc(args.jobs)}
        for style in chosen:
            for name, doc in docs.items():
                path = Path(tmp) / f"{name}-{style}.yaml"
                flow = styles[style]
                path.write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=flow))
                files.append(path)
        checkouts: list[tuple[str, Path | None]] = [("this checkout", None)]
        if args.compare_src is not None:
            checkouts.insert(0, (str(args.compare_src), args.compare_src))
        sizes = " + ".join(f"{os.path.getsize(f) >> 10} KiB" for f in files)
        print(f"{args.nodes} nodes, {args.jobs} jobs ({sizes}); {args.rounds} rounds")
        print(f"load average before: {os.getloadavg()[0]:.1f}\n")
        rounds: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in checkouts}
        for _ in range(args.rounds):
            for label, src in checkouts:
                rounds[label].append(measure(src, files, args.repeats))
        print("| checkout | file | first read CPU | first read wall | next reads CPU (median) |")
        print("|---|---|---:|---:|---:|")
        digests = set()
        for label, _ in checkouts:
            total = 0.0
            for path in map(str, files):
                first_cpu = statistics.median(r[path]["first"][0] for r in rounds[label])
                first_wall = statistics.median(r[path]["first"][1] for r in rounds[label])
                later = statistics.median(c for r in rounds[label] for c, _ in r[path]["runs"])
                digests.update((path, r[path]["digest"]) for r in rounds[label])
                total += first_cpu
                name = Path(path).name
                print(
                    f"| {label} | {name} | {first_cpu * 1000:.0f} ms | "
                    f"{first_wall * 1000:.0f} ms | {later * 1000:.0f} ms |"
                )
            print(f"| {label} | all, first read | {total * 1000:.0f} ms | | |")
        same = len(digests) == len(files)
        print(f"\nthe values read: {'the same' if same else 'NOT the same'} in every run")
        print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
