"""Bearer tokens kept in files (mounted Secrets): the Prometheus bearer token, the webhook's token."""

from __future__ import annotations

from pathlib import Path

from rebalancer.domain.errors import TokenFileError

PROMETHEUS_TOKEN_FILE = "the Prometheus bearer token file"
WEBHOOK_TOKEN_FILE = "the webhook token file"


def read_token_file(path: str | Path, what: str) -> bytes:
    """The token in the file ``path`` (white space around it stripped), ``what`` naming the file in the
    error: ``TokenFileError`` when it cannot be read or holds nothing. The token itself is never in a message."""
    try:
        token = Path(path).read_bytes().strip()
    except OSError as exc:
        raise TokenFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if not token:
        raise TokenFileError(f"{what} {path} is empty")
    return token
