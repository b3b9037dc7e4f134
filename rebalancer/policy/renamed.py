"""Former policy keys that held a number of seconds (``timeoutSeconds: 15``), read as the Duration field that
replaced each (``timeout: 15s``), so that older policy files keep working; each one read is reported."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from rebalancer.domain.settings.shared import format_duration
from rebalancer.policy.unknown_keys import is_model, members


@dataclass(frozen=True)
class Renaming:
    """What the former keys of one policy file became: a warning per key read, a problem per key that
    cannot be read, and the new path of each converted key's old one (for the messages)."""

    warnings: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    old_paths: dict[str, str] = field(default_factory=dict)

    def name_old_keys(self, problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """``problems`` with a converted key's path as the file writes it (``...timeoutSeconds (read as timeout)``)."""
        return [(self._as_written(path), message) for path, message in problems]

    def _as_written(self, path: str) -> str:
        old = self.old_paths.get(path)
        return path if old is None else f"{old} (read as {path.rsplit('.', 1)[-1]})"


def rename_seconds(model: type[BaseModel], data: dict[str, Any]) -> tuple[dict[str, Any], Renaming]:
    """``data`` (a policy as YAML reads it) with every former ``...Seconds`` key of ``model`` and the models
    below it replaced by its Duration field; the input is left as it is."""
    renaming = Renaming()
    return _renamed(model, data, "", renaming), renaming


def _renamed(model: type[BaseModel], data: dict[str, Any], path: str, renaming: Renaming) -> dict[str, Any]:
    result = dict(data)
    for old, new in getattr(model, "renamed_seconds", {}).items():
        if old not in result:
            continue
        old_path, new_path = f"{path}{old}", f"{path}{new}"
        if new in result:
            renaming.problems.append((old_path, f"set both {old} and {new}: keep {new} only (a duration such as 30s)"))
            continue
        value = _duration_text(result.pop(old), _allows_null(model, new))
        if isinstance(value, ValueError):
            renaming.problems.append((old_path, f"{value}; write {new} as a duration such as 30s instead"))
            continue
        result[new] = value
        renaming.old_paths[new_path] = old_path
        written = "null" if value is None else value
        renaming.warnings.append(f"{old_path} is now {new_path}, a duration: read as `{new}: {written}`; write it so")
    for name, info in model.model_fields.items():
        key = info.validation_alias if isinstance(info.validation_alias, str) else name
        nested = _model_of(info.annotation)
        if nested is not None and isinstance(result.get(key), dict):
            result[key] = _renamed(nested, result[key], f"{path}{key}.", renaming)
    return result


def _duration_text(seconds: object, allows_null: bool) -> str | ValueError | None:
    """A number of seconds as the duration text (0: null where the field takes null), or why it cannot be."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return ValueError(f"{seconds!r} is not a number of seconds")
    if seconds == 0 and allows_null:
        return None
    if seconds <= 0 or seconds != int(seconds):
        return ValueError(f"{seconds!r} is not a positive whole number of seconds")
    return format_duration(timedelta(seconds=int(seconds)))


def _allows_null(model: type[BaseModel], alias: str) -> bool:
    for name, info in model.model_fields.items():
        if alias in (name, info.validation_alias):
            return type(None) in members(info.annotation)
    return False


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The one model a field holds directly (optional or not); None for lists, unions of models and scalars."""
    models = [m for m in members(annotation) if is_model(m)]
    return models[0] if len(models) == 1 else None
