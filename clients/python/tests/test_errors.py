"""Each JSON-RPC error code the daemon answers with arrives as its own exception class, and the
tenancy refusals (a missing right, a quota) come through a real daemon with their `data`."""

import pytest

import cellvisor
from cellvisor import Client
from cellvisor.errors import rpc_error

from conftest import CONFIG, binary, free_port

ALPHA_TOKEN = "alpha-token-0123456789abcdef"


@pytest.mark.parametrize("code, cls", [
    (-32700, cellvisor.ParseError), (-32600, cellvisor.InvalidRequest), (-32601, cellvisor.MethodNotFound),
    (-32602, cellvisor.InvalidParams), (-32603, cellvisor.InternalError), (-32001, cellvisor.Refused),
    (-32002, cellvisor.ShuttingDown), (-32003, cellvisor.Draining), (-32004, cellvisor.WrongSession),
    (-32005, cellvisor.LeasedElsewhere), (-32006, cellvisor.SessionUnknown), (-32007, cellvisor.ProtocolMismatch),
    (-32008, cellvisor.QuotaExceeded), (-32009, cellvisor.Forbidden),
])
def test_every_documented_code_has_its_class(code, cls):
    error = rpc_error({"code": code, "message": "m", "data": {"k": 1}})
    assert type(error) is cls and error.code == code and error.data == {"k": 1}
    assert isinstance(error, cellvisor.RpcError)


def test_an_undocumented_code_is_the_base_class():
    error = rpc_error({"code": -31999, "message": "m"})
    assert type(error) is cellvisor.RpcError and error.code == -31999


@pytest.fixture(scope="module")
def tenant_daemon(tmp_path_factory):
    files = tmp_path_factory.mktemp("tenants")
    (files / "alpha.token").write_text(ALPHA_TOKEN + "\n")
    tenants = files / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "alpha"\ntoken-file = "alpha.token"\nrights = ["cells"]\n'
                       'max-sessions = 1\n')
    port = free_port()
    config = CONFIG + f'listen = ["tcp://127.0.0.1:{port}"]\ntenants-file = "{tenants}"\n'
    started = cellvisor.Daemon(binary(), config, prefix="cv-pytest-tn-", private_dirs=True,
                               new_session=True)
    yield f"ws://127.0.0.1:{port}"
    assert started.stop(), "the tenants' daemon did not stop when asked"


def test_a_tenant_without_the_operate_right_gets_forbidden(tenant_daemon):
    with Client.connect(url=tenant_daemon, token=ALPHA_TOKEN, timeout=60) as client:
        with pytest.raises(cellvisor.Forbidden) as refused:
            client.drain()
    assert refused.value.code == -32009
    assert refused.value.data["right"] == "operate" and refused.value.data["tenant"] == "alpha"


def test_a_tenant_at_its_session_quota_gets_quota_exceeded(tenant_daemon):
    with Client.connect(url=tenant_daemon, token=ALPHA_TOKEN, timeout=60) as client:
        assert client.cell("first", "lua", "print(1)")["output"] == "1\n"
        with pytest.raises(cellvisor.QuotaExceeded) as refused:
            client.cell("second", "lua", "print(2)")
        assert client.cell("first", "lua", "print(3)")["output"] == "3\n"  # the live one is untouched
    assert refused.value.code == -32008
    assert refused.value.data["quota"] == "max-sessions" and refused.value.data["limit"] == 1


def test_a_daemon_that_binds_and_then_refuses_to_start_says_why():
    # A runtime directory too long for worker sockets: the daemon binds its own socket, then
    # exits; the error carries its log's reason, not a bare "connection reset".
    with pytest.raises(cellvisor.StartError, match="too long for worker sockets"):
        cellvisor.Daemon(binary(), CONFIG, prefix="cellvisor-pytest-" + "x" * 40 + "-", private_dirs=True,
                         new_session=True)


def test_every_code_of_the_schema_has_its_class():
    # The codes come from the protocol's schema (cellvisor._generated); each has a class.
    from cellvisor import _generated
    from cellvisor.errors import _BY_CODE

    assert sorted(_BY_CODE) == sorted(_generated.ERROR_CODES.values())
    for name, code in _generated.ERROR_CODES.items():
        assert _BY_CODE[code].CODE == code, name
