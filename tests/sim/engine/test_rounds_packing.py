"""Space sharing in rounds (hetsched.sim.engine.packing) and the packed- policies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.sim.engine.packing import BUNDLED_PAIRS, PairRates, load_pair_rates, pack_round
from hetsched.sim.engine.packing import pair_rates as parse_pairs
from hetsched.sim.engine.round_mode import RoundConfig, RoundJob, RoundSimulator
from hetsched.sim.experiments.gavel import GavelPoint, gavel_policy_names
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, job_rates, load_throughputs

MODELS = ("m0",)
# kinds: a and b share well (1.5 of a device together), a and c badly (0.7), 2-GPU d with a
RAW: dict[str, Any] = {
    "m0": {
        "('a', 1)": {"null": 1.0, "('b', 1)": [0.8, 1.4], "('c', 1)": [0.3, 0.8]},
        "('b', 1)": {"null": 2.0, "('a', 1)": [1.4, 0.8]},
        "('c', 1)": {"null": 2.0},
        "('d', 2)": {"null": 1.0, "('a', 1)": [0.9, 0.9]},
    }
}


def _table() -> PairRates:
    return parse_pairs(RAW, MODELS)


def _kinds(table: PairRates, names: list[tuple[str, int]]) -> np.ndarray:
    return np.array([table.kinds.index(k) for k in names])


# (kinds of the jobs, assignment, need, expected hosts, expected rates)
CASES = [
    # b waits and joins a: a at 0.8 (of 1), b at 1.4 (of 2): 0.8 + 0.7 > 1
    ([("a", 1), ("b", 1)], [0, -1], [1, 1], [-1, 0], [0.8, 1.4]),
    # c would join a at 0.3 + 0.4 < 1: no pair
    ([("a", 1), ("c", 1)], [0, -1], [1, 1], [-1, -1], [1.0, 0.0]),
    # two waiting b: the one with more need joins the only host
    ([("a", 1), ("b", 1), ("b", 1)], [0, -1, -1], [1, 1, 5], [-1, -1, 0], [0.8, 0.0, 1.4]),
    # a 2-GPU job never shares with a 1-GPU one, whatever the table says
    ([("d", 2), ("a", 1)], [0, -1], [1, 1], [-1, -1], [1.0, 0.0]),
    # nothing waits: nothing changes
    ([("a", 1), ("b", 1)], [0, 0], [1, 1], [-1, -1], [1.0, 2.0]),
]


@pytest.mark.parametrize(("names", "assignment", "need", "hosts", "rates"), CASES)
def test_pack_round_literal_cases(
    names: list[tuple[str, int]],
    assignment: list[int],
    need: list[float],
    hosts: list[int],
    rates: list[float],
) -> None:
    table = _table()
    alone = {("a", 1): 1.0, ("b", 1): 2.0, ("c", 1): 2.0, ("d", 2): 1.0}
    scale = np.array([n for _, n in names])
    rates_alone = np.array([[alone[k]] for k in names])
    host, rate = pack_round(
        np.array(assignment), np.array(need, float), _kinds(table, names), scale, rates_alone, table
    )
    assert host.tolist() == hosts
    assert rate.tolist() == pytest.approx(rates)


def test_pair_table_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="no worker type 'v100'"):
        parse_pairs(RAW, ("v100",))
    with pytest.raises(ValueError, match="is not \\('<job type>', <GPUs>\\)"):
        parse_pairs({"m0": {"a": {"null": 1.0}}}, MODELS)


def test_bundled_pairs_match_gavels_table() -> None:
    bundled = load_pair_rates(BUNDLED_PAIRS, ("v100", "p100", "k80"))
    assert (bundled.host > 0).sum() == 1881  # every co-locatable pair of equal GPU counts
    a = bundled.kinds.index(("ResNet-50 (batch size 64)", 1))
    b = bundled.kinds.index(("ResNet-18 (batch size 16)", 1))
    assert bundled.host[0, a, b] == pytest.approx(4.06871)
    assert bundled.guest[0, a, b] == pytest.approx(20.3656)


def test_a_listed_zero_throughput_stays_zero() -> None:
    # Gavel's table cannot run ResNet-50 at batch size 128 on 2-8 K80s: not scaled from 1
    table = load_throughputs(BUNDLED_THROUGHPUTS)
    assert job_rates(table, "ResNet-50 (batch size 128)", 4)["k80"] == 0.0
    assert job_rates(table, "ResNet-50 (batch size 128)", 1)["k80"] > 0.0


def _run(jobs: list[RoundJob], capacity: int, pairs: PairRates | None) -> list[float | None]:
    config = RoundConfig("las", pairs=pairs)
    result = RoundSimulator(MODELS, [capacity], jobs, config).run()
    return [o.end for o in result.jobs]


def test_packing_lets_a_waiting_job_share_and_both_finish_sooner() -> None:
    jobs = [
        RoundJob("a", 0.0, (1.0,), 1, 3600.0, kind=("a", 1)),
        RoundJob("b", 0.0, (2.0,), 1, 7200.0, kind=("b", 1)),
    ]
    alone = _run(jobs, 1, None)
    packed = _run(jobs, 1, _table())
    assert alone[1] == pytest.approx(7200.0)  # the one device is busy until both are done
    assert max(e for e in packed if e is not None) < max(e for e in alone if e is not None)


_kind = st.sampled_from([("a", 1), ("b", 1), ("c", 1), ("d", 2), None])


@settings(max_examples=40, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.floats(0, 5000), _kind, st.floats(100.0, 20_000)), min_size=1, max_size=10
    ),
    capacity=st.integers(2, 3),
)
def test_packed_runs_finish_every_job_and_never_overuse_devices(
    jobs: list[tuple[float, tuple[str, int] | None, float]], capacity: int
) -> None:
    rate = {("a", 1): 1.0, ("b", 1): 2.0, ("c", 1): 2.0, ("d", 2): 1.0, None: 1.0}
    stream = [
        RoundJob(f"j{i}", t, (rate[k],), k[1] if k else 1, w, kind=k)
        for i, (t, k, w) in enumerate(sorted(jobs, key=lambda j: j[0]))
    ]
    config = RoundConfig("las", pairs=_table())
    result = RoundSimulator(MODELS, [capacity], stream, config).run()
    assert result.complete
    length = result.span[1] - result.span[0]
    assert result.busy[0] <= capacity * length * (1 + 1e-9) + 1e-6
    for job, outcome in zip(stream, result.jobs, strict=True):
        # no job runs faster than its rate alone or its best pair rate (1.4 for b)
        assert outcome.jct_s is not None and outcome.jct_s > 0
        assert outcome.jct_s >= job.work / max(job.rates[0], 1.4) * (1 - 1e-9)


def test_packed_las_is_a_gavel_policy_and_runs_a_point() -> None:
    assert "packed-las" in gavel_policy_names()
    assert "packed-agnostic-las" not in gavel_policy_names()
    table = load_throughputs(BUNDLED_THROUGHPUTS)
    # 30 measured jobs: as clear a difference as 60 (116 h against 151 h), in 40 % of the time
    point = GavelPoint("packed-las", rate=6.0, window=(0, 30), cluster=(4, 4, 4))
    packed = point.run(table)
    plain = GavelPoint("las", rate=6.0, window=(0, 30), cluster=(4, 4, 4)).run(table)
    assert packed.complete and plain.complete
    assert (packed.mean_jct_h() or 0) < (plain.mean_jct_h() or 0)
    with pytest.raises(ValueError, match="policy: unknown 'packed-nope'"):
        GavelPoint("packed-nope").run(table)
