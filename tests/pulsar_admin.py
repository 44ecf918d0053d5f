"""An in-memory Pulsar admin REST API for the metadata sync tests.

pulsar-lite has no admin REST API, so this server plays the Pulsar admin v2 paths and payloads
that ``connectors.pulsar.metadata`` uses, and nothing else:

- ``GET /admin/v2/tenants`` (names); ``GET/PUT/POST/DELETE /admin/v2/tenants/{t}`` (TenantInfo);
- ``GET /admin/v2/namespaces/{t}`` (``"t/ns"`` names); ``GET/PUT/DELETE /admin/v2/namespaces/{t}/{ns}``
  (Policies); ``POST/DELETE .../retention`` (``{"retentionTimeInMinutes", "retentionSizeInMB"}``),
  ``POST/DELETE .../messageTTL`` (an int), ``PUT .../properties`` (a map, merged) and
  ``DELETE .../property/{key}``, each applied into the stored Policies as Pulsar does
  (``retention_policies``, ``message_ttl_in_seconds``, ``properties``; a removal sets null);
- ``GET/PUT/POST /admin/v2/persistent/{t}/{ns}/{topic}/partitions`` (``{"partitions": N}``, 0 for a
  topic that is not partitioned or not there, as Pulsar answers; create; grow);
- ``PUT /admin/v2/persistent/{t}/{ns}/{topic}`` (create a non-partitioned topic) and
  ``GET /admin/v2/namespaces/{t}/{ns}/topics`` (the namespace's topics, a partitioned one listed
  partition by partition as ``...-partition-N``), what a source's ``topics.regex`` lists. The
  topics are the ones created here: pulsar-lite cannot list its own, so a test creates a topic here
  and writes to it on pulsar-lite, as an operator creates it with pulsar-admin then produces.

TenantInfo and Policies JSON are stored as given, stamp fields (``lastUpdatedBy`` /
``lastUpdatedTime``) included, as a Pulsar storing PIP-136's fields would. Errors answer with
Pulsar's statuses and ``{"reason": ...}``: 404 for a missing tenant or namespace, 409 for one that
exists already or is not empty, 412 for an invalid value, 401 without the bearer token when
``token`` is set. ``fail_next`` holds statuses to answer the next requests with (outages);
``requests`` logs every (method, path); :meth:`local_update` changes a stored document atomically
(a broker updated locally, e.g. one that stamps its own updates).
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from typing import Any, Callable
from urllib.parse import unquote

_SEG = r"([^/]+)"
_NS = rf"/admin/v2/namespaces/{_SEG}/{_SEG}"


class FakePulsarAdmin(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token: str = ""):
        self.lock = threading.Lock()
        self.tenants: dict[str, dict] = {}
        self.namespaces: dict[str, dict] = {}  # "tenant/ns" -> Policies
        self.partitioned: dict[str, int] = {}  # "persistent://t/ns/topic" -> partitions
        self.topics: set[str] = set()  # non-partitioned "persistent://t/ns/topic"
        self.token = token
        self.fail_next: list[int] = []
        self.requests: list[tuple[str, str]] = []
        self._routes: list[tuple[str, re.Pattern, Callable]] = [
            ("GET", re.compile(r"/admin/v2/tenants"), lambda b: (200, sorted(self.tenants))),
            ("GET", re.compile(rf"/admin/v2/tenants/{_SEG}"), self._get_tenant),
            ("PUT", re.compile(rf"/admin/v2/tenants/{_SEG}"), self._put_tenant),
            ("POST", re.compile(rf"/admin/v2/tenants/{_SEG}"), self._post_tenant),
            ("DELETE", re.compile(rf"/admin/v2/tenants/{_SEG}"), self._delete_tenant),
            ("GET", re.compile(rf"/admin/v2/namespaces/{_SEG}"), self._list_namespaces),
            ("GET", re.compile(_NS), self._get_namespace),
            ("PUT", re.compile(_NS), self._put_namespace),
            ("DELETE", re.compile(_NS), self._delete_namespace),
            ("POST", re.compile(_NS + "/retention"), self._set_retention),
            ("DELETE", re.compile(_NS + "/retention"), lambda b, t, n: self._set_field(t, n, "retention_policies", None)),
            ("POST", re.compile(_NS + "/messageTTL"), self._set_ttl),
            ("DELETE", re.compile(_NS + "/messageTTL"), lambda b, t, n: self._set_field(t, n, "message_ttl_in_seconds", None)),
            ("PUT", re.compile(_NS + "/properties"), self._put_properties),
            ("DELETE", re.compile(_NS + f"/property/{_SEG}"), self._delete_property),
            ("GET", re.compile(rf"/admin/v2/(persistent|non-persistent)/{_SEG}/{_SEG}/{_SEG}/partitions"), self._get_parts),
            ("PUT", re.compile(rf"/admin/v2/(persistent|non-persistent)/{_SEG}/{_SEG}/{_SEG}/partitions"), self._put_parts),
            ("POST", re.compile(rf"/admin/v2/(persistent|non-persistent)/{_SEG}/{_SEG}/{_SEG}/partitions"), self._post_parts),
            ("PUT", re.compile(rf"/admin/v2/(persistent|non-persistent)/{_SEG}/{_SEG}/{_SEG}"), self._put_topic),
            ("GET", re.compile(_NS + "/topics"), self._list_topics),
        ]
        super().__init__(("127.0.0.1", 0), _Handler)
        self._thread: threading.Thread | None = None

    # -- lifecycle and test helpers -------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> FakePulsarAdmin:
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), name="fake-pulsar-admin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def local_update(self, kind: str, name: str, changes: dict[str, Any]) -> None:
        """Change stored fields of a tenant (``kind`` "tenant") or namespace ("namespace") at once."""
        with self.lock:
            store = self.tenants if kind == "tenant" else self.namespaces
            store[name] = {**store[name], **changes}

    def snapshot(self) -> tuple[dict, dict]:
        """Deep copies of (tenants, namespaces)."""
        with self.lock:
            return json.loads(json.dumps(self.tenants)), json.loads(json.dumps(self.namespaces))

    def dispatch(self, method: str, path: str, body: Any, auth: str | None) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path))
            if self.fail_next:
                return self.fail_next.pop(0), {"reason": "injected failure"}
            if self.token and auth != f"Bearer {self.token}":
                return 401, {"reason": "Authentication required"}
            known = False
            for verb, pattern, handler in self._routes:
                match = pattern.fullmatch(path)
                if match:
                    known = True
                    if verb == method:
                        return handler(body, *(unquote(g) for g in match.groups()))
            return (405, {"reason": "Method not allowed"}) if known else (404, {"reason": "Not found"})

    # -- tenants -------------------------------------------------------------------------------
    def _get_tenant(self, body, tenant):
        info = self.tenants.get(tenant)
        return (200, info) if info is not None else (404, {"reason": "Tenant does not exist"})

    def _put_tenant(self, body, tenant):
        if tenant in self.tenants:
            return 409, {"reason": "Tenant already exists"}
        if not isinstance(body, dict):
            return 400, {"reason": "TenantInfo expected"}
        self.tenants[tenant] = body
        return 204, None

    def _post_tenant(self, body, tenant):
        if tenant not in self.tenants:
            return 404, {"reason": "Tenant does not exist"}
        if not isinstance(body, dict):
            return 400, {"reason": "TenantInfo expected"}
        self.tenants[tenant] = body
        return 204, None

    def _delete_tenant(self, body, tenant):
        if tenant not in self.tenants:
            return 404, {"reason": "Tenant does not exist"}
        if any(ns.split("/")[0] == tenant for ns in self.namespaces):
            return 409, {"reason": "The tenant still has active namespaces"}
        del self.tenants[tenant]
        return 204, None

    # -- namespaces ----------------------------------------------------------------------------
    def _list_namespaces(self, body, tenant):
        if tenant not in self.tenants:
            return 404, {"reason": "Tenant does not exist"}
        return 200, sorted(ns for ns in self.namespaces if ns.split("/")[0] == tenant)

    def _get_namespace(self, body, tenant, ns):
        policies = self.namespaces.get(f"{tenant}/{ns}")
        return (200, policies) if policies is not None else (404, {"reason": "Namespace does not exist"})

    def _put_namespace(self, body, tenant, ns):
        if tenant not in self.tenants:
            return 404, {"reason": "Tenant does not exist"}
        if f"{tenant}/{ns}" in self.namespaces:
            return 409, {"reason": "Namespace already exists"}
        self.namespaces[f"{tenant}/{ns}"] = body if isinstance(body, dict) else {}
        return 204, None

    def _delete_namespace(self, body, tenant, ns):
        name = f"{tenant}/{ns}"
        if name not in self.namespaces:
            return 404, {"reason": "Namespace does not exist"}
        if any(t.split("://", 1)[1].rsplit("/", 1)[0] == name for t in self.partitioned):
            return 409, {"reason": "Cannot delete non empty namespace"}
        del self.namespaces[name]
        return 204, None

    def _set_field(self, tenant, ns, field, value):
        policies = self.namespaces.get(f"{tenant}/{ns}")
        if policies is None:
            return 404, {"reason": "Namespace does not exist"}
        policies[field] = value
        return 204, None

    def _set_retention(self, body, tenant, ns):
        ok = isinstance(body, dict) and all(isinstance(body.get(k), int) and body[k] >= -1
                                            for k in ("retentionTimeInMinutes", "retentionSizeInMB"))
        if not ok:
            return 412, {"reason": "Invalid retention policy"}
        return self._set_field(tenant, ns, "retention_policies", {"retentionTimeInMinutes": body["retentionTimeInMinutes"],
                                                                  "retentionSizeInMB": body["retentionSizeInMB"]})

    def _set_ttl(self, body, tenant, ns):
        if not isinstance(body, int) or isinstance(body, bool) or body < 0:
            return 412, {"reason": "Invalid value for message TTL"}
        return self._set_field(tenant, ns, "message_ttl_in_seconds", body)

    def _put_properties(self, body, tenant, ns):
        policies = self.namespaces.get(f"{tenant}/{ns}")
        if policies is None:
            return 404, {"reason": "Namespace does not exist"}
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
            return 412, {"reason": "Properties must be a map of strings"}
        policies["properties"] = {**(policies.get("properties") or {}), **body}
        return 204, None

    def _delete_property(self, body, tenant, ns, key):
        policies = self.namespaces.get(f"{tenant}/{ns}")
        if policies is None:
            return 404, {"reason": "Namespace does not exist"}
        (policies.get("properties") or {}).pop(key, None)
        return 204, None

    # -- partitioned topics --------------------------------------------------------------------
    def _get_parts(self, body, domain, tenant, ns, topic):
        return 200, {"partitions": self.partitioned.get(f"{domain}://{tenant}/{ns}/{topic}", 0)}

    def _put_parts(self, body, domain, tenant, ns, topic):
        name = f"{domain}://{tenant}/{ns}/{topic}"
        if f"{tenant}/{ns}" not in self.namespaces:
            return 404, {"reason": "Namespace does not exist"}
        if name in self.partitioned:
            return 409, {"reason": "Partitioned topic already exists"}
        if not isinstance(body, int) or isinstance(body, bool) or body <= 0:
            return 406, {"reason": "The number of partitions should be more than 0"}
        self.partitioned[name] = body
        return 204, None

    def _post_parts(self, body, domain, tenant, ns, topic):
        name = f"{domain}://{tenant}/{ns}/{topic}"
        if name not in self.partitioned:
            return 404, {"reason": "Partitioned topic does not exist"}
        if not isinstance(body, int) or isinstance(body, bool) or body <= self.partitioned[name]:
            return 422, {"reason": "Number of partitions must be more than existing"}
        self.partitioned[name] = body
        return 204, None


    # -- topics ------------------------------------------------------------------------------------
    def _put_topic(self, body, domain, tenant, ns, topic):
        name = f"{domain}://{tenant}/{ns}/{topic}"
        if f"{tenant}/{ns}" not in self.namespaces:
            return 404, {"reason": "Namespace does not exist"}
        if name in self.topics or name in self.partitioned:
            return 409, {"reason": "This topic already exists"}
        self.topics.add(name)
        return 204, None

    def _list_topics(self, body, tenant, ns):
        if f"{tenant}/{ns}" not in self.namespaces:
            return 404, {"reason": "Namespace does not exist"}
        inside = f"persistent://{tenant}/{ns}/"
        names = [t for t in self.topics if t.startswith(inside)]
        names += [f"{t}-partition-{i}" for t, n in self.partitioned.items() if t.startswith(inside) for i in range(n)]
        return 200, sorted(names)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FakePulsarAdmin

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            status, answer = 400, {"reason": "Body is not JSON"}
        else:
            status, answer = self.server.dispatch(self.command, self.path.split("?", 1)[0], body,
                                                  self.headers.get("Authorization"))
        payload = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = _serve  # noqa: N815 - http.server's names

    def log_message(self, *args):
        pass
