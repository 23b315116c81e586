"""``members.yaml``: the federation's name, its fencing lease, and its member clusters.

```yaml
federation: lab                 # this federation's name (its lease's name at each member)
lease: 30s                      # how long a member keeps its jobs without word from us
margin: 2s                      # added to every fencing bound (clock drift, scheduling)
members:
  - name: room-a                # a `hetsched up` (local or Ray executor)
    kind: hetsched
    url: http://10.0.0.5:8780
    token_file: /etc/hetsched/room-a.token     # an admin token of that service
    # with an https url: ca (the CA bundle its certificate is checked with) and, for a
    # member started with --tls-client-ca, client_cert and client_key (ours)
    queue: default              # the member's queue its jobs go into
    labels: {region: eu-west, cost: "1", data: imagenet}
  - name: prod                  # a Kubernetes cluster with the hetsched scheduler
    kind: kubernetes
    kubeconfig: ~/.kube/config
    context: prod               # a context of the kubeconfig (default: the current one)
    namespace: batch            # where the pods go
    image: python:3.11-slim     # the image jobs' commands run in
    lease_namespace: hetsched-system  # the scheduler's --federation-namespace
    labels: {region: us-east}
```

Every problem is reported at once with its field path (``members[1].url: ...``); nothing
is started until the whole file is valid. A token is read from ``token_file`` (or the
environment variable ``token_env``), never written in the file itself.
"""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from hetsched.model.specs import SpecError, format_errors, load_yaml, parse_duration
from hetsched.tls import TlsError, client_verify

__all__ = [
    "HetschedMemberSpec",
    "KubernetesMemberSpec",
    "MemberSpec",
    "MembersSpec",
    "load_members",
    "parse_members",
]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
_LABEL_KEY = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9.-]{0,252}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][A-Za-z0-9._-]{0,61})?[A-Za-z0-9])?$")


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    return parse_duration(value)


Seconds = Annotated[float, BeforeValidator(_seconds)]


class _Member(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_NAME)
    #: what selectors see (region, cost, data locality, ...): node labels of the member
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _LABEL_KEY.match(key) or key.startswith("hetsched.io/"):
                raise ValueError(
                    f"{key!r} is not a label key (name or prefix/name; hetsched.io/ is ours)"
                )
            if not _LABEL_VALUE.match(item):
                raise ValueError(f"label {key}: {item!r} is not a label value")
        return value


class HetschedMemberSpec(_Member):
    """Another ``hetsched up``, reached over its HTTP API with an admin token."""

    kind: Literal["hetsched"]
    url: str = Field(pattern=r"^https?://[^\s/]+(/.*)?$")
    token_file: Path | None = None
    token_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    queue: str = Field(default="default", pattern=_NAME)
    #: seconds one request to the member may take
    timeout: Seconds = Field(default=5.0, gt=0, le=300)
    #: the CA bundle (PEM) the member's https certificate is verified with (default: the
    #: system's trust store)
    ca: Path | None = None
    #: the federation's client certificate and key (PEM), for a member started with
    #: ``--tls-client-ca``
    client_cert: Path | None = None
    client_key: Path | None = None

    @model_validator(mode="after")
    def _one_token(self) -> HetschedMemberSpec:
        if (self.token_file is None) == (self.token_env is None):
            raise ValueError("give exactly one of token_file and token_env")
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("give both client_cert and client_key, or neither")
        tls = self.ca is not None or self.client_cert is not None
        if tls and not self.url.startswith("https://"):
            raise ValueError("ca and client_cert are for an https:// url")
        return self

    def verify(self) -> ssl.SSLContext:
        """What the member's certificate is verified with, and the federation's own
        certificate; ValueError naming the field when a file cannot be used."""
        try:
            return client_verify(
                self.ca, self.client_cert, self.client_key, {}, ("ca", "client_cert", "client_key")
            )
        except TlsError as exc:
            raise ValueError(str(exc)) from None

    def token(self) -> str:
        """The member's token; ValueError when it cannot be read."""
        if self.token_env is not None:
            value = os.environ.get(self.token_env, "").strip()
            if not value:
                raise ValueError(f"token_env: ${self.token_env} is not set")
            return value
        assert self.token_file is not None
        try:
            value = self.token_file.expanduser().read_text().strip()
        except OSError as exc:
            raise ValueError(f"token_file: cannot read {self.token_file}: {exc.strerror}") from None
        if not value:
            raise ValueError(f"token_file: {self.token_file} is empty")
        return value


class KubernetesMemberSpec(_Member):
    """A Kubernetes cluster whose hetsched scheduler serves this federation."""

    kind: Literal["kubernetes"]
    kubeconfig: Path | None = None
    context: str | None = Field(default=None, min_length=1)
    namespace: str = Field(default="default", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    lease_namespace: str = Field(
        default="hetsched-system", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
    )
    scheduler_name: str = Field(default="hetsched", min_length=1, max_length=253)
    #: the container image the job's command runs in
    image: str = Field(min_length=1, max_length=1024)
    #: the API server's address, in place of a kubeconfig (tests, kubectl proxy)
    host: str | None = Field(default=None, pattern=r"^https?://[^\s/]+(/.*)?$")


MemberSpec = Annotated[HetschedMemberSpec | KubernetesMemberSpec, Field(discriminator="kind")]


class MembersSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    federation: str = Field(pattern=_NAME)
    lease: Seconds = Field(default=30.0, ge=2.0, le=3600.0)
    margin: Seconds = Field(default=2.0, ge=0.0, le=600.0)
    members: list[MemberSpec] = Field(min_length=1, max_length=1000)

    @field_validator("members")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        seen: set[str] = set()
        for member in value:
            if member.name in seen:
                raise ValueError(f"member {member.name!r} is listed twice")
            seen.add(member.name)
        return value


def parse_members(data: Any, source: str = "", base: Path | None = None) -> MembersSpec:
    """Validate a members document; SpecError lists every problem with its field path.
    Relative file names are read from ``base`` (the file's folder); tokens must be
    readable."""
    try:
        spec = MembersSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_errors(exc), source) from None
    errors: list[str] = []
    for index, member in enumerate(spec.members):
        if isinstance(member, HetschedMemberSpec):
            _relative_to(member, base)
            try:
                member.token()
                member.verify()
            except ValueError as exc:
                errors.append(f"members[{index}].{exc}")
        elif member.kubeconfig is not None and base is not None:
            path = member.kubeconfig.expanduser()
            member.kubeconfig = path if path.is_absolute() else base / path
    if errors:
        raise SpecError(errors, source)
    return spec


def _relative_to(member: HetschedMemberSpec, base: Path | None) -> None:
    """The member's files (token, CA, client certificate) read from ``base`` when
    relative."""
    if base is None:
        return
    for name in ("token_file", "ca", "client_cert", "client_key"):
        path = getattr(member, name)
        if path is not None:
            path = path.expanduser()
            setattr(member, name, path if path.is_absolute() else base / path)


def load_members(path: str | Path) -> MembersSpec:
    where = Path(path)
    return parse_members(load_yaml(where), str(path), where.parent)
