"""A member that is a Kubernetes cluster whose hetsched scheduler serves the federation.

A job becomes a **pod set**: one pod per replica, ``spec.schedulerName`` the hetsched
scheduler's, labelled ``hetsched.io/federation`` (so the scheduler fences it with the
federation's lease) and ``hetsched.io/federation-job`` (the member job id, derived from the
dispatch's idempotency key, so a retried send finds the pods it made), and a pod group
(``hetsched.io/pod-group`` with ``hetsched.io/min-available``) when the job is a gang.
``restartPolicy: Never``: the federation decides restarts. Pods run the member's
``image`` with the job's command as their command.

The lease is the ``coordination.k8s.io`` Lease of ``k8s/fencing.py``: a renewal writes the
nonce the scheduler last wrote into ``hetsched.io/renew`` and waits (a few of the
scheduler's steps at most) for the scheduler to write ``hetsched.io/renewed`` with it. The
scheduler refreshes its nonce every step, so a nonce the federation reads is at most
``hetsched.io/nonce-age`` seconds old; the lower bound of the lease accounts for that.

A job's state is read from its pods: all Succeeded is succeeded; one Failed, failed; none
left after a stop, cancelled. Logs and what-if are not served (``kubectl logs`` is).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from hetsched.federation.member import MemberJob, Refused, Report, Unreachable
from hetsched.federation.spec import KubernetesMemberSpec
from hetsched.k8s.api import ApiError, KubeClusterAPI, for_host
from hetsched.k8s.fencing import ANNOTATIONS, FEDERATION_LABEL, lease_name
from hetsched.k8s.names import POD_GROUP, POD_GROUP_MIN
from hetsched.k8s.translate import TranslateError, node_from_k8s
from hetsched.model.device import Node

__all__ = ["JOB_LABEL", "KubernetesMember"]

#: the member job a pod belongs to
JOB_LABEL = "hetsched.io/federation-job"
_TERMINAL = ("Succeeded", "Failed")


def _k8s(module: str) -> Any:
    import importlib

    return importlib.import_module(f"kubernetes.{module}")


def _api(spec: KubernetesMemberSpec) -> KubeClusterAPI:
    if spec.host is not None:
        return for_host(spec.host)
    client, config = _k8s("client"), _k8s("config")
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(spec.kubeconfig) if spec.kubeconfig else None,
        context=spec.context,
        client_configuration=configuration,
    )
    return KubeClusterAPI(client.ApiClient(configuration))


class KubernetesMember:
    """One Kubernetes cluster (see the module docstring)."""

    def __init__(
        self,
        name: str,
        api: KubeClusterAPI,
        namespace: str,
        lease_namespace: str,
        scheduler_name: str,
        image: str,
        wait_s: float = 3.0,
    ) -> None:
        self._name = name
        self.api = api
        self.namespace = namespace
        self.lease_namespace = lease_namespace
        self.scheduler_name = scheduler_name
        self.image = image
        self.wait_s = wait_s

    @classmethod
    def from_spec(cls, spec: KubernetesMemberSpec) -> KubernetesMember:
        return cls(
            spec.name,
            _api(spec),
            spec.namespace,
            spec.lease_namespace,
            spec.scheduler_name,
            spec.image,
        )

    @property
    def name(self) -> str:
        return self._name

    def _raw(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        exc_type = _k8s("client.rest").ApiException
        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except exc_type as exc:
            status = int(getattr(exc, "status", 0) or 0)
            if status == 0 or status == 429 or status >= 500:
                raise Unreachable(f"{self._name}: {status} {exc.reason}") from None
            raise Refused(status, str(getattr(exc, "reason", exc))) from None
        except Exception as exc:  # urllib3 transport errors
            raise Unreachable(f"{self._name}: {type(exc).__name__}: {exc}") from None
        return json.loads(response.data or b"{}")

    # -- the lease -------------------------------------------------------------------------

    def _lease(self, federation: str, lease_s: float) -> dict[str, Any]:
        try:
            lease = self.api.get_lease(self.lease_namespace, lease_name(federation))
            if lease is not None:
                return lease
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": lease_name(federation), "namespace": self.lease_namespace},
                "spec": {
                    "holderIdentity": federation,
                    "leaseDurationSeconds": max(1, int(lease_s)),
                },
            }
            created = self.api.create_lease(self.lease_namespace, body)
            return created if created is not None else self._lease(federation, lease_s)
        except ApiError as exc:
            raise Unreachable(f"{self._name}: lease: {exc}") from None

    def renew(
        self, federation: str, lease_s: float, nonce: str | None, jobs: Sequence[str]
    ) -> Report:
        lease = self._lease(federation, lease_s)
        renewed = False
        if nonce is not None:
            lease["metadata"].setdefault("annotations", {})[ANNOTATIONS["renew"]] = nonce
            lease.setdefault("spec", {})["leaseDurationSeconds"] = max(1, int(lease_s))
            try:
                written = self.api.replace_lease(
                    self.lease_namespace, lease_name(federation), lease
                )
            except ApiError as exc:
                raise Unreachable(f"{self._name}: lease: {exc}") from None
            if written is None:
                raise Unreachable(f"{self._name}: the lease changed meanwhile (409)")
            lease, renewed = self._await(federation, nonce, written)
        notes = dict(lease.get("metadata", {}).get("annotations") or {})
        states = self._jobs(federation)
        lapsed = notes.get(ANNOTATIONS["lapsed"]) == "true"
        return Report(
            nonce=notes.get(ANNOTATIONS["nonce"]),
            renewed=renewed,
            live=renewed and not lapsed,
            lapsed=lapsed,
            lapses=int(notes.get(ANNOTATIONS["lapses"], "0") or 0),
            live_jobs=sum(1 for j in states.values() if j.active_tasks),
            fence_after_s=float(notes.get(ANNOTATIONS["fence_after"], "30") or 30),
            jobs={
                job_id: states.get(job_id, MemberJob(job_id, "cancelled", "its pods are gone"))
                for job_id in jobs
            },
            nodes=self._nodes(),
            nonce_age_s=float(notes.get(ANNOTATIONS["nonce_age"], "0") or 0),
        )

    def _await(
        self, federation: str, nonce: str, lease: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Wait for the scheduler to apply the renewal (it writes the nonce back)."""
        deadline = time.monotonic() + self.wait_s
        while True:
            notes = lease.get("metadata", {}).get("annotations") or {}
            if notes.get(ANNOTATIONS["renewed"]) == nonce:
                return lease, True
            if time.monotonic() >= deadline:
                return lease, False
            time.sleep(0.1)
            try:
                found = self.api.get_lease(self.lease_namespace, lease_name(federation))
            except ApiError as exc:
                raise Unreachable(f"{self._name}: lease: {exc}") from None
            if found is not None:
                lease = found

    # -- what runs there -------------------------------------------------------------------

    def _pods(self, selector: str) -> list[dict[str, Any]]:
        answer = self._raw(
            self.api.core.list_namespaced_pod, self.namespace, label_selector=selector
        )
        return list(answer.get("items") or [])

    def _jobs(self, federation: str) -> dict[str, MemberJob]:
        by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in self._pods(f"{FEDERATION_LABEL}={federation}"):
            job_id = (pod.get("metadata", {}).get("labels") or {}).get(JOB_LABEL)
            if job_id:
                by_job[str(job_id)].append(pod)
        return {job_id: _state(job_id, pods) for job_id, pods in by_job.items()}

    def _nodes(self) -> tuple[Node, ...] | None:
        try:
            items, _ = self.api.list_nodes()
        except ApiError:
            return None
        nodes = []
        for item in items:
            try:
                nodes.append(node_from_k8s(item))
            except TranslateError:
                continue
        return tuple(nodes)

    def submit(self, key: str, job: Mapping[str, Any]) -> str:
        job_id = "f" + hashlib.sha256(key.encode()).hexdigest()[:20]
        replicas = int(job.get("replicas", 1))
        gang = job.get("gang") or replicas
        federation = str(job["federation"])
        for index in range(replicas):
            pod = self._pod(job_id, index, job, federation, int(gang))
            try:
                self._raw(self.api.core.create_namespaced_pod, self.namespace, pod)
            except Refused as exc:
                if exc.status != 409:  # 409: made by an earlier try of this send
                    raise
        return job_id

    def _pod(
        self, job_id: str, index: int, job: Mapping[str, Any], federation: str, gang: int
    ) -> dict[str, Any]:
        resources = dict(job.get("resources") or {})
        limits = {
            f"hetsched.io/{d.get('class', 'gpu')}": str(d.get("count", 1))
            for d in resources.get("devices", [])
        }
        requests = {k: str(resources[k]) for k in ("cpu", "memory") if k in resources}
        labels = {FEDERATION_LABEL: federation, JOB_LABEL: job_id}
        annotations: dict[str, str] = {}
        if gang > 1:
            labels[POD_GROUP] = job_id
            annotations[POD_GROUP_MIN] = str(gang)
        env = [{"name": k, "value": v} for k, v in (job.get("env") or {}).items()]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job_id}-{index}",
                "namespace": self.namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {
                "schedulerName": self.scheduler_name,
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": self.image,
                        "command": list(job.get("command") or []),
                        "env": env,
                        "resources": {"requests": requests, "limits": limits},
                    }
                ],
            },
        }

    def cancel(self, job_id: str) -> None:
        for pod in self._pods(f"{JOB_LABEL}={job_id}"):
            name = str(pod.get("metadata", {}).get("name"))
            try:
                self.api.delete_pod(self.namespace, name, 30)
            except ApiError as exc:
                raise Unreachable(f"{self._name}: delete {name}: {exc}") from None

    def what_if(self, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        return None

    def logs(
        self, job_id: str, task: int, stream: str, offset: int, limit: int
    ) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        self.api.api_client.close()


def _state(job_id: str, pods: list[dict[str, Any]]) -> MemberJob:
    phases = [str((p.get("status") or {}).get("phase") or "Pending") for p in pods]
    deleting = any(p.get("metadata", {}).get("deletionTimestamp") for p in pods)
    active = sum(1 for phase in phases if phase not in _TERMINAL)
    if "Failed" in phases:
        state = "failed"
    elif phases and all(phase == "Succeeded" for phase in phases):
        state = "succeeded"
    elif deleting:
        state = "cancelled"
    else:
        state = "running" if "Running" in phases else "pending"
    return MemberJob(job_id, state, ",".join(sorted(set(phases))), None, False, active)
