"""Start-up rules that keep the REST API from failing open.

A worker whose token comes from ``${env:CONNECT_TOKEN}`` and whose variable is set but empty would
otherwise run with authentication off, on whatever ``rest.host`` says (the Kubernetes example
listens on 0.0.0.0), and say nothing. So:

- a ``rest.auth.*`` key that is set but resolves to an empty value is a start-up error (remove the
  key to run without it);
- a ``rest.host`` beyond loopback without a token or basic credentials is a start-up error, unless
  the operator declares :data:`ALLOW_UNAUTHENTICATED` (for a worker behind a proxy that
  authenticates).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping

from connect.errors import ConfigIssue

__all__ = ["ALLOW_UNAUTHENTICATED", "auth_issues", "is_loopback"]

ALLOW_UNAUTHENTICATED = "rest.allow.unauthenticated"
_CREDENTIAL_KEYS = ("rest.auth.token", "rest.auth.user", "rest.auth.password")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a listen address or a URL's host) is reachable from this machine only."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def auth_issues(raw: Mapping[str, str], values: Mapping[str, Any]) -> list[ConfigIssue]:
    """What is wrong with the REST API's exposure: ``raw`` holds the keys as written (set or not),
    ``values`` the parsed, resolved settings."""
    issues = [ConfigIssue(key, None, "is set but empty (an empty variable or file behind a reference?); "
                                     "give it a value, or remove the key to run without it")
              for key in _CREDENTIAL_KEYS if key in raw and not str(values.get(key) or "").strip()]
    if issues:
        return issues
    authenticated = bool(values.get("rest.auth.token")) or bool(values.get("rest.auth.user"))
    host = str(values.get("rest.host", ""))
    if not authenticated and not is_loopback(host) and not values.get(ALLOW_UNAUTHENTICATED):
        issues.append(ConfigIssue("rest.host", None, "is reachable beyond this machine (not loopback) and the REST API "
                                  "has no authentication: set rest.auth.token (or rest.auth.user and "
                                  f"rest.auth.password), or set {ALLOW_UNAUTHENTICATED}=true if a proxy in front "
                                  "authenticates every request"))
    return issues
