"""Each experiment parameter declared once: a field of the experiment's frozen `Params`.

    @dataclass(frozen=True)
    class Params(Declared):
        tau: float = param(1.0, "temperature tau > 0", v.positive, parse=float)
        '''The softmax temperature every similarity is divided by: smaller is sharper.'''
        order: str = param("ascending", "the bucket order", choices=("ascending", "descending"))
        '''How the buckets are walked (a choice: `--help` lists its values).'''

The string under a field is its documentation (as torchtitan documents its config fields):
`--help` prints it after the one-line help, and a test holds that every parameter has one.

From those fields come, with nothing typed twice:
    Params.checked(**raw)          validation (ValueError / TypeError naming the value), the
                                   one entry for pages, notebooks, the CLI and the ranks
    Params.add_options(parser)     the CLI's options (`pclab run <name> --help`), read back
    Params.from_options(args)      with the same checks
    params.worker_args()           the worker's command line: the same flags, so a hand-typed
    Params.from_worker_args(argv)  `torchrun -m pclab.experiments.<name> --out-dir D ...` works
    params_record(params)          the cache key, and the report's and the run record's
                                   "parameters" (experiments.base: every rank sends them)
    Params.docs()                  each field's documentation, for `--help`

A field without `param(...)` is derived (a file's digest): `Params.relate` fills it.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields
from functools import partial
from typing import Any, TypeVar

from pclab.core import validation as v

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
    choices: tuple[str, ...] = ()  # a choice's values (`--help` lists them)


def param(
    default: object,
    help: str,
    check: Callable[[object, str], object] | None = None,
    *,
    choices: tuple[str, ...] = (),
    **spec: Any,
) -> Any:
    """A declared field: its default, help text, validation and how it travels as text.

    `choices`: the values of a choice parameter; without a `check`, one of them is the check
    (ValueError naming the value and the allowed ones), and `--help` lists them."""
    if check is None:
        if not choices:
            raise TypeError(f"param({default!r}, {help!r}) needs a check or choices")
        check = partial(_one_of, allowed=tuple(choices))
    if choices and spec.get("metavar") is None:
        spec["metavar"] = "{" + ",".join(choices) + "}"
    return field(
        default=default, metadata={SPEC: Spec(help, check, choices=tuple(choices), **spec)}
    )


def _one_of(value: object, field: str, allowed: tuple[str, ...]) -> str:
    return v.choice(value, field, allowed)


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
    def docs(cls) -> dict[str, str]:
        """Field name -> the string literal right under its declaration (its documentation),
        read from the class's source with `ast`, as torchtitan's config fields are."""
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):  # no source (a class made at run time): no docs
            return {}
        body = ast.parse(source).body[0]
        docs: dict[str, str] = {}
        if not isinstance(body, ast.ClassDef):
            return docs
        for node, after in zip(body.body, body.body[1:]):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                if isinstance(after.value.value, str):
                    docs[node.target.id] = " ".join(after.value.value.split())
        return docs

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
        """One `--name` option per declared CLI parameter: its help, a choice's values, its
        default, then its documentation (`docs`)."""
        docs = cls.docs()
        for attr, name, spec, default in cls.declared():
            if spec.option:
                shown = f"; one of {', '.join(spec.choices)}" if spec.choices else ""
                shown += "" if default is None else f" (default {spec.text(default)})"
                shown += f". {docs[attr]}" if attr in docs else ""
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
