"""A member that is another ``hetsched up``: its HTTP API, with an admin token.

The federation renews its lease there with ``POST /v1/federation/lease`` (which also
reports its jobs and the nodes), sends jobs with ``POST /v1/jobs`` carrying
``federation`` and an ``Idempotency-Key``, cancels them with ``POST /v1/jobs/{id}/cancel``,
and asks ``POST /v1/whatif`` and ``GET /v1/jobs/{id}/logs``.

An https member is verified with the ``ca`` of members.yaml, and the federation presents
its ``client_cert`` when the member asks for one; a refused certificate is Unreachable with
the reason (:func:`hetsched.tls.explain`).

Answers map to the member protocol: a transport error, a timeout, 429 and 5xx are
:class:`~hetsched.federation.member.Unreachable` (try again: the member may have acted); 409
to a submission (no live lease yet) too; any other 4xx is
:class:`~hetsched.federation.member.Refused`.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from hetsched.federation.member import MemberJob, Refused, Report, Unreachable, nodes_from_view
from hetsched.tls import explain

__all__ = ["HetschedMember"]


class HetschedMember:
    """One ``hetsched up`` at ``url`` (see the module docstring)."""

    def __init__(
        self,
        name: str,
        url: str,
        token: str,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self._name = name
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
            verify=verify,
        )

    @property
    def name(self) -> str:
        return self._name

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            tls = explain(exc, self.url, "its ca in members.yaml", "client_cert, client_key")
            why = tls or f"{type(exc).__name__}: {exc}"
            raise Unreachable(f"{self._name}: {why}") from None
        status = response.status_code
        if status == 429 or status >= 500:
            raise Unreachable(f"{self._name}: HTTP {status}")
        if status >= 400:
            raise Refused(status, _detail(response))
        try:
            return response.json()
        except ValueError:
            raise Unreachable(f"{self._name}: an answer that is not JSON") from None

    def renew(
        self, federation: str, lease_s: float, nonce: str | None, jobs: Sequence[str]
    ) -> Report:
        body = {"federation": federation, "lease_s": float(lease_s), "nonce": nonce}
        body["jobs"] = list(jobs)
        answer = self._call("POST", "/v1/federation/lease", json=body)
        try:
            states = {
                str(j["id"]): MemberJob(
                    str(j["id"]),
                    str(j["state"]),
                    str(j.get("reason") or ""),
                    j.get("exit_code"),
                    bool(j.get("fenced", False)),
                    int(j.get("active_tasks", 0)),
                )
                for j in answer.get("jobs", [])
            }
            return Report(
                nonce=answer.get("nonce"),
                renewed=bool(answer["renewed"]),
                live=bool(answer["live"]),
                lapsed=bool(answer["lapsed"]),
                lapses=int(answer["lapses"]),
                live_jobs=int(answer["live_jobs"]),
                fence_after_s=float(answer["fence_after_s"]),
                jobs=states,
                nodes=nodes_from_view(answer["nodes"]) if "nodes" in answer else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise Unreachable(f"{self._name}: a lease answer without {exc}") from None

    def submit(self, key: str, job: Mapping[str, Any]) -> str:
        try:
            answer = self._call(
                "POST", "/v1/jobs", json=dict(job), headers={"Idempotency-Key": key}
            )
        except Refused as exc:
            if exc.status == 409 and "lease" in exc.message:
                raise Unreachable(f"{self._name}: {exc.message}") from None
            raise
        return str(answer["id"])

    def cancel(self, job_id: str) -> None:
        try:
            self._call("POST", f"/v1/jobs/{job_id}/cancel")
        except Refused as exc:
            if exc.status != 409:  # 409: it ended already, which is what was asked
                raise

    def what_if(self, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        answer = self._call("POST", "/v1/whatif", json={"jobs": [dict(j) for j in jobs]})
        answers = answer.get("answers")
        return [dict(a) for a in answers] if isinstance(answers, list) else None

    def logs(
        self, job_id: str, task: int, stream: str, offset: int, limit: int
    ) -> dict[str, Any] | None:
        params = {"task": task, "stream": stream, "offset": offset, "limit": limit}
        answer = self._call("GET", f"/v1/jobs/{job_id}/logs", params=params)
        return dict(answer)

    def close(self) -> None:
        self.http.close()


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, dict):
        errors = detail.get("errors") or []
        return "; ".join([str(detail.get("message", "refused")), *map(str, errors)])
    return str(detail)[:300]
