"""A training-like loop that reports its progress, so hetsched learns its speed.

It runs at a speed that depends on the device model it was given (``--rates``; a stand-in
for a real model's throughput on real GPUs: it reads the model from ``HETSCHED_DEVICES``),
and every ``--every`` seconds reports the steps done so far, either by writing
``{"steps": N}`` to ``$HETSCHED_PROGRESS_FILE`` (a temporary file, then a rename) or with
``hetsched progress --steps N``. Standard library only.

    python3 train.py --rates A100=40,V100=20,T4=10 --seconds 4 --every 0.5 [--report cli]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _model() -> str:
    devices = json.loads(os.environ.get("HETSCHED_DEVICES", "[]"))
    return str(devices[0]["model"]) if devices else "cpu"


def _report(steps: int, how: str) -> None:
    if how == "cli":
        subprocess.run(["hetsched", "progress", "--steps", str(steps)], check=True)
        return
    target = Path(os.environ["HETSCHED_PROGRESS_FILE"])
    temporary = target.with_name(f".{target.name}.{os.getpid()}")
    temporary.write_text(json.dumps({"steps": steps}))
    os.replace(temporary, target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="A100=40,V100=20,T4=10", help="model=steps/s,...")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long to train")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between reports")
    parser.add_argument("--report", choices=["file", "cli"], default="file")
    args = parser.parse_args()
    rates = {m: float(r) for m, _, r in (p.partition("=") for p in args.rates.split(","))}
    model = _model()
    rate = rates.get(model, min(rates.values()))
    print(f"training on {model} at {rate:g} steps/s", flush=True)
    started = time.monotonic()
    steps = 0
    _report(steps, args.report)
    while (elapsed := time.monotonic() - started) < args.seconds:
        time.sleep(min(args.every, args.seconds - elapsed))
        steps = int(rate * (time.monotonic() - started))
        _report(steps, args.report)
    print(f"done: {steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
