"""What ``hetsched up`` prints when it starts: where it listens, the dashboard's link, where
the admin token is, and the exact ``export`` lines another shell needs (none when the CLI's
defaults already find this service and its token)."""

from __future__ import annotations

import shlex
from pathlib import Path

from hetsched.service.options import default_home

__all__ = ["DEFAULT_URL", "banner", "client_url"]

#: where the CLI looks without HETSCHED_URL (cli/client.py)
DEFAULT_URL = "http://127.0.0.1:8780"


def client_url(host: str, port: int, scheme: str = "http") -> str:
    """The URL a client on this machine uses (a wildcard address is reached on loopback)."""
    reach = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    if ":" in reach and not reach.startswith("["):
        reach = f"[{reach}]"
    return f"{scheme}://{reach}:{port}"


def banner(
    host: str,
    port: int,
    home: Path,
    token_file: Path,
    token_new: bool,
    docs_public: bool,
    scheme: str = "http",
) -> list[str]:
    """The start-up lines, in order (``scheme``: https when the API serves TLS)."""
    url = client_url(host, port, scheme)
    docs = f"{url}/docs" + ("" if docs_public else " (with a token)")
    written = "written now, mode 0600" if token_new else "from the first start"
    lines = [
        f"hetsched up: listening on {url}",
        f"  dashboard    {url}/ui  (sign in with a token)",
        f"  API docs     {docs}",
        f"  metrics      {url}/metrics",
        f"  home         {home}",
        f"  admin token  {token_file}  ({written})",
    ]
    exports = []
    if url != DEFAULT_URL:
        exports.append(f"export HETSCHED_URL={url}")
    if token_file != default_home() / "admin.token":
        exports.append(f'export HETSCHED_TOKEN="$(cat {shlex.quote(str(token_file))})"')
    if exports:
        lines.append("  for the CLI in another shell:")
        lines += [f"    {line}" for line in exports]
    else:
        lines.append("  the CLI on this machine finds this service and its token: no export needed")
    if scheme == "https":
        lines.append("  clients verify the API's certificate: HETSCHED_CA (or --cacert) names the")
        lines.append("  CA bundle that signed --tls-cert, unless the system trusts it already")
    return lines
