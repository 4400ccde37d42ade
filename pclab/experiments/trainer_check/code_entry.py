"""One diagnosis code's entry in the registry (codes.py says what each field means): the
type every mode's codes are declared with."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("token", "coupled", "run", "coupled_run")
EXIT = {"unusable": 2, "different": 1, "no_evidence": 2}  # effect -> the command's exit code


@dataclass(frozen=True)
class Code:
    code: str
    summary: str
    effects: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    modes: tuple[str, ...] = MODES
    cases: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ("scenario", "message")

    def __post_init__(self) -> None:
        if unknown := [e for e in self.effects if e not in EXIT]:
            raise ValueError(f"effects={unknown} is invalid: expected some of {', '.join(EXIT)}")
        if not self.modes or set(self.modes) - set(MODES):
            raise ValueError(f"modes={self.modes} is invalid: expected some of {MODES}")

    @property
    def exit(self) -> str:
        """The README's "exit" column: "2", "1", "2 / 1", or "—" for none of its own."""
        return " / ".join(map(str, sorted({EXIT[e] for e in self.effects}, reverse=True))) or "—"

    @property
    def keys(self) -> tuple[str, ...]:
        """Its catalogue keys: one per case."""
        base = f"check.diagnosis.{self.code}"
        return tuple(f"{base}.{case}" for case in self.cases) or (base,)
