"""A daemon per test module: `cellvisor serve` from $CELLVISOR_BIN (default: the workspace's
target/debug/cellvisor) on a socket in a private temporary directory, with its own config
file, stopped after the module (by its pid only)."""

import os
import pathlib
import shutil
import socket
import subprocess

import pytest

from cellvisor import Daemon

ROOT = pathlib.Path(__file__).resolve().parents[3]
CONFIG = '[python]\nprewarm = 0\n[daemon]\nidle-exit = "0s"\n'


def binary() -> str:
    path = os.environ.get("CELLVISOR_BIN") or str(ROOT / "target" / "debug" / "cellvisor")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no cellvisor binary at {path}: build it (cargo build -p cellvisor-cli) "
                           "or set CELLVISOR_BIN")
    return path


@pytest.fixture(scope="module")
def daemon():
    started = Daemon(binary(), CONFIG, prefix="cellvisor-pytest-", private_dirs=True, new_session=True)
    yield started
    assert started.stop(), "the daemon did not stop when asked"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TOKEN = "pytest-token-0123456789abcdef"


@pytest.fixture(scope="module")
def net_daemon(tmp_path_factory):
    """A daemon listening on ws://127.0.0.1:PORT and wss://127.0.0.1:PORT2 (two daemons,
    since a daemon's listeners share one TLS setting): {"ws": url, "wss": url, "cert": ca,
    "token_file": path}; wss is None without openssl."""
    files = tmp_path_factory.mktemp("net")
    token_file = files / "token"
    token_file.write_text(TOKEN + "\n")
    # These tests are of the client's protocol: the daemon keeps its sessions at isolation
    # level none on purpose (as root, a daemon on the network gives them uids of their own,
    # which the Rust suite's tests/uids.rs and network tests cover).
    base = '[isolation]\nlevel = "none"\n' + CONFIG + f'listen = ["tcp://127.0.0.1:{{port}}"]\ntoken-file = "{token_file}"\n{{tls}}'
    plain_port = free_port()
    daemons = [Daemon(binary(), base.format(port=plain_port, tls=""), prefix="cellvisor-pytest-ws-",
                      private_dirs=True, new_session=True)]
    info = {"ws": f"ws://127.0.0.1:{plain_port}", "wss": None, "cert": None, "token_file": str(token_file)}
    try:
        if shutil.which("openssl"):
            cert, key = files / "cert.pem", files / "key.pem"
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                 "-addext", "basicConstraints=critical,CA:FALSE", "-keyout", str(key), "-out", str(cert)],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            tls_port = free_port()
            tls = f'tls-cert = "{cert}"\ntls-key = "{key}"\n'
            daemons.append(Daemon(binary(), base.format(port=tls_port, tls=tls), prefix="cellvisor-pytest-wss-",
                                  private_dirs=True, new_session=True))
            info.update(wss=f"wss://127.0.0.1:{tls_port}", cert=str(cert))
        yield info
    finally:
        for started in daemons:
            assert started.stop(), "a network daemon did not stop when asked"
