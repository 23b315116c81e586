"""Peak memory and CPU time of ``hetsched sim replay -o json`` (per-job rows included).

    .venv/bin/python bench/replay_json.py --nodes 1000 --jobs 100000
    .venv/bin/python bench/replay_json.py --jobs 100000 --compare-src /path/to/older/src

Writes a heterogeneous cluster YAML (the mix of ``bench/sim_replay.py``: V100 and A100
8-GPU, P100 and K80 4-GPU nodes) and a synthetic workload (``hetsched sim synth --load``),
then runs ``hetsched sim replay --cluster ... --workload ... -o json`` as a child process
with its output to a file, and reports the child's peak resident memory (``ru_maxrss``,
what ``/usr/bin/time -v`` calls "Maximum resident set size"), its user and system CPU
time, the output's size and SHA-256. With ``--compare-src`` the ``src`` directory of
another checkout runs too, alternating run by run, and the outputs must be identical.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: (model, GPUs per node, GPU memory GiB, CPU cores, memory GiB, share of the nodes)
MIX = (("V100", 8, 32, 64, 512, 0.4), ("P100", 4, 16, 32, 256, 0.3),
       ("K80", 4, 12, 32, 256, 0.2), ("A100", 8, 80, 96, 1024, 0.1))  # fmt: skip


def write_cluster(path: Path, nodes: int) -> None:
    groups = []
    left = nodes
    for i, (model, gpus, gib, cores, mem, share) in enumerate(MIX):
        count = left if i == len(MIX) - 1 else round(nodes * share)
        left -= count
        device = {"class": "gpu", "vendor": "nvidia", "model": model, "count": gpus,
                  "attributes": {"memory_gib": gib}}  # fmt: skip
        groups.append({"name": f"{model.lower()}-{{i}}", "replicas": count, "cpu": str(cores),
                       "memory": f"{mem}Gi", "devices": [device]})  # fmt: skip
    path.write_text(yaml.safe_dump({"nodes": groups}, sort_keys=False))


def run(src: Path, args: list[str], out: Path) -> dict[str, float | str]:
    """One child run: its peak RSS (MiB), user and system CPU seconds, output digest."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    code = "from hetsched.cli.main import main; main()"
    with open(out, "wb") as handle:
        child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=handle, env=env)
        _pid, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{src}: hetsched sim replay failed ({status})")
    digest = hashlib.sha256(out.read_bytes()).hexdigest()[:16]
    return {"rss_mib": usage.ru_maxrss / 1024, "user_s": usage.ru_utime,
            "sys_s": usage.ru_stime, "bytes": out.stat().st_size, "sha256": digest}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--load", type=float, default=0.8, help="offered GPU load, 0..1")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--compare-src", type=Path, help="another checkout's src/ to run too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetsched-replay-json-") as tmp:
        folder = Path(tmp)
        cluster, workload = folder / "cluster.yaml", folder / "workload.csv"
        write_cluster(cluster, args.nodes)
        synth = ["sim", "synth", "--jobs", str(args.jobs), "--load", str(args.load),
                 "--cluster", str(cluster), "-O", str(workload)]  # fmt: skip
        subprocess.run([sys.executable, "-c", "from hetsched.cli.main import main; main()",
                        *synth], check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                       stdout=subprocess.DEVNULL)  # fmt: skip
        replay = ["sim", "replay", "--cluster", str(cluster), "--workload", str(workload),
                  "-o", "json"]  # fmt: skip
        sources = [("this", ROOT / "src")]
        if args.compare_src is not None:
            sources.insert(0, ("compare", args.compare_src.resolve()))
        print(f"{args.jobs} jobs on {args.nodes} nodes, load {args.load}; "
              f"load average before: {os.getloadavg()[0]:.1f}")  # fmt: skip
        results: dict[str, list[dict[str, float | str]]] = {name: [] for name, _ in sources}
        for _ in range(args.repeats):
            for name, src in sources:
                results[name].append(run(src, replay, folder / f"{name}.json"))
        print("| src | peak RSS MiB | user CPU s | system CPU s | output bytes | sha256 |")
        print("|---|---:|---:|---:|---:|---|")
        for name, runs in results.items():
            med = {k: statistics.median(float(r[k]) for r in runs)
                   for k in ("rss_mib", "user_s", "sys_s")}  # fmt: skip
            print(f"| {name} | {med['rss_mib']:.0f} | {med['user_s']:.1f} | {med['sys_s']:.1f} "
                  f"| {runs[0]['bytes']:,} | {runs[0]['sha256']} |")  # fmt: skip
        digests = {str(r["sha256"]) for runs in results.values() for r in runs}
        if len(digests) != 1:
            print(f"outputs differ: {sorted(digests)}")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
