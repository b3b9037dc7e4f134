"""``rebalancer import-policy FILE``: read a descheduler policy, write the rebalancer policy, list the notes."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from rebalancer.descheduler.convert import convert
from rebalancer.descheduler.render import notes_text, policy_yaml
from rebalancer.descheduler.source import SourceProblem
from rebalancer.errors import ConfigError
from rebalancer.policy import MAX_POLICY_BYTES, decode_policy, parse_policy


def import_policy(source: str, out: str | None) -> None:
    """Write the imported policy to ``out`` (None: stdout) and its notes to stderr. ConfigError when the file
    is no descheduler policy, or when the result would not pass ``check-config`` (nothing is written then)."""
    text = _read(source)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [("", f"not valid YAML: {exc}")]) from exc
    try:
        conversion = convert(document)
    except SourceProblem as exc:
        raise ConfigError(source, [(exc.path, exc.message)]) from exc
    written = policy_yaml(conversion, Path(source).name)
    parse_policy(written, f"the policy imported from {source}")  # the file written passes check-config
    if out is None:
        sys.stdout.write(written)
    else:
        try:
            Path(out).write_text(written, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(out, [("", f"cannot write: {exc.strerror or exc}")]) from exc
    where = "stdout" if out is None else out
    sys.stderr.write(f"imported {conversion.shape} from {source} to {where}\n" + notes_text(conversion))


def _read(source: str) -> str:
    try:
        with Path(source).open("rb") as file:
            raw = file.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise ConfigError(source, [("", f"cannot read: {exc.strerror or exc}")]) from exc
    if len(raw) > MAX_POLICY_BYTES:
        raise ConfigError(source, [("", f"larger than {MAX_POLICY_BYTES // 1024} KiB: not a policy file")])
    return decode_policy(raw, source)
