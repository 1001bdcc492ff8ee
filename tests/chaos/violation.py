"""What a checker rule finds: a violation, with the few events that show it."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from tests.chaos.history import Event


@dataclass(frozen=True)
class Violation:
    rule: str
    key: Hashable  # identifies this violation, so a shrunk history can be checked for it
    message: str
    witnesses: tuple[Event, ...] = field(default=(), compare=False)


Rule = Callable[[Sequence[Event]], list[Violation]]
