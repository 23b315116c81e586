"""deploy/prometheus/alerts.yaml: every rule well formed and on exported metrics, checked
by ``promtool`` (Debian's prometheus package; .ci/run installs it) when it is there."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.controlplane.metrics import METRIC_NAMES

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
#: series Prometheus itself makes, which a rule may use besides ours
BUILTIN = {"up"}
_NAME = re.compile(r"\b(hetsched_[a-z0-9_]+|up)\b")
_SUFFIXES = ("_bucket", "_count", "_sum")


def exported(name: str) -> bool:
    if name in METRIC_NAMES or name in BUILTIN:
        return True
    return any(name.endswith(s) and name[: -len(s)] in METRIC_NAMES for s in _SUFFIXES)


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load((RULES / "alerts.yaml").read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def test_every_rule_is_complete_and_uses_exported_metrics() -> None:
    found = rules()
    assert found
    names = [r["alert"] for r in found]
    assert len(names) == len(set(names))
    for rule in found:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        metrics = _NAME.findall(rule["expr"])
        assert metrics, rule["alert"]
        unknown = [m for m in metrics if not exported(m)]
        assert unknown == [], f"{rule['alert']} uses metrics nobody exports: {unknown}"


@pytest.mark.parametrize(
    ("topic", "metric"),
    [
        ("scheduler stalls", "hetsched_loop_last_turn_timestamp_seconds"),
        ("jobs pending too long", "hetsched_oldest_pending_job_age_seconds"),
        ("unhealthy devices", "hetsched_device_healthy"),
        ("overcommit", "hetsched_alerts_total"),
        ("store unavailable", "hetsched_store_unavailable"),
    ],
)
def test_the_required_alerts_exist(topic: str, metric: str) -> None:
    assert any(metric in r["expr"] for r in rules()), topic


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool (Debian's prometheus package; .ci/run installs it)")
    return found


def _run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` in the rules' folder (skips without promtool)."""
    return subprocess.run(
        [_promtool(), *args], cwd=RULES, capture_output=True, text=True, timeout=60
    )


def test_promtool_checks_the_rules() -> None:
    answer = _run_promtool("check", "rules", "alerts.yaml")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert f"SUCCESS: {len(rules())} rules found" in answer.stdout


def test_promtool_unit_tests_fire_the_alerts_when_they_should() -> None:
    answer = _run_promtool("test", "rules", "alerts_test.yaml")
    assert answer.returncode == 0, answer.stdout + answer.stderr
