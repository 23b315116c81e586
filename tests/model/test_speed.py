"""The speed model: rates per device model, work, and the time a job needs on a model."""

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import TRACES
from builders import job as make_job
from hetsched.framework.profile import ProfileError, parse_profile
from hetsched.framework.speeds import SpeedsSpec, load_speed_table, read_gavel_table
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.specs import SpecError, parse_jobs
from hetsched.model.speed import JobSpeed, SpeedError, SpeedTable, job_devices, resolve, time_on

GAVEL = TRACES / "gavel"
RESNET50 = "ResNet-50 (batch size 64)"


def _job(speed: JobSpeed, gpus: int = 1, replicas: int = 1) -> Job:
    request = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", gpus),))
    return Job("j", request, replicas=replicas, speed=speed)


def test_no_speed_information_means_every_model_is_equal() -> None:
    speeds = resolve(make_job("plain", gpus=1), duration_s=600)
    assert speeds.uniform
    assert [speeds.on(m) for m in ("A100", "T4", "anything")] == [1.0, 1.0, 1.0]
    assert speeds.time_on("A100") == speeds.time_on("T4") == 600


@pytest.mark.parametrize(
    ("speed", "model", "rate", "seconds"),
    [
        # steps and steps/s: time = steps / rate
        (JobSpeed({"A100": 3.1, "V100": 1.0, "T4": 0.35}, work=1.2e6), "V100", 1.0, 1.2e6),
        (JobSpeed({"A100": 4.0, "V100": 1.0}, work=400.0), "A100", 4.0, 100.0),
        # models match case-insensitively
        (JobSpeed({"A100": 4.0, "V100": 1.0}, work=400.0), "a100", 4.0, 100.0),
        # an unlisted model runs at the slowest listed positive rate
        (JobSpeed({"A100": 4.0, "V100": 2.0, "K80": 0.0}, work=400.0), "T4", 2.0, 200.0),
        # ... or at the '*' rate when the job gives one
        (JobSpeed({"A100": 4.0, "*": 0.5}, work=400.0), "T4", 0.5, 800.0),
        # a duration on a model: two hours on a V100, half of it on a 2x faster A100
        (JobSpeed({"A100": 2.0, "V100": 1.0}, work_s=7200, work_model="V100"), "A100", 2.0, 3600),
        # a rate of 0: no progress there, ever
        (JobSpeed({"A100": 4.0, "K80": 0.0}, work=400.0), "K80", 0.0, math.inf),
    ],
)
def test_rates_and_times(speed: JobSpeed, model: str, rate: float, seconds: float) -> None:
    speeds = resolve(_job(speed))
    assert speeds.on(model) == rate
    assert speeds.time_on(model) == pytest.approx(seconds)


def test_without_work_the_duration_is_on_the_fastest_model() -> None:
    speeds = resolve(_job(JobSpeed({"A100": 4.0, "T4": 1.0})), duration_s=100)
    assert speeds.time_on("A100") == pytest.approx(100)
    assert speeds.time_on("T4") == pytest.approx(400)
    assert speeds.fastest(["T4", "A100"]) == "A100"
    assert speeds.relative("A100", "T4") == 4.0


def test_job_type_resolves_in_the_table_at_the_job_size() -> None:
    table = SpeedTable({("bert", 1): {"A100": 3.0, "T4": 1.0}, ("bert", 4): {"A100": 10.0}})
    assert resolve(_job(JobSpeed(job_type="bert", work=30.0)), table).on("A100") == 3.0
    assert resolve(_job(JobSpeed(job_type="bert", work=30.0), gpus=4), table).on("A100") == 10.0
    # 8 GPUs is not listed: linear from the largest listed size below (4)
    eight = _job(JobSpeed(job_type="bert", work=30.0), gpus=4, replicas=2)
    assert job_devices(eight) == 8
    assert resolve(eight, table).on("A100") == 20.0
    assert time_on(eight, "A100", 40.0, table) == 2.0


@pytest.mark.parametrize(
    ("speed", "table", "message"),
    [
        (JobSpeed(job_type="bert", work=1.0), None, "needs the profile's throughput table"),
        (JobSpeed(job_type="gpt", work=1.0), SpeedTable.of({"bert": {"a": 1}}), "unknown job"),
        (JobSpeed({"A100": 1.0, "K80": 0.0}, work_s=60, work_model="K80"), None, "rate is 0"),
    ],
)
def test_unresolvable_speeds(speed: JobSpeed, table: SpeedTable | None, message: str) -> None:
    with pytest.raises(SpeedError, match=message):
        resolve(_job(speed), table)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rates": {"A100": -1.0}}, "finite and >= 0"),
        ({"rates": {"A100": math.nan}}, "finite and >= 0"),
        ({"work": 0.0, "rates": {"A100": 1.0}}, "work must be finite and > 0"),
        ({"work": 5.0}, "needs a speed map or a job type"),
        ({"work_s": 60.0, "rates": {"A100": 1.0}}, "needs the model it was measured on"),
        ({"work": 5.0, "work_s": 60.0, "rates": {"A": 1.0}}, "not both"),
        ({"work_model": "V100"}, "which is missing"),
    ],
)
def test_invalid_job_speeds(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpeedError, match=message):
        JobSpeed(**kwargs)  # type: ignore[arg-type]


def _spec_job(**fields: object) -> dict[str, object]:
    return {"jobs": [{"name": "j", "resources": {"devices": [{"class": "gpu"}]}, **fields}]}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"speed": {"A100": 3.1, "V100": 1}, "work": "1.2e6"},
            JobSpeed({"A100": 3.1, "V100": 1.0}, work=1.2e6),
        ),
        ({"speed": "A100:3.1;V100:1", "work": 5}, JobSpeed({"A100": 3.1, "V100": 1.0}, work=5.0)),
        (
            {"speed": "A100=2 V100=1", "work": "2h@V100"},
            JobSpeed({"A100": 2.0, "V100": 1.0}, work_s=7200, work_model="V100"),
        ),
        (
            {"job_type": RESNET50, "work": "30m@v100"},
            JobSpeed(job_type=RESNET50, work_s=1800, work_model="v100"),
        ),
        ({"work": "2h"}, JobSpeed(work_s=7200)),
        ({}, JobSpeed()),
    ],
)
def test_job_spec_speed_fields(fields: dict[str, object], expected: JobSpeed) -> None:
    assert parse_jobs(_spec_job(**fields))[0].speed == expected


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"speed": {"A100": -1}}, "jobs[0].speed: A100: rate must be finite and >= 0, got -1"),
        ({"speed": {"A100": 0}}, "jobs[0].speed: a speed map needs at least one rate above 0"),
        ({"speed": {"A100": 1, "a100": 2}}, "jobs[0].speed: model 'a100' appears twice"),
        ({"speed": "A100"}, "jobs[0].speed: speed entry 'A100': expected MODEL:RATE"),
        ({"speed": {"A100": "fast"}}, "jobs[0].speed: A100: rate must be a number"),
        ({"work": "lots"}, "jobs[0].work: work 'lots': expected steps (1.2e6)"),
        ({"work": -3}, "jobs[0].work: work must be > 0, got -3"),
        ({"work": "2h@"}, "jobs[0].work: work '2h@': no model after '@'"),
        ({"work": "1e6"}, "jobs[0]: work in steps needs a speed map or a job type"),
        ({"speed": {"A100": 1}, "work": "2h"}, "jobs[0]: a work duration needs the model"),
        ({"speed": {"A100": 1}, "work": "2h@T4"}, "jobs[0]: work is a duration on T4, which"),
        ({"job_type": ""}, "jobs[0].job_type: String should have at least 1 character"),
    ],
)
def test_job_spec_speed_errors(fields: dict[str, object], error: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs(_spec_job(**fields))
    assert any(e.startswith(error) for e in info.value.errors), info.value.errors


def test_profile_speeds_section(tmp_path: Path) -> None:
    spec = parse_profile({"speeds": {"job_types": {"bert": {"A100": 3, "T4": 1}}}})
    table = load_speed_table(spec.speeds)
    assert table is not None and table.rates("bert") == {"a100": 3.0, "t4": 1.0}
    assert load_speed_table(SpeedsSpec()) is None
    with pytest.raises(ProfileError, match=r"speeds\.job_types\.bert: A100: rate must be"):
        parse_profile({"speeds": {"job_types": {"bert": {"A100": -3}}}})
    with pytest.raises(ProfileError, match=r"speeds\.table: .*missing\.json: cannot read"):
        parse_profile({"speeds": {"table": "missing.json"}}, tmp_path)
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ProfileError, match="expected an object of worker types"):
        parse_profile({"speeds": {"table": "bad.json"}}, tmp_path)


@pytest.mark.skipif(not GAVEL.is_dir(), reason="the Gavel traces are not in ../shared/traces")
def test_gavel_throughputs_as_a_table() -> None:
    table = read_gavel_table(GAVEL / "simulation_throughputs.json")
    assert table.models() == ["k80", "p100", "v100"]  # the unconsolidated types are left out
    assert len(table.job_types()) == 26
    rates = table.rates(RESNET50)
    assert rates is not None
    assert rates["v100"] == pytest.approx(4.39, abs=0.01)
    assert rates["k80"] == pytest.approx(0.62, abs=0.01)
    renamed = read_gavel_table(GAVEL / "simulation_throughputs.json", {"k80": "Tesla-K80"})
    assert "tesla-k80" in renamed.models()
    # a profile names the table relative to its own folder
    spec = parse_profile({"speeds": {"table": "simulation_throughputs.json"}}, GAVEL)
    assert spec.speeds.table == str((GAVEL / "simulation_throughputs.json").resolve())
    job = _job(JobSpeed(job_type=RESNET50, work_s=3600, work_model="V100"))
    assert resolve(job, load_speed_table(spec.speeds)).time_on("K80") == pytest.approx(
        3600 * rates["v100"] / rates["k80"]
    )


_rates = st.dictionaries(
    st.sampled_from(["A100", "V100", "T4", "K80"]),
    st.floats(0.01, 100.0),
    min_size=1,
)


@given(_rates, st.floats(1.0, 1e9), st.sampled_from(["A100", "V100", "T4", "K80", "MI300"]))
def test_time_times_rate_is_the_work(rates: dict[str, float], work: float, model: str) -> None:
    speeds = resolve(_job(JobSpeed(rates, work=work)))
    assert speeds.time_on(model) * speeds.on(model) == pytest.approx(work)
    # half the work left takes half the time, on any model
    assert speeds.time_on(model, work / 2) == pytest.approx(speeds.time_on(model) / 2)
    # the fastest model is never slower than any other
    best = speeds.fastest(rates)
    assert best is not None
    assert all(speeds.time_on(best) <= speeds.time_on(m) + 1e-9 for m in rates)


@given(_rates, st.floats(1.0, 1e6), st.sampled_from(["A100", "V100", "T4", "K80"]))
def test_a_duration_on_a_model_takes_that_long_there(
    rates: dict[str, float], seconds: float, model: str
) -> None:
    rates = {**rates, model: rates.get(model, 1.0)}
    speeds = resolve(_job(JobSpeed(rates, work_s=seconds, work_model=model)))
    assert speeds.time_on(model) == pytest.approx(seconds)
