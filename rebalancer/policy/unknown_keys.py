"""The names a policy model accepts at a field path, for the "did you mean" of an unknown key."""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel


def did_you_mean(root: type[BaseModel], loc: Sequence[int | str]) -> str:
    """`` (did you mean 'x'?)`` for the unknown key at ``loc`` (its last part), or "" when nothing is close."""
    key = loc[-1] if loc else None
    model = _model_at(root, loc[:-1])
    if model is None or not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key, accepted_names(model), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def accepted_names(model: type[BaseModel]) -> list[str]:
    """The YAML names of a model's fields (their camelCase aliases)."""
    return [
        field.validation_alias if isinstance(field.validation_alias, str) else name
        for name, field in model.model_fields.items()
    ]


def _model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    current: Any = root
    for part in loc:
        current = _step(current, part)
        if current is None:
            return None
    models = [c for c in members(current) if is_model(c)]
    return models[0] if len(models) == 1 else None


def _step(annotation: Any, part: int | str) -> Any:
    for member in members(annotation):
        if is_model(member) and isinstance(part, str):
            if _tagged(member, part):
                return member  # a discriminated union's tag: the member it selects, not a field
            for name, field in member.model_fields.items():
                if part in (name, field.validation_alias):
                    return field.annotation
        origin = get_origin(member)
        if origin in (tuple, list) and isinstance(part, int):
            return get_args(member)[0]
        if origin is dict and isinstance(part, str):
            return get_args(member)[1]
    return None


def members(annotation: Any) -> list[Any]:
    """A union's members, Annotated and Optional unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in members(arg)]
    return [annotation]


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tagged(model: type[BaseModel], tag: str) -> bool:
    kind = model.model_fields.get("kind")
    return kind is not None and get_origin(kind.annotation) is Literal and tag in get_args(kind.annotation)
