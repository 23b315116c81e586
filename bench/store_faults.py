"""Store faults under running and arriving jobs, measured: how soon scheduling is back.

Each trial is one fault of ``tests/service/storefaults.py`` with ``hetsched up`` as a real
process: a full disk (the SQLite home on a small tmpfs, filled by a ballast file for
``--hold`` seconds), PostgreSQL stopped ``-m immediate`` and started again, PostgreSQL's
primary crashed and its synchronous standby promoted behind the same address, or the home's
ext4 turned read-only by the kernel and repaired (a stop and a start). Jobs are submitted
every ~0.1 s throughout and tasks end during the fault. Printed per trial: the jobs
acknowledged, lost, failed, run twice, the answers by status (500s must be 0), and
**back**: from the fault's end (space freed, the server accepting connections again, the
service started again) to the first task that started after it. Needs root for the mounts
and PostgreSQL's binaries; a fault that cannot be made here is skipped with the reason.

    sudo .venv/bin/python bench/store_faults.py --trials 2
    sudo .venv/bin/python bench/store_faults.py --faults failover,read_only --trials 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "service"))

from faultinject import skip_reason  # noqa: E402
from storefaults import (  # noqa: E402
    FaultReport,
    disk_full,
    postgres_failover,
    postgres_restart,
    read_only,
)

_FAULTS = {
    "disk_full": disk_full,
    "postgres": postgres_restart,
    "failover": postgres_failover,
    "read_only": read_only,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default="disk_full,postgres", help="comma-separated")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--hold", type=float, default=6.0, help="seconds the fault lasts")
    args = parser.parse_args()
    for name in args.faults.split(","):
        if name not in _FAULTS:
            parser.error(f"--faults: unknown {name!r} (known: {', '.join(_FAULTS)})")
        reason = skip_reason(name)
        if reason is not None:
            print(f"{name}: skipped ({reason})")
            continue
        reports: list[FaultReport] = []
        for trial in range(args.trials):
            with tempfile.TemporaryDirectory(prefix="hetsched-fault-") as tmp:
                report, _server = _FAULTS[name](Path(tmp), args.hold)
            reports.append(report)
            print(f"{name} trial {trial + 1}: {report.summary()}", flush=True)
        backs = [r.back_s for r in reports if r.back_s is not None]
        if backs:
            print(
                f"{name}: back after median {statistics.median(backs):.2f}s, "
                f"max {max(backs):.2f}s over {len(backs)} trials"
            )


if __name__ == "__main__":
    main()
