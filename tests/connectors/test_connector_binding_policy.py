"""The operator's grants to admin-API bindings (issue 14, items 1 and 2), in-process.

Python: only callables in `connectors.python_modules`, checked on the string before anything is
imported. HTTP: credentials only from `connectors.credential_env`; `base_url` only to
`connectors.allowed_hosts`; never a link-local or metadata address unless listed, checked at
registration and again on the peer address of every new connection.
"""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from connector_support import REPO_ROOT, recording_listener

from gateway.config.model import config_from_text
from gateway.connectors import ConnectorRegistry
from gateway.connectors.bindings import (
    BindingPolicy,
    ConnectorRequest,
    ConnectorResponse,
    HttpBinding,
    HttpBindingConfig,
    PythonBindingConfig,
    make_binding,
    parse_binding,
)
from gateway.connectors.bindings.http import REFUSED_ADDRESS
from gateway.connectors.bindings.policy import parse_host_entry, special_kind
from gateway.connectors.errors import BindingConfigError, BindingNotAllowed
from gateway.conventions.outcomes import NotSent
from gateway.errors import ConfigError

BILLING_TEXT = (REPO_ROOT / "examples/connectors/billing/connector.yaml").read_text()
ATTACKS = ["os:system", "builtins:exec", "subprocess:run", "sys:exit", "this:s"]
REQUEST = ConnectorRequest(connector="billing", operation="getInvoice", input={"invoice_id": "inv-1"},
                           call_id="c-1", idempotency_key=None, attempt=1)


def python(spec: str) -> PythonBindingConfig:
    return PythonBindingConfig(type="python", callable=spec)


def http_config(base_url: str, env: str | None = None) -> HttpBindingConfig:
    data: dict[str, Any] = {"type": "http", "base_url": base_url}
    if env is not None:
        data["credential"] = {"env": env}
    config = parse_binding(data, where="t")
    assert isinstance(config, HttpBindingConfig)
    return config


def refused(policy: BindingPolicy, binding: HttpBindingConfig | PythonBindingConfig, source: str = "api") -> BindingNotAllowed:
    with pytest.raises(BindingNotAllowed) as caught:
        policy.check(binding, source=source, where="x.yaml")  # type: ignore[arg-type]
    return caught.value


# -- modules the tests import (or must not) -----------------------------------------------------------


@pytest.fixture
def probe_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`probe_pkg` (allowed in the tests), `probe_pkg.ops`, `probe_pkgx` (the `a.bc` trap) and
    `probe_loud`: every module appends its name to `imports.log` when it is imported."""
    log = tmp_path / "imports.log"
    root = tmp_path / "modules"
    (root / "probe_pkg").mkdir(parents=True)
    marker = f"open({str(log)!r}, 'a').write(__name__ + '\\n')\n"
    (root / "probe_pkg" / "__init__.py").write_text(marker)
    (root / "probe_pkg" / "ops.py").write_text(marker + textwrap.dedent("""
        import os
        import sys
        from os import system
        from subprocess import run as launch

        def handle(request):
            return {"branch": "found", "value": {"ok": True}}

        def _hidden(request):
            return None

        class Handlers:
            @staticmethod
            def get(request):
                return {"branch": "found", "value": 1}

            def __call__(self, request):
                return {"branch": "found", "value": 2}

        handler_object = Handlers()
        not_callable = 42
    """))
    (root / "probe_pkgx.py").write_text(marker + "def fn(request):\n    return None\n")
    (root / "probe_loud.py").write_text(marker + "print('LOUD MODULE RAN')\ndef fn(request):\n    return None\n")
    (root / "probe_exits.py").write_text(marker + "import sys\nsys.exit('module-level exit')\n")
    monkeypatch.syspath_prepend(str(root))
    for name in ("probe_pkg", "probe_pkg.ops", "probe_pkgx", "probe_loud", "probe_exits"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield log
    for name in ("probe_pkg", "probe_pkg.ops", "probe_pkgx", "probe_loud", "probe_exits"):
        sys.modules.pop(name, None)


def imported(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


# -- Python ---------------------------------------------------------------------------------------------


def test_module_prefix_matches_whole_components() -> None:
    policy = BindingPolicy.of(python_modules=["a.b"])
    assert policy.module_allowed("a.b") and policy.module_allowed("a.b.c") and policy.module_allowed("a.b.c.d")
    assert not policy.module_allowed("a.bc") and not policy.module_allowed("a") and not policy.module_allowed("x.a.b")


@pytest.mark.parametrize("spec", ATTACKS)
def test_attacks_refused_with_the_key_to_set(spec: str) -> None:
    for policy in (BindingPolicy(), BindingPolicy.of(python_modules=["my_company.connectors"])):
        error = refused(policy, python(spec))
        assert error.config_key == "connectors.python_modules"
        assert "connectors.python_modules" in str(error) and repr(spec) in str(error)
    assert "are off" in str(refused(BindingPolicy(), python(spec)))


@pytest.mark.anyio
async def test_nothing_imported_before_the_check(probe_modules: Path, capfd: pytest.CaptureFixture[str]) -> None:
    sys.modules.pop("this", None)
    policy = BindingPolicy.of(python_modules=["probe_pkg"], allowed_hosts=["127.0.0.1"])
    async with ConnectorRegistry("memory://", policy=policy) as registry:
        for spec in ["this:s", "probe_loud:fn", "probe_pkgx:fn", "probe_exits:fn", *ATTACKS]:
            with pytest.raises(BindingNotAllowed, match="connectors.python_modules"):
                await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": spec})
        assert "this" not in sys.modules and "probe_loud" not in sys.modules and "probe_pkgx" not in sys.modules
        assert imported(probe_modules) == []
        out, err = capfd.readouterr()
        assert "Zen of Python" not in out + err and "LOUD" not in out + err
        # The probe works: an allowed module is imported (and its parent package with it).
        await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": "probe_pkg.ops:handle"})
        assert imported(probe_modules) == ["probe_pkg", "probe_pkg.ops"]
        assert registry.tool("billing_get_invoice") is not None


@pytest.mark.anyio
async def test_no_detour_through_an_allowed_module(probe_modules: Path) -> None:
    """`probe_pkg.ops` imports os and re-exports os.system and subprocess.run: reaching them
    through it is refused after the (allowed) import; private names before it."""
    policy = BindingPolicy.of(python_modules=["probe_pkg"])
    async with ConnectorRegistry("memory://", policy=policy) as registry:
        for spec in ["probe_pkg.ops:_hidden", "probe_pkg.ops:__builtins__.exec", "probe_pkg.ops:handle.__globals__"]:
            with pytest.raises(BindingNotAllowed, match="public name"):
                await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": spec})
        assert imported(probe_modules) == []
        for spec, leads_to in [("probe_pkg.ops:os.system", "'os'"), ("probe_pkg.ops:system", "'posix'"),
                               ("probe_pkg.ops:launch", "'subprocess'"), ("probe_pkg.ops:sys.exit", "'sys'")]:
            with pytest.raises(BindingNotAllowed, match=f"leads to {leads_to}"):
                await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": spec})
        with pytest.raises(BindingConfigError, match="not callable"):
            await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": "probe_pkg.ops:not_callable"})
        for spec in ["probe_pkg.ops:Handlers.get", "probe_pkg.ops:handler_object"]:
            await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": spec})
        assert registry.tools()


@pytest.mark.anyio
async def test_module_that_exits_at_import_is_refused_not_fatal(probe_modules: Path) -> None:
    policy = BindingPolicy.of(python_modules=["probe_exits"])
    async with ConnectorRegistry("memory://", policy=policy) as registry:
        with pytest.raises(BindingConfigError, match="cannot import the binding callable 'probe_exits:fn': SystemExit"):
            await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": "probe_exits:fn"})
        assert registry.tools() == []


def test_config_directory_keeps_its_freedom(probe_modules: Path) -> None:
    """The operator's own files: any callable, any credential variable, any host but the
    link-local and metadata ones."""
    policy = BindingPolicy()
    make_binding(python("probe_loud:fn"), policy=policy, source="config")
    assert "probe_loud" in sys.modules
    policy.check(http_config("http://203.0.113.7:8080/x", env="PATH"), source="config", where="binding.yaml")
    assert refused(policy, http_config("http://169.254.169.254/latest"), source="config").config_key == "connectors.allowed_hosts"


@pytest.mark.anyio
async def test_stored_registration_outside_the_policy_is_left_out(tmp_path: Path, probe_modules: Path) -> None:
    """Another replica (with a wider policy) stored it: this replica does not import it."""
    url = f"sqlite:///{tmp_path}/shared.db"
    wide = BindingPolicy.of(python_modules=["probe_pkg", "probe_loud"])
    async with ConnectorRegistry(url, policy=wide) as a:
        await a.add(BILLING_TEXT.replace("name: billing", "name: loud", 1), "loud.yaml",
                    {"type": "python", "callable": "probe_loud:fn"})
    sys.modules.pop("probe_loud", None)
    probe_modules.unlink()
    async with ConnectorRegistry(url, policy=BindingPolicy.of(python_modules=["probe_pkg"])) as b:
        assert b.tools() == [] and "probe_loud" not in sys.modules and imported(probe_modules) == []


# -- credentials ------------------------------------------------------------------------------------------


def test_credentials_only_from_listed_variables() -> None:
    policy = BindingPolicy.of(credential_env=["BILLING_TOKEN"], allowed_hosts=["127.0.0.1"])
    for env in ("PATH", "HOME", "AWS_SECRET_ACCESS_KEY", "billing_token"):
        error = refused(policy, http_config("http://127.0.0.1:9100/b", env=env))
        assert error.config_key == "connectors.credential_env"
        assert f"binding.credential.env {env!r} is refused" in str(error) and "listed: BILLING_TOKEN" in str(error)
    policy.check(http_config("http://127.0.0.1:9100/b", env="BILLING_TOKEN"), source="api", where="x")
    policy.check(http_config("http://127.0.0.1:9100/b"), source="api", where="x")  # no credential at all


@pytest.mark.anyio
async def test_refused_credential_is_never_read() -> None:
    class Spy(dict[str, str]):
        def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
            raise AssertionError(f"read {key}")

        def __getitem__(self, key: str) -> str:
            raise AssertionError(f"read {key}")

    async with ConnectorRegistry("memory://", environ=Spy(), policy=BindingPolicy.of(allowed_hosts=["127.0.0.1"])) as registry:
        with pytest.raises(BindingNotAllowed, match="connectors.credential_env"):
            await registry.add(BILLING_TEXT, "billing.yaml", {"type": "http", "base_url": "http://127.0.0.1:9/b",
                                                             "credential": {"env": "PATH"}})


# -- hosts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest", "http://[fe80::1]/", "http://metadata.google.internal/",
    "http://METADATA.Google.Internal./computeMetadata/v1/", "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/", "http://[fd00:ec2::254]/", "http://100.100.100.200/", "http://169.254.170.2/v2",
    "http://[fe80::1%25eth0]:8080/", "http://169.254.1.1:8080/", "http://metadata/",
])
def test_link_local_and_metadata_refused_even_with_a_wide_allowlist(url: str) -> None:
    for policy in (BindingPolicy(), BindingPolicy.of(allowed_hosts=["0.0.0.0/0", "::/0", "10.0.0.0/8"])):
        for source in ("api", "config"):
            error = refused(policy, http_config(url), source)
            assert error.config_key == "connectors.allowed_hosts"
            assert "metadata" in str(error) or "link-local" in str(error), str(error)


def test_link_local_and_metadata_only_when_listed_explicitly() -> None:
    policy = BindingPolicy.of(allowed_hosts=["169.254.169.254", "169.254.10.0/24", "metadata.google.internal", "fe80::/64"])
    for url in ["http://169.254.169.254/latest", "http://169.254.10.7/", "http://[fe80::1]/", "http://metadata.google.internal/"]:
        policy.check(http_config(url), source="api", where="x")
    # A link-local network does not unlock a metadata address inside it, nor the rest of the range.
    assert refused(BindingPolicy.of(allowed_hosts=["169.254.0.0/16"]), http_config("http://169.254.169.254/")).config_key
    refused(policy, http_config("http://169.254.11.1/"))
    assert policy.address_refusal(parse_host_entry("169.254.169.254").network.network_address) is None  # type: ignore[union-attr]


def test_admin_api_hosts_default_and_allowlist() -> None:
    error = refused(BindingPolicy(), http_config("http://127.0.0.1:9100/billing"))
    assert "HTTP bindings through the admin API are off" in str(error) and "connectors.allowed_hosts" in str(error)
    policy = BindingPolicy.of(allowed_hosts=["127.0.0.1:9100", "billing.internal", "10.0.0.0/8", "[::1]:9200"])
    for url in ["http://127.0.0.1:9100/billing", "https://billing.internal/x", "http://BILLING.internal.:8080/",
                "http://10.20.30.40:1234/", "http://[::1]:9200/t"]:
        policy.check(http_config(url), source="api", where="x")
    for url, why in [("http://127.0.0.1:9101/billing", "port 9101"), ("http://localhost:9100/", "host name 'localhost'"),
                     ("http://11.0.0.1/", "address 11.0.0.1"), ("http://billing.internal.evil.com/", "host name"),
                     ("http://2852039166/", "host name"), ("http://[::1]:9100/", "port 9100"),
                     ("http://0.0.0.0:9100/", "address 0.0.0.0")]:
        assert why in str(refused(policy, http_config(url))), url


@pytest.mark.anyio
async def test_name_resolving_to_link_local_refused_at_registration() -> None:
    """`2852039166` is 169.254.169.254 to the resolver; the config directory's static check
    lets the name through, the resolved check does not."""
    policy = BindingPolicy()
    binding = http_config("http://2852039166/latest")
    policy.check(binding, source="config", where="binding.yaml")
    with pytest.raises(BindingNotAllowed, match="resolves to 169.254.169.254"):
        await policy.check_resolved(binding, where="binding.yaml")
    await policy.check_resolved(http_config("http://localhost:9/x"), where="binding.yaml")
    await policy.check_resolved(http_config("http://no-such-host.invalid/x"), where="binding.yaml")  # unresolvable: connect decides


def test_special_kinds() -> None:
    import ipaddress

    assert special_kind(ipaddress.ip_address("169.254.169.254")) == "a cloud metadata address"
    assert special_kind(ipaddress.ip_address("::ffff:a9fe:a9fe")) == "a cloud metadata address"
    assert special_kind(ipaddress.ip_address("2002:a9fe:0101::1")) == "a link-local address"  # 6to4 of 169.254.1.1
    assert special_kind(ipaddress.ip_address("fe80::1")) == "a link-local address"
    for fine in ("127.0.0.1", "10.0.0.1", "::1", "2001:db8::1", "::"):
        assert special_kind(ipaddress.ip_address(fine)) is None


# -- connect time -------------------------------------------------------------------------------------------


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with recording_listener() as listener:
        yield listener.base, listener.seen


class _RefuseLoopback:
    """A guard standing in for DNS rebinding: the name passed registration, the address the
    connection reached is one the policy refuses."""

    def __init__(self) -> None:
        self.peers: list[str] = []

    def peer_refusal(self, peer: str) -> str | None:
        self.peers.append(peer)
        return f"{peer} is refused" if peer.startswith("127.") else None


@pytest.mark.anyio
async def test_connect_time_check_on_the_peer_address(recorder: tuple[str, list[dict[str, Any]]]) -> None:
    base, seen = recorder
    port = base.rsplit(":", 1)[1]
    guard = _RefuseLoopback()
    binding = HttpBinding(http_config(f"http://localhost:{port}/svc"), environ={}, guard=guard)
    result = await binding.attempt(REQUEST, 5)
    assert result == NotSent(REFUSED_ADDRESS)
    assert guard.peers and seen == []  # refused before a byte of the request was written
    # The same binding with the default guard (link-local/metadata only) reaches the listener.
    ok = await HttpBinding(http_config(f"http://localhost:{port}/svc"), environ={}).attempt(REQUEST, 5)
    assert ok == ConnectorResponse(branch="found", value={"ok": True}) and len(seen) == 1


@pytest.mark.anyio
async def test_registry_client_checks_every_new_connection(recorder: tuple[str, list[dict[str, Any]]]) -> None:
    """The registry's pooled client goes through the same guard (the policy's peer check)."""
    base, seen = recorder
    policy = BindingPolicy.of(allowed_hosts=["127.0.0.1"], credential_env=["GRANTED"])
    async with ConnectorRegistry("memory://", environ={"GRANTED": "g-secret", "PATH": "/secret/path"}, policy=policy) as registry:
        await registry.add(BILLING_TEXT, "billing.yaml", {"type": "http", "base_url": f"{base}/billing",
                                                         "credential": {"env": "GRANTED"}})
        tool = registry.tool("billing_get_invoice")
        assert tool is not None
        answer = await tool.call({"invoice_id": "inv-1"}, idempotency_key=None, fence_id=None, takeover=False)
        assert not answer.is_error, answer.text
    assert [s["headers"].get("Authorization") for s in seen] == ["Bearer g-secret"]
    assert "/secret/path" not in repr(seen)


@pytest.mark.anyio
async def test_redirect_not_followed(recorder: tuple[str, list[dict[str, Any]]]) -> None:
    base, seen = recorder

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(307)
            self.send_header("location", f"{base}/followed")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        binding = HttpBinding(http_config(f"http://127.0.0.1:{server.server_address[1]}/svc"), environ={})
        result = await binding.attempt(REQUEST, 5)
    finally:
        server.shutdown()
        server.server_close()
    assert "HTTP 307" in getattr(result, "reason", "") and seen == []


@pytest.mark.anyio
async def test_client_texts_name_no_address_or_exception() -> None:
    result = await HttpBinding(http_config("http://127.0.0.1:9/svc"), environ={}).attempt(REQUEST, 5)
    assert isinstance(result, NotSent)
    assert "127.0.0.1" not in result.reason and "Error" not in result.reason and "Errno" not in result.reason


# -- config ---------------------------------------------------------------------------------------------------


def test_config_keys_validated_with_file_line_and_key() -> None:
    text = textwrap.dedent("""\
        connectors:
          python_modules:
            - my_company.connectors
          credential_env:
            - BILLING_TOKEN
          allowed_hosts:
            - 127.0.0.1:9100
            - billing.internal
            - 10.0.0.0/8
            - "[::1]:9100"
    """)
    config = config_from_text(text, "gw.yaml")
    policy = BindingPolicy.from_config(config.connectors)
    assert policy.python_modules == ("my_company.connectors",) and policy.credential_env == {"BILLING_TOKEN"}
    assert [e.text for e in policy.allowed_hosts] == ["127.0.0.1:9100", "billing.internal", "10.0.0.0/8", "[::1]:9100"]
    assert BindingPolicy.from_config(config_from_text("connectors: {}\n").connectors) == BindingPolicy()
    for bad, line, key, says in [
        ("python_modules:\n    - ok.mod\n    - 'os:system'", 4, "connectors.python_modules.1", "not a dotted module name"),
        ("credential_env:\n    - PATH-X", 3, "connectors.credential_env.0", "not an environment variable name"),
        ("allowed_hosts:\n    - '*.internal'", 3, "connectors.allowed_hosts.0", "wildcards are not supported"),
        ("allowed_hosts:\n    - 10.0.0.0/40", 3, "connectors.allowed_hosts.0", "not a network"),
        ("allowed_hosts:\n    - 'host:0'", 3, "connectors.allowed_hosts.0", "port"),
        ("allowed_hosts:\n    - 'http://billing.internal'", 3, "connectors.allowed_hosts.0", "write the host only"),
        ("python_module: [a]", 2, "connectors.python_module", "unknown key"),
    ]:
        with pytest.raises(ConfigError) as caught:
            config_from_text(f"connectors:\n  {bad}\n", "gw.yaml")
        message = str(caught.value)
        assert f"gw.yaml:{line}: {key}: " in message and says in message, message
