"""Each experiment parameter declared once: a field of the experiment's frozen `Params`.

    @dataclass(frozen=True)
    class Params(Declared):
        tau: float = param(1.0, "temperature tau > 0", v.positive, parse=float)

From those fields come, with nothing typed twice:
    Params.checked(**raw)          validation (ValueError / TypeError naming the value), the
                                   one entry for pages, notebooks, the CLI and the ranks
    Params.add_options(parser)     the CLI's options (`pclab run <name> --help`), read back
    Params.from_options(args)      with the same checks
    params.worker_args()           the worker's command line: the same flags, so a hand-typed
    Params.from_worker_args(argv)  `torchrun -m pclab.experiments.<name> --out-dir D ...` works
    params_record(params)          the cache key and the run record (experiments.base)

A field without `param(...)` is derived (a file's digest): `Params.relate` fills it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

SPEC = "pclab.param"  # the metadata key of a declared field
T = TypeVar("T", bound="Declared")


@dataclass(frozen=True)
class Spec:
    """What a declared parameter is, besides its name, type and default."""

    help: str
    check: Callable[[object, str], object]  # raw value -> validated (ValueError / TypeError)
    parse: Callable[[str], object] = str  # command-line text -> raw value (argparse's type=)
    text: Callable[[Any], str] = str  # validated value -> text that parse + check read back
    name: str | None = None  # the raw / CLI name, when it is not the field's (e.g. "accum")
    metavar: str | None = None
    option: bool = True  # False: not a `--name` option (fixed, or the command's positional)
    worker: bool = True  # False: the launcher supplies it (world_size is torchrun's nproc)
    many: bool = False  # a tuple travelling to the worker as one `--name=item` per item


def param(default: object, help: str, check: Callable[[object, str], object], **spec: Any) -> Any:
    """A declared field: its default, help text, validation and how it travels as text."""
    return field(default=default, metadata={SPEC: Spec(help, check, **spec)})


def _plain_default(value: object) -> object:
    return None if value is MISSING else value


class Declared:
    """The behaviour every experiment's `Params` dataclass shares (see the module doc)."""

    @classmethod
    def declared(cls) -> Iterator[tuple[str, str, Spec, object]]:
        """(field name, raw name, spec, default) of every declared field, in order."""
        for f in fields(cls):  # type: ignore[arg-type]  # a subclass is the dataclass
            spec = f.metadata.get(SPEC)
            if spec is not None:
                yield f.name, spec.name or f.name, spec, _plain_default(f.default)

    @classmethod
    def relate(cls, values: dict[str, object]) -> dict[str, object]:
        """Checks across fields, and derived fields: an experiment overrides this."""
        return values

    @classmethod
    def checked(cls: type[T], **raw: object) -> T:
        """Validated parameters from raw values (defaults for those not given)."""
        known = {name for _, name, _, _ in cls.declared()}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise TypeError(f"unexpected parameter {unknown[0]!r}: one of {', '.join(known)}")
        values = {
            attr: spec.check(raw.get(name, default), name)
            for attr, name, spec, default in cls.declared()
        }
        return cls(**cls.relate(values))

    @classmethod
    def add_options(cls, parser: argparse.ArgumentParser) -> None:
        """One `--name` option per declared CLI parameter, help showing its default."""
        for _, name, spec, default in cls.declared():
            if spec.option:
                shown = "" if default is None else f" (default {spec.text(default)})"
                parser.add_argument(
                    "--" + name.replace("_", "-"),
                    dest=name,
                    type=spec.parse,
                    default=None,
                    metavar=spec.metavar,
                    help=spec.help + shown,
                )

    @classmethod
    def from_options(cls: type[T], args: argparse.Namespace, **fixed: object) -> T:
        """Checked parameters from parsed options (those not given keep their defaults)."""
        raw = {
            name: getattr(args, name)
            for _, name, spec, _ in cls.declared()
            if spec.option and getattr(args, name, None) is not None
        }
        return cls.checked(**raw, **fixed)

    def worker_args(self) -> list[str]:
        """The worker's command line: `--name=text` for every parameter a rank reads that is
        not at its default (the rank fills those in as `checked` does)."""
        args = []
        for attr, name, spec, default in self.declared():
            value, flag = getattr(self, attr), "--" + name.replace("_", "-")
            if not spec.worker or value is None or value == default:
                continue
            items = value if spec.many else (value,)
            args += [f"{flag}={spec.text(item)}" for item in items]
        return args

    @classmethod
    def from_worker_args(
        cls: type[T], argv: Sequence[str] | None, **fixed: object
    ) -> tuple[T, str]:
        """(checked parameters, the output folder) from a rank's command line; `fixed`: what
        the rank knows otherwise (its world size), checked too."""
        parser = argparse.ArgumentParser(prog=cls.__module__.rsplit(".", 1)[0])
        parser.add_argument("--out-dir", required=True)
        for _, name, spec, _ in cls.declared():
            if spec.worker:
                action = "append" if spec.many else "store"
                flag = "--" + name.replace("_", "-")
                parser.add_argument(flag, dest=name, type=spec.parse, action=action)
        args = parser.parse_args(argv)
        raw = {
            name: getattr(args, name)
            for _, name, spec, _ in cls.declared()
            if spec.worker and getattr(args, name) is not None
        }
        return cls.checked(**raw, **fixed), args.out_dir


def joined(separator: str) -> Callable[[Any], str]:
    def text(values: Sequence[object]) -> str:
        return separator.join(map(str, values))

    return text
