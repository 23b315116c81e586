#!/usr/bin/env python3
"""A training-like loop that follows hetsched's checkpoint protocol (numpy only).

It fits a linear model by gradient descent, one step every ``--step-s`` seconds, and:

- starts from ``$HETSCHED_RESUME_FROM`` when hetsched gives it one (the checkpoint its job
  saved last), else from scratch, and says on its first line at which step it starts;
- saves its state to ``$HETSCHED_CHECKPOINT_DIR`` every ``--every`` steps, and at once when
  it gets its notice signal (``$HETSCHED_NOTICE_SIGNAL``, SIGUSR1 by default), then exits;
- reports each checkpoint: by writing ``{"step": N, "path": "..."}`` to
  ``$HETSCHED_CHECKPOINT_DIR/CHECKPOINT`` (a temporary file, then a rename), or, with
  ``--report cli``, by running ``hetsched checkpoint --step N --path P``.

A report made inside the notice ends it: hetsched stops the task right away instead of
waiting out the notice. Run outside hetsched it uses ./checkpoints and never gets a notice.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FEATURES = 32


def save(directory: Path, step: int, weights: np.ndarray, loss: float) -> Path:
    """Write the state for ``step`` atomically (a temporary file, then a rename)."""
    path = directory / f"step-{step:06d}.npz"
    temporary = directory / f".step-{step:06d}.{os.getpid()}.npz"
    np.savez(temporary, step=step, weights=weights, loss=loss)
    os.replace(temporary, path)
    return path


def report(directory: Path, step: int, path: Path, how: str) -> None:
    """Tell hetsched about a checkpoint: the report file, or the CLI."""
    if how == "cli":
        command = ["hetsched", "checkpoint", "--step", str(step), "--path", str(path)]
        # the notice goes to the whole process group: blocked here (and so in the child,
        # which inherits the mask), it cannot end the report; it is handled once unblocked
        notice = {notice_signal()}
        signal.pthread_sigmask(signal.SIG_BLOCK, notice)
        try:
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, notice)
        return
    temporary = directory / f".CHECKPOINT.{os.getpid()}"
    temporary.write_text(json.dumps({"step": step, "path": str(path)}))
    os.replace(temporary, directory / "CHECKPOINT")


def notice_signal() -> signal.Signals:
    """The signal hetsched sends as the notice (the job's ``checkpoint.signal``)."""
    return signal.Signals[os.environ.get("HETSCHED_NOTICE_SIGNAL", "SIGUSR1")]


def load(resume: str | None) -> tuple[int, np.ndarray | None]:
    """The step and weights of the checkpoint to resume from (0 and None without one)."""
    if not resume or not Path(resume).is_file():
        return 0, None
    with np.load(resume) as data:
        return int(data["step"]), np.array(data["weights"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps in all")
    parser.add_argument("--every", type=int, default=10, help="save every N steps")
    parser.add_argument("--step-s", type=float, default=0.2, help="seconds per step")
    parser.add_argument("--report", choices=["file", "cli"], default="file")
    args = parser.parse_args()

    directory = Path(os.environ.get("HETSCHED_CHECKPOINT_DIR", "checkpoints"))
    directory.mkdir(parents=True, exist_ok=True)
    resume = os.environ.get("HETSCHED_RESUME_FROM")
    step, weights = load(resume)
    origin = f"resuming from {resume}" if weights is not None else "from scratch"
    print(f"starting at step {step} ({origin})", flush=True)

    rng = np.random.default_rng(0)
    truth = rng.normal(size=FEATURES)
    if weights is None:
        weights = np.zeros(FEATURES)
    noticed = False

    def on_notice(_signum: int, _frame: object) -> None:
        nonlocal noticed
        noticed = True

    signal.signal(notice_signal(), on_notice)
    saved, said = step, False

    def on_term(_signum: int, _frame: object) -> None:
        # a checkpoint reported inside the notice ends it, and SIGTERM follows at once: it
        # may come before the loop says so, so say it here and stop cleanly
        if noticed:
            if not said:
                print(f"notice received: saved at step {saved}, stopping", flush=True)
            os._exit(0)
        raise SystemExit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)

    loss = float("nan")
    while step < args.steps:
        batch = np.random.default_rng(step).normal(size=(256, FEATURES))
        error = batch @ weights - batch @ truth
        weights -= 0.05 * batch.T @ error / len(batch)
        loss = float(np.mean(error**2))
        time.sleep(args.step_s)
        step += 1
        if step % args.every == 0 or noticed:
            path = save(directory, step, weights, loss)
            saved = step
            report(directory, step, path, args.report)
            print(f"step {step}: loss {loss:.4f}, saved {path.name}", flush=True)
        if noticed:
            said = True
            print(f"notice received: saved at step {saved}, stopping", flush=True)
            return 0
    print(f"done at step {step}: loss {loss:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
