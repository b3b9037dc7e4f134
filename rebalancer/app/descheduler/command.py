"""``rebalancer import-policy FILE``: read a descheduler policy, write the rebalancer policy, list the notes."""

from __future__ import annotations

import sys
from pathlib import Path

from rebalancer.app.descheduler.convert import convert
from rebalancer.app.descheduler.render import notes_text, policy_yaml
from rebalancer.app.descheduler.source import SourceProblem
from rebalancer.domain.errors import ConfigError
from rebalancer.policy import load_yaml, parse_policy, read_policy_text


def import_policy(source: str, out: str | None) -> None:
    """Write the imported policy to ``out`` (None: stdout) and its notes to stderr. ConfigError when the file
    is no descheduler policy, or when the result would not pass ``check-config`` (nothing is written then)."""
    text = read_policy_text(source)
    document = load_yaml(text, source)
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
