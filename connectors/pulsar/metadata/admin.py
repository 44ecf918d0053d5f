"""The Pulsar admin REST client the metadata watcher and applier use: tenants, namespaces and their
policies, partitioned topics; 4xx answers are :class:`AdminError`, transport failures and 5xx
:class:`~connect.errors.RetriableError`."""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping
from urllib.parse import quote

import httpx

from connect.errors import ConnectError, RetriableError

__all__ = ["PulsarAdmin", "AdminError", "check_resource_name"]


class AdminError(ConnectError):
    """Pulsar's admin API refused a request (a 4xx answer); ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


_NAME_PART = re.compile(r"[A-Za-z0-9_.=:-]+")


def check_resource_name(resource: str, name: str) -> None:
    """A tenant (``t``), namespace (``t/ns``) or topic (``persistent://t/ns/x``) name, each part
    made of the characters Pulsar allows and never ``.`` or ``..`` (which would address other admin
    endpoints); ValueError with the JSON path otherwise."""
    body = name.split("://", 1)[1] if resource == "Topics" and "://" in name else name
    parts = body.split("/")
    wanted = {"Tenants": 1, "Namespaces": 2, "Topics": 3}[resource]
    if len(parts) != wanted or any(p in (".", "..") or not _NAME_PART.fullmatch(p) for p in parts):
        shape = {"Tenants": "tenant", "Namespaces": "tenant/namespace", "Topics": "persistent://tenant/namespace/topic"}
        raise ValueError(f"$.resourceName: {name!r} is not a {shape[resource]} name (letters, digits and _.=:- "
                         "only, no '.' or '..' parts)")


def _seg(name: str) -> str:
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"$.resourceName: {name!r} has an empty, '.' or '..' part")
    return "/".join(quote(part, safe="") for part in parts)


def _topic_path(topic: str) -> str:
    domain, _, rest = topic.partition("://")
    return f"/admin/v2/{domain}/{_seg(rest)}"


class PulsarAdmin:
    """The few Pulsar admin v2 calls metadata sync needs. Connection trouble, timeouts and 5xx (and
    408/429) raise :class:`RetriableError`; other 4xx raise :class:`AdminError`, except a 404 where
    the call says it means "not there" (it then returns None). Messages name the method, URL and
    status, and Pulsar's ``reason``."""

    def __init__(self, url: str, token: str = "", timeout_s: float = 10.0,
                 time_left: Callable[[], float] | None = None):
        self.url = url.rstrip("/")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout_s
        self._time_left = time_left
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, follow_redirects=True)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], time_left: Callable[[], float] | None = None) -> PulsarAdmin:
        token = ""
        if cfg["auth.plugin"] == "token":
            token = cfg["auth.token"]
            if not token and cfg["auth.token.file"]:
                with open(cfg["auth.token.file"]) as f:
                    token = f.read().strip()
        return cls(cfg["admin.url"], token, cfg["admin.timeout.ms"] / 1000, time_left)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PulsarAdmin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, *, missing: bool = False, answer: bool = True) -> Any:
        """``answer`` False: the answer's body is not read (Pulsar answers some calls with plain text,
        e.g. a removed property's old value)."""
        url = self.url + path
        timeout = self._timeout if self._time_left is None else min(self._timeout, max(self._time_left(), 0.5))
        try:
            resp = self._http.request(method, path, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise RetriableError(f"Pulsar admin {method} {url} failed: {type(exc).__name__}: {exc}") from exc
        status = resp.status_code
        if status == 404 and missing:
            return None
        if status >= 400:
            try:
                reason = resp.json().get("reason")
            except (ValueError, AttributeError):
                reason = None
            text = f"Pulsar admin {method} {url}: HTTP {status} ({reason or resp.text[:200] or resp.reason_phrase})"
            if status >= 500 or status in (408, 429):
                raise RetriableError(text)
            raise AdminError(text, status)
        if not resp.content or not answer:
            return None
        try:
            return resp.json()
        except ValueError:
            raise RetriableError(f"Pulsar admin {method} {url} answered {resp.text[:200]!r}, not JSON") from None

    def _doc(self, path: str) -> dict | None:
        doc = self.request("GET", path, missing=True)
        if doc is not None and not isinstance(doc, dict):
            raise RetriableError(f"{self.url}{path} answered {str(doc)[:200]!r}, not a JSON object")
        return doc

    def _names(self, path: str) -> list[str]:
        names = self.request("GET", path, missing=True)
        if names is None:
            return []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise RetriableError(f"{self.url}{path} answered {str(names)[:200]!r}, not a JSON list of names")
        return names

    # tenants: TenantInfo {"adminRoles": [...], "allowedClusters": [...]}
    def tenants(self) -> list[str]:
        return self._names("/admin/v2/tenants")

    def tenant(self, tenant: str) -> dict | None:
        return self._doc(f"/admin/v2/tenants/{_seg(tenant)}")

    def create_tenant(self, tenant: str, info: Mapping[str, Any]) -> None:
        self.request("PUT", f"/admin/v2/tenants/{_seg(tenant)}", dict(info))

    def update_tenant(self, tenant: str, info: Mapping[str, Any]) -> None:
        self.request("POST", f"/admin/v2/tenants/{_seg(tenant)}", dict(info))

    def delete_tenant(self, tenant: str) -> None:
        self.request("DELETE", f"/admin/v2/tenants/{_seg(tenant)}", missing=True)

    # namespaces ("tenant/ns"): Policies JSON
    def namespaces(self, tenant: str) -> list[str]:
        return self._names(f"/admin/v2/namespaces/{_seg(tenant)}")

    def policies(self, namespace: str) -> dict | None:
        return self._doc(f"/admin/v2/namespaces/{_seg(namespace)}")

    def create_namespace(self, namespace: str, policies: Mapping[str, Any]) -> None:
        self.request("PUT", f"/admin/v2/namespaces/{_seg(namespace)}", dict(policies))

    def delete_namespace(self, namespace: str) -> None:
        self.request("DELETE", f"/admin/v2/namespaces/{_seg(namespace)}", missing=True)

    def set_retention(self, namespace: str, retention: Mapping[str, Any] | None) -> None:
        path = f"/admin/v2/namespaces/{_seg(namespace)}/retention"
        if retention is None:
            self.request("DELETE", path)
        else:
            self.request("POST", path, {"retentionTimeInMinutes": retention["retentionTimeInMinutes"],
                                        "retentionSizeInMB": retention["retentionSizeInMB"]})

    def set_message_ttl(self, namespace: str, seconds: int | None) -> None:
        path = f"/admin/v2/namespaces/{_seg(namespace)}/messageTTL"
        if seconds is None:
            self.request("DELETE", path)
        else:
            self.request("POST", path, int(seconds))

    def set_properties(self, namespace: str, properties: Mapping[str, str]) -> None:
        """Adds or replaces these namespace properties (others stay), as Pulsar's PUT does."""
        self.request("PUT", f"/admin/v2/namespaces/{_seg(namespace)}/properties", dict(properties))

    def remove_property(self, namespace: str, key: str) -> None:
        self.request("DELETE", f"/admin/v2/namespaces/{_seg(namespace)}/property/{quote(key, safe='')}", missing=True,
                     answer=False)

    # partitioned topics ("persistent://tenant/ns/topic")
    def partitions(self, topic: str) -> int | None:
        """Partitions of ``topic``: 0 when it is not partitioned (Pulsar also answers 0 for a topic
        that does not exist), None on a 404."""
        doc = self._doc(f"{_topic_path(topic)}/partitions")
        if doc is None:
            return None
        n = doc.get("partitions")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise RetriableError(f"{self.url}{_topic_path(topic)}/partitions answered {doc!r}, no partition count")
        return n

    def create_partitions(self, topic: str, partitions: int) -> None:
        self.request("PUT", f"{_topic_path(topic)}/partitions", int(partitions))

    def grow_partitions(self, topic: str, partitions: int) -> None:
        self.request("POST", f"{_topic_path(topic)}/partitions", int(partitions))
