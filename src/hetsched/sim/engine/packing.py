"""Space sharing in rounds: a job that waits this round may share the devices of one that
runs, when the pair does more work together than the running job alone.

Gavel measured every pair of its job types running together on the same GPU(s)
(``simulation_throughputs.json``: per worker type, ``[this job's steps/s, the other's]``;
``[0, 0]`` where the pair cannot share). Gavel's own space-sharing policies put pairs in the
allocation LP (one variable per pair of job types). Here the allocation stays the plain
one (LAS), and the round is packed after the mechanism chose it:

- jobs that got no devices this round are taken by the mechanism's order of need (their
  highest priority over the models, then arrival); each may join one running job of the
  same GPU count on that job's model, at most two jobs per device;
- it joins the running job for which the pair gains the most **effective work** (each
  job's rate as a fraction of its fastest rate, summed over both, minus what the running
  job did alone), and only if that gain is positive; so a pair never does less than the
  host alone, measured in the jobs' own units;
- both run the round at their pair rates; the mechanism's ledger records for each the
  time it ran times its pair rate over its rate alone there, so a host slowed by a guest
  is owed the difference and the guest is not charged a whole round.

``PairRates`` holds the table as arrays over job kinds (``(job type, GPUs)``), so a round's
packing is a few numpy operations per waiting job.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetsched.rounds.problem import FloatArray, IntArray

__all__ = ["BUNDLED_PAIRS", "Kind", "PairRates", "load_pair_rates", "pack_round", "pair_rates"]

#: a job kind: (job type, GPUs)
Kind = tuple[str, int]


@dataclass(frozen=True, slots=True, eq=False)
class PairRates:
    """``host[j, a, b]``: the rate of a job of kind ``a`` on model ``j`` sharing with kind
    ``b``; ``guest[j, a, b]`` the rate of ``b`` there (0 where the pair cannot share)."""

    models: tuple[str, ...]
    kinds: tuple[Kind, ...]
    host: FloatArray
    guest: FloatArray


#: Gavel's co-located throughputs of pairs of equal GPU counts (its
#: ``simulation_throughputs.json`` without the isolated rates), bundled
BUNDLED_PAIRS = str(Path(__file__).parent.parent / "data" / "gavel_pairs.json")


def load_pair_rates(path: str | Path, models: Sequence[str]) -> PairRates:
    """The co-located throughputs of Gavel's ``simulation_throughputs.json`` (or the
    bundled ``gavel_pairs.json``, the same format) for ``models`` (worker types). Raises
    ValueError naming what is malformed, OSError when the file cannot be read."""
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    return pair_rates(raw, models)


def _kind(text: str) -> Kind:
    try:
        job_type, gpus = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError):
        raise ValueError(f"pair key {text!r} is not ('<job type>', <GPUs>)") from None
    return str(job_type), int(gpus)


def pair_rates(raw: Mapping[str, object], models: Sequence[str]) -> PairRates:
    """:func:`load_pair_rates` on the parsed file."""
    kinds: dict[Kind, int] = {}
    for model in models:
        table = raw.get(model)
        if not isinstance(table, Mapping):
            raise ValueError(f"throughputs: no worker type {model!r}")
        for key, row in table.items():
            kinds.setdefault(_kind(str(key)), len(kinds))
            for other in row if isinstance(row, Mapping) else ():
                if other != "null":
                    kinds.setdefault(_kind(str(other)), len(kinds))
    k = len(kinds)
    host = np.zeros((len(models), k, k))
    guest = np.zeros((len(models), k, k))
    for j, model in enumerate(models):
        table = raw[model]
        assert isinstance(table, Mapping)
        for key, row in table.items():
            a = kinds[_kind(str(key))]
            if not isinstance(row, Mapping):
                continue
            for other, pair in row.items():
                if other == "null" or not isinstance(pair, list | tuple) or len(pair) != 2:
                    continue
                b = kinds[_kind(str(other))]
                if not all(isinstance(v, int | float) and v > 0 for v in pair):
                    continue
                host[j, a, b], guest[j, a, b] = float(pair[0]), float(pair[1])
    return PairRates(tuple(models), tuple(kinds), host, guest)


def pack_round(
    assignment: IntArray,
    need: FloatArray,
    kinds: IntArray,
    scale: IntArray,
    rates: FloatArray,
    table: PairRates,
) -> tuple[IntArray, FloatArray]:
    """Pack one round (see the module). ``assignment[i]``: the model job i runs on (-1:
    it waits); ``need[i]``: its order of need (higher first); ``kinds[i]``: its kind's
    index in ``table`` (-1: never shares); ``rates``: (n, m) rates alone.

    Returns ``(host, rate)``: ``host[i]`` the job a waiting job i joins (-1: none, and -1
    for every running job), ``rate[i]`` the rate job i runs at this round (its pair rate
    when it hosts or joins, its rate alone when it runs alone, 0 when it waits)."""
    n = len(assignment)
    rate = np.zeros(n)
    running = np.flatnonzero(assignment >= 0)
    rate[running] = rates[running, assignment[running]]
    host_of = np.full(n, -1, np.int64)
    best = rates.max(axis=1, initial=0.0)
    best = np.where(best > 0, best, 1.0)
    hosts = running[kinds[running] >= 0]
    waiting = np.flatnonzero((assignment < 0) & (kinds >= 0) & (rates.max(axis=1) > 0))
    if hosts.size == 0 or waiting.size == 0:
        return host_of, rate
    order = waiting[np.lexsort((waiting, -need[waiting]))]
    model = assignment[hosts]
    alone = rate[hosts] / best[hosts]
    free = np.ones(hosts.size, bool)
    for g in order:
        pa = table.host[model, kinds[hosts], kinds[g]]
        pb = table.guest[model, kinds[hosts], kinds[g]]
        gain = pa / best[hosts] + pb / best[g] - alone
        ok = free & (pa > 0) & (pb > 0) & (scale[hosts] == scale[g]) & (gain > 0)
        if not ok.any():
            continue
        pick = int(np.argmax(np.where(ok, gain, -np.inf)))
        h = hosts[pick]
        host_of[g] = h
        rate[h], rate[g] = pa[pick], pb[pick]
        free[pick] = False
        if not free.any():
            break
    return host_of, rate
