"""The store fails under running and arriving jobs (``storefaults.py``): a full disk, a
filesystem the kernel turns read-only, PostgreSQL stopped as by a crash and started again,
and PostgreSQL failing over to its synchronous standby behind the same address. Nothing
acknowledged is lost, no job fails or runs twice because of it, no answer is a 500 (503
with Retry-After while it lasts), and scheduling resumes without a restart (the read-only
home excepted: the kernel keeps it read-only until the operator repairs it, which takes a
stop and a start).

Needs root for the mounts and the machine's PostgreSQL for the others; each skips with
the reason where it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultinject import skip_reason
from storefaults import FaultReport, disk_full, postgres_failover, postgres_restart, read_only

from hetsched.service.testing import ServerProcess

pytestmark = pytest.mark.slow


def _skip(kind: str) -> None:
    reason = skip_reason(kind)
    if reason is not None:
        pytest.skip(reason)


def _assert_clean(report: FaultReport, server: ServerProcess, restarted: bool = False) -> None:
    summary = report.summary() + "\n" + server.log_text()[-3000:]
    assert report.acked >= 10, summary
    assert report.lost == [], summary
    assert report.failed == {}, summary
    assert report.ran_twice == {}, summary
    assert report.not_run == [], summary
    assert report.statuses[500] == 0, summary
    assert report.statuses[503] > 0, summary  # the fault was seen
    assert report.retry_after == report.statuses[503], summary
    assert report.readyz[503] > 0, summary
    assert report.same_process is not restarted, summary
    assert report.back_s is not None, summary
    # the alerts stay reachable while the store fails (the token was checked before)
    assert report.alerts_during[0] == 200, summary
    assert "store_unavailable" in report.alerts_during[1], summary
    if not restarted:  # (a restart starts with no alerts)
        kinds = [a.split(":", 1)[0] for a in report.alerts]
        assert "store_unavailable" in kinds and "store_recovered" in kinds, report.alerts


def test_a_full_disk_under_running_and_arriving_jobs(tmp_path: Path) -> None:
    _skip("disk_full")
    report, server = disk_full(tmp_path)
    print("\ndisk full: " + report.summary())
    _assert_clean(report, server)


def test_postgres_stopped_and_started_under_running_and_arriving_jobs(tmp_path: Path) -> None:
    _skip("postgres")
    report, server = postgres_restart(tmp_path)
    print("\npostgres restart: " + report.summary())
    _assert_clean(report, server)


def test_postgres_failing_over_to_its_standby_under_running_and_arriving_jobs(
    tmp_path: Path,
) -> None:
    """The primary crashes; its synchronous standby is promoted and takes the primary's
    address (a new server behind the same name)."""
    _skip("postgres")
    report, server = postgres_failover(tmp_path)
    print("\npostgres failover: " + report.summary())
    _assert_clean(report, server)


def test_a_home_turned_read_only_under_running_and_arriving_jobs(tmp_path: Path) -> None:
    """The kernel turns the home's ext4 read-only (as after an I/O error): it cannot be
    made writable while mounted, so the operator stops the service, checks the filesystem
    and starts it again. While read-only nothing fails; after the restart nothing
    acknowledged is missing, and tasks that ended while it was read-only keep their exit
    status (journaled off the home)."""
    _skip("read_only")
    report, server = read_only(tmp_path)
    print("\nread-only home: " + report.summary())
    _assert_clean(report, server, restarted=True)
