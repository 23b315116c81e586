"""The manifests under deploy/ validate against the Kubernetes schemas.

What validates them: the ``kubernetes-validate`` package (PyPI), which ships the JSON
schemas generated from Kubernetes' official OpenAPI spec, in strict mode (unknown fields
are errors), for Kubernetes 1.34. kubeconform is not packaged in any registry we can use.

Two things those schemas do not cover, checked here by hand with the reason:

- ``KubeSchedulerConfiguration`` is component configuration, not an API object, so it has
  no OpenAPI schema; its ``extenders`` stanza is checked against the field table of
  ``kubescheduler.config.k8s.io/v1`` (keys and types), as kube-scheduler reads it strictly.
- The Helm chart: no ``helm`` binary is available here, so the templates are rendered by a
  small renderer for exactly the template constructs the chart uses (values and release
  fields, ``if``/``end``, ``quote``, ``toYaml``, ``nindent``) and the output is validated
  like the plain manifests. This is not Helm; ``helm lint`` and ``helm template`` remain the
  check to run where Helm is installed (docs/kubernetes.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hetsched.framework.profile import parse_profile
from hetsched.k8s.names import CHECKPOINT_DIR, RESUME_FROM, RESUME_STEP
from hetsched.k8s.translate import pod_job, pod_request

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
CHART = ROOT / "deploy" / "helm" / "hetsched"
VERSION = "1.34.0"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


MANIFESTS = sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "scheduler-config.yaml")


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_validates_against_the_kubernetes_schema(path: Path) -> None:
    docs = documents(path)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_validator_rejects_what_it_should() -> None:
    pod = documents(DEPLOY / "examples" / "pod-gpu.yaml")[0]
    pod["spec"]["schedulerNmae"] = "hetsched"  # a typo: strict mode must refuse it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, VERSION, strict=True)


def test_expected_objects_are_deployed() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for p in MANIFESTS for d in documents(p)}
    for expected in [
        ("DaemonSet", "hetsched-device-plugin"),
        ("Deployment", "hetsched-scheduler"),
        ("Deployment", "hetsched-extender"),
        ("ServiceAccount", "hetsched-scheduler"),
        ("ClusterRole", "hetsched-scheduler"),
        ("Role", "hetsched-scheduler-lease"),
    ]:
        assert expected in kinds


def test_scheduler_rbac_is_least_privilege() -> None:
    docs = documents(DEPLOY / "rbac.yaml")
    role = next(
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "hetsched-scheduler"
    )
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("", "pods/binding", "create") in granted
    assert ("", "events", "create") in granted
    # the preemption notice: its annotation, and its condition through pods/status
    assert ("", "pods", "patch") in granted and ("", "pods/status", "patch") in granted
    assert all(verb not in {"*", "escalate", "bind", "impersonate"} for _, _, verb in granted)
    assert all(resource != "*" and resource != "secrets" for _, resource, _ in granted)
    assert not any(g == "coordination.k8s.io" for g, _, _ in granted)  # the Lease: a Role
    lease = next(d for d in docs if d["kind"] == "Role")
    assert lease["metadata"]["namespace"] == "kube-system"


def test_the_profile_in_the_deployment_loads() -> None:
    config = next(
        d for d in documents(DEPLOY / "scheduler-deployment.yaml") if d["kind"] == "ConfigMap"
    )
    assert parse_profile(yaml.safe_load(config["data"]["profile.yaml"])).name == "kubernetes"


@pytest.mark.parametrize(
    "name", ["pod-gpu.yaml", "shared-gpu.yaml", "fpga.yaml", "gang.yaml", "checkpointing.yaml"]
)
def test_examples_are_read_by_hetsched(name: str) -> None:
    doc = next(
        d
        for d in documents(DEPLOY / "examples" / name)
        if d["kind"] in ("Pod", "Job", "Deployment")
    )
    pod = (
        doc
        if doc["kind"] == "Pod"
        else {
            "metadata": {"name": "x", **doc["spec"]["template"]["metadata"]},
            "spec": doc["spec"]["template"]["spec"],
        }
    )
    assert pod["spec"]["schedulerName"] == "hetsched"
    request = pod_request(pod)
    assert request.devices  # every example asks for a device
    assert pod_job(pod).checkpoint is not None or name != "checkpointing.yaml"


def test_the_checkpointing_example_reads_what_the_scheduler_writes() -> None:
    """Its downward API env vars name the annotations the scheduler writes, and its service
    account is bound to the role that lets `hetsched checkpoint` annotate its pod."""
    docs = documents(DEPLOY / "examples" / "checkpointing.yaml")
    job = next(d for d in docs if d["kind"] == "Job")
    env = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    for variable, annotation in [
        ("HETSCHED_CHECKPOINT_DIR", CHECKPOINT_DIR),
        ("HETSCHED_RESUME_FROM", RESUME_FROM),
        ("HETSCHED_RESUME_STEP", RESUME_STEP),
    ]:
        assert env[variable] == f"metadata.annotations['{annotation}']"
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == "hetsched-checkpoint-reporter"
    role = next(
        d
        for d in documents(DEPLOY / "rbac.yaml")
        if d["metadata"]["name"] == "hetsched-checkpoint-reporter"
    )
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}]


# -- KubeSchedulerConfiguration --------------------------------------------------------------

_EXTENDER_FIELDS: dict[str, type | tuple[type, ...]] = {
    "urlPrefix": str,
    "filterVerb": str,
    "prioritizeVerb": str,
    "weight": int,
    "bindVerb": str,
    "preemptVerb": str,
    "enableHTTPS": bool,
    "tlsConfig": dict,
    "httpTimeout": str,
    "nodeCacheCapable": bool,
    "managedResources": list,
    "ignorable": bool,
}
_TOP_FIELDS = {
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "healthzBindAddress",
    "metricsBindAddress",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
}


def test_scheduler_config_extender_stanza() -> None:
    (config,) = documents(DEPLOY / "scheduler-config.yaml")
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert set(config) <= _TOP_FIELDS
    (extender,) = config["extenders"]
    assert set(extender) <= set(_EXTENDER_FIELDS)
    for key, value in extender.items():
        assert isinstance(value, _EXTENDER_FIELDS[key]), key
    assert extender["urlPrefix"].startswith("http")
    assert extender["weight"] > 0
    assert re.fullmatch(r"\d+(ms|s|m)", extender["httpTimeout"])
    # the verbs are the routes the extender serves
    from hetsched.k8s.extender import create_app

    routes = {getattr(r, "path", "") for r in create_app().routes}
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb"):
        assert f"/{extender[verb]}" in routes
    # cache-capable: the extender must keep its own node cache (it does, by watching)
    assert extender["nodeCacheCapable"] is True
    for resource in extender["managedResources"]:
        assert set(resource) <= {"name", "ignoredByScheduler"}
        assert resource["name"].startswith("hetsched.io/")


# -- the Helm chart ---------------------------------------------------------------------------

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def _lookup(expr: str, scope: dict[str, Any]) -> Any:
    value: Any = scope
    for part in expr.lstrip(".").split("."):
        value = value[part]
    return value


def _pipeline(expr: str, scope: dict[str, Any]) -> Any:
    stages = [s.strip() for s in expr.split("|")]
    head = stages[0].split()
    if head[0] == "toYaml":
        value: Any = yaml.safe_dump(_lookup(head[1], scope), default_flow_style=False).rstrip("\n")
    else:
        value = _lookup(head[0], scope)
    for stage in stages[1:]:
        name, *args = stage.split()
        if name == "quote":
            value = '"' + str(value) + '"'
        elif name == "nindent":
            pad = " " * int(args[0])
            value = "\n" + "\n".join(pad + line for line in str(value).rstrip("\n").split("\n"))
        else:
            raise AssertionError(f"the test renderer does not know {name!r}")
    return value


def render(template: str, values: dict[str, Any]) -> str:
    """Render the subset of Go templates the chart uses (see the module docstring)."""
    scope = {"Values": values, "Release": {"Name": "hetsched", "Namespace": "kube-system"}}
    out: list[str] = []
    emitting = [True]
    position = 0
    for match in _ACTION.finditer(template):
        text = template[position : match.start()]
        if match.group(1):
            text = text.rstrip()
        if all(emitting):
            out.append(text)
        position = match.end()
        if match.group(3):
            while position < len(template) and template[position].isspace():
                position += 1
        action = match.group(2)
        if action.startswith("if "):
            emitting.append(bool(_pipeline(action[3:], scope)))
        elif action == "end":
            emitting.pop()
        elif all(emitting):
            out.append(str(_pipeline(action, scope)))
    if all(emitting):
        out.append(template[position:])
    return "".join(out)


def chart_documents(values: dict[str, Any]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(render(template.read_text(), values)) if d]
    return docs


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert {"name", "version", "appVersion", "description"} <= set(chart)
    assert chart["name"] == "hetsched"


@pytest.mark.parametrize("extender", [False, True])
def test_chart_renders_valid_manifests(extender: bool) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["extender"]["enabled"] = extender
    docs = chart_documents(values)
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "hetsched-scheduler") in kinds
    assert ("DaemonSet", "hetsched-device-plugin") in kinds
    assert (("Deployment", "hetsched-extender") in kinds) is extender
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    assert parse_profile(yaml.safe_load(config["data"]["profile.yaml"])).name == "kubernetes"


def test_chart_with_the_device_plugin_off_has_no_daemonset() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["devicePlugin"]["enabled"] = False
    kinds = {d["kind"] for d in chart_documents(values)}
    assert "DaemonSet" not in kinds


def test_chart_with_the_dra_driver_on() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["draDriver"]["enabled"] is False  # opt-in: the device plugin is the default
    values["draDriver"]["enabled"] = True
    docs = chart_documents(values)
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("DaemonSet", "hetsched-dra-driver") in kinds
    assert ("ClusterRole", "hetsched-dra-driver") in kinds
    classes = {name for kind, name in kinds if kind == "DeviceClass"}
    assert classes == {
        "gpu.hetsched.io",
        "fpga.hetsched.io",
        "npu.hetsched.io",
        "shared-gpu.hetsched.io",
    }
    # the chart's classes are the plain manifests' classes
    plain = documents(DEPLOY / "dra" / "deviceclasses.yaml")
    assert sorted((d for d in docs if d["kind"] == "DeviceClass"), key=str) == sorted(
        plain, key=str
    )


def test_expected_dra_objects_are_deployed() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for p in MANIFESTS for d in documents(p)}
    for expected in [
        ("DaemonSet", "hetsched-dra-driver"),
        ("ServiceAccount", "hetsched-dra-driver"),
        ("ClusterRole", "hetsched-dra-driver"),
        ("DeviceClass", "gpu.hetsched.io"),
        ("DeviceClass", "fpga.hetsched.io"),
        ("DeviceClass", "npu.hetsched.io"),
        ("DeviceClass", "shared-gpu.hetsched.io"),
        ("ResourceClaim", "shared-gpu"),
        ("ResourceClaimTemplate", "h100-or-two-a100"),
    ]:
        assert expected in kinds


# -- Kubernetes versions --------------------------------------------------------------------

#: the versions docs/kubernetes.md claims: the chart and manifests validate on each
CLAIMED = re.compile(
    r"validated against the official schemas of Kubernetes (1\.\d+) to (1\.\d+), the DRA "
    r"driver's objects of (1\.\d+) to (1\.\d+)"
)


def _claimed() -> tuple[list[str], list[str]]:
    text = " ".join((ROOT / "docs" / "kubernetes.md").read_text().split())
    found = CLAIMED.search(text)
    assert found, "docs/kubernetes.md names the Kubernetes versions the chart is validated on"
    low, high, dra_low, dra_high = (int(v.split(".")[1]) for v in found.groups())
    return (
        [f"1.{m}.0" for m in range(low, high + 1)],
        [f"1.{m}.0" for m in range(dra_low, dra_high + 1)],
    )


ALL_VERSIONS, DRA_VERSIONS = _claimed()


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_chart_validates_on_every_claimed_version(version: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["extender"]["enabled"] = True
    for doc in chart_documents(values):
        kubernetes_validate.validate(doc, version, strict=True)
    for path in MANIFESTS:
        if "dra" in path.relative_to(DEPLOY).parts:  # DRA's own files: 1.34 on
            continue
        for doc in documents(path):
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", DRA_VERSIONS)
def test_chart_with_dra_validates_on_every_claimed_version(version: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["draDriver"]["enabled"] = True
    values["devicePlugin"]["enabled"] = False
    for doc in chart_documents(values):
        kubernetes_validate.validate(doc, version, strict=True)
    for path in MANIFESTS:
        for doc in documents(path):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_claimed_versions_match_the_chart() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    low = ALL_VERSIONS[0].rsplit(".", 1)[0]
    assert chart["kubeVersion"] == f">={low}.0-0"
    assert set(DRA_VERSIONS) <= set(ALL_VERSIONS)
    shipped = set(kubernetes_validate.utils.all_versions())
    assert {v.rsplit(".", 1)[0] for v in ALL_VERSIONS} <= {v.rsplit(".", 1)[0] for v in shipped}


def test_the_charts_arguments_are_the_commands_options() -> None:
    import typer.main

    from hetsched.cli.k8s import k8s_app

    group: Any = typer.main.get_command(k8s_app)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["extender"]["enabled"] = values["draDriver"]["enabled"] = True
    for doc in chart_documents(values):
        if doc["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            command = container.get("command") or []
            if command[:2] != ["hetsched", "k8s"]:
                continue
            options = {o for p in group.commands[command[2]].params for o in p.opts}
            for arg in container.get("args") or []:
                assert arg.split("=", 1)[0] in options, (command[2], arg)
