"""What a scenario is asked to do."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    quick: bool = False
    repetitions: int | None = None   # None: the scenario's default
    lab_prefix: str = "lfpb"         # names of the throw-away namespaces

    def reps(self, full: int, quick: int = 1) -> int:
        if self.repetitions is not None:
            return max(1, self.repetitions)
        return quick if self.quick else full
