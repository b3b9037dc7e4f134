"""Certificates and keys for a test control plane, made with the openssl command line: a CA, the API
server's serving certificate (SAN IP:127.0.0.1), the service-account signing key pair, and a static
token file whose admin (the test's own hands) and user (rebalancer's, see :data:`USER`) are in ``system:masters``."""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

USER = "rebalancer-user"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    admin_token: str
    user_token: str  # another member of system:masters, so that the audit log tells its requests from the test's


def _openssl(*args: str | Path, cwd: Path) -> None:
    done = subprocess.run(["openssl", *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(map(str, args))} failed: {done.stderr.strip()}")


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "7", "-subj", "/CN=rebalancer-test-ca", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=kube-apiserver", cwd=d)  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n")
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "serving.crt", "-days", "7", "-extfile", "san.cnf", cwd=d)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    token, user = secrets.token_hex(16), secrets.token_hex(16)
    (d / "tokens.csv").write_text(
        f'{token},test-admin,test-admin-uid,"system:masters"\n{user},rebalancer-user,rebalancer-user-uid,"system:masters"\n'
    )
    return Pki(d / "ca.crt", d / "ca.key", d / "serving.crt", d / "serving.key", d / "sa.key", d / "sa.pub",
               d / "tokens.csv", token, user)  # fmt: skip
