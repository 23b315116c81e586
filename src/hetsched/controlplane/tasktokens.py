"""Task tokens: what lets a task report its own checkpoints, and nothing else.

A task's token is an HMAC-SHA256 of its task key (``<job>/<task>#<run>``) under a secret
kept in the service home (``task-tokens.key``, mode 0600, made on first use): the service
checks a token against the key it claims without storing anything per task, and a token
survives a restart of the service (an adopted task keeps reporting). A token names one run
of one task: it cannot submit, cancel or read jobs, and a later run gets another. It is
never the user's token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from hetsched.keys import TaskKey

__all__ = ["TaskTokens"]

_PREFIX = "hst1."


class TaskTokens:
    """Issues and checks task tokens under the secret in ``home``."""

    def __init__(self, home: Path) -> None:
        path = home / "task-tokens.key"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
        self._secret = bytes.fromhex(path.read_text().strip())

    def issue(self, key: TaskKey) -> str:
        mac = hmac.new(self._secret, str(key).encode(), hashlib.sha256).digest()
        return _PREFIX + base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def check(self, key: TaskKey, token: str) -> bool:
        """Is ``token`` the token of task ``key``? (constant time)"""
        return hmac.compare_digest(self.issue(key).encode(), token.encode())
