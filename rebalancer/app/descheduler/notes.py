"""What an import could not carry over, or carried over with another meaning (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

NoteKind = Literal["unsupported", "differs"]


@dataclass(frozen=True, slots=True)
class Note:
    """One descheduler field: not imported (``unsupported``) or imported with a difference (``differs``)."""

    kind: NoteKind
    path: str
    message: str

    @classmethod
    def unsupported(cls, path: str, message: str) -> Note:
        return cls("unsupported", path, message)

    @classmethod
    def differs(cls, path: str, message: str) -> Note:
        return cls("differs", path, message)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(slots=True)
class Notes:
    """The notes of one import, in the order they were found, each once."""

    found: list[Note] = field(default_factory=list)

    def add(self, note: Note) -> None:
        if note not in self.found:
            self.found.append(note)

    def of(self, kind: NoteKind) -> tuple[Note, ...]:
        return tuple(n for n in self.found if n.kind == kind)
