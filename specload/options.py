"""Options declared once: a dataclass field carries its flag, help, default, TUI default and check.

Every command-line option of ``specload run``/``tui`` is a field of one of the config dataclasses
(``config.py``), declared with ``option()``::

    max_tokens: int = option(256, "--max-tokens", help="max_tokens of each request.", check=at_least(1))

From that one declaration the CLI generates its click option (``cli_options.click_options``);
``build()`` turns the command line's values into the dataclasses (``tui_default`` when the dashboard
runs); ``check_fields()``, called from each dataclass's ``__post_init__``, runs the checks, so a config
built in code is checked as one from the command line, with the same one-line ``ConfigError``; and
``describe()`` writes every field into the record's header, secrets masked. Cross-field rules live
in the owning dataclass's ``__post_init__``. Nothing here imports click.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

UNSET: Any = object()  # "no TUI default": the field's default serves both front ends


class ConfigError(ValueError):
    """A bad option value; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Opt:
    """What the command line needs to know about a field."""

    flags: tuple[str, ...]  # ("--concurrency", "-c"); empty with argument=True
    help: str = ""
    # the default in the dashboard (specload tui), or a function of the values given on the command
    # line returning it (the TUI's 20 s levels apply only when no request count was given)
    tui_default: Any = UNSET
    # command-line text -> the field's value (each item's, for multiple options); may raise ConfigError
    parse: Callable[[Any], Any] | None = None
    # the field's value -> why it is wrong ("must be at least 1") or None; also runs for configs built in code
    check: Callable[[Any], str | None] | None = None
    choices: tuple[str, ...] | None = None
    multiple: bool = False  # repeatable (--header A --header B); the field is a tuple
    argument: bool = False  # positional (the URL)
    path: bool = False  # a file name: the CLI checks it is not a directory
    show_default: str | None = None  # what --help shows as the default, when the value itself does not read well
    metavar: str | None = None
    # the largest magnitude a number option (or each number of a tuple) may take; every number option
    # is also checked to be finite and, when not 0, no smaller than TINY (see number_problem)
    most: float = 1e9

    @property
    def name(self) -> str:
        """The flag a person types, for messages."""
        return self.flags[0] if self.flags else "URL"


def option(default: Any, *flags: str, help: str = "", **kw: Any) -> Any:  # click's word
    """A dataclass field that is also a command-line option (see the module docstring)."""
    return dataclasses.field(default=default, metadata={"option": Opt(flags, help, **kw)})


def opt_of(f: dataclasses.Field) -> Opt | None:
    return f.metadata.get("option")


# ------------------------------------------------------------------------------------- checks


def at_least(n: float, unit: str = "") -> Callable[[Any], str | None]:
    return lambda v: None if v is None or v >= n else f"must be at least {n:g}{unit}"


def positive(v: Any) -> str | None:
    return None if v is None or v > 0 else "must be positive"


def not_negative(v: Any) -> str | None:
    return None if v is None or v >= 0 else "must not be negative"


# Every number option: finite, at most ``Opt.most`` in size, and not vanishingly small. NaN passed
# every "must be positive" check (all comparisons with NaN are false) and then blocked the event loop
# (--burstiness nan: gammavariate never returns; -d nan: the level never ends); inf and 1e-300 made
# timers and gaps overflow. One rule here, for every option, rather than a check per option.
TINY = 1e-9


def number_problem(value: Any, most: float) -> str | None:
    """Why a number option's value is unusable (None: it is fine). Tuples are checked item by item."""
    if isinstance(value, tuple):
        for v in value:
            if (problem := number_problem(v, most)) is not None:
                return problem
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value:
        return "must be a number, not NaN"
    if value in (float("inf"), float("-inf")):
        return "must be finite"
    if abs(value) > most:
        return f"must be at most {_show(most)}, not {_show(value)}"
    if value and abs(value) < TINY:
        return f"is too small ({value:g})"
    return None


def _show(v: float) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e16):
        text = f"{int(v):,}"
        return text if len(text) <= 30 else f"{v:.3g}"
    return f"{v:g}"


def check_fields(obj: object) -> None:
    """Run every option field's number rule, choices and check; ConfigError naming the flag on the
    first failure."""
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        opt = opt_of(f)
        if opt is None:
            continue
        value = getattr(obj, f.name)
        if (problem := number_problem(value, opt.most)) is not None:
            raise ConfigError(f"{opt.name} {problem}")
        if opt.choices is not None and value is not None and value not in opt.choices:
            raise ConfigError(f"{opt.name} must be one of {', '.join(opt.choices)}, not {value!r}")
        if opt.check is not None:
            problem = opt.check(value)
            if problem:
                raise ConfigError(f"{opt.name} {problem}")


def set_field(obj: object, name: str, value: Any) -> None:
    """Normalise a field of a frozen dataclass in its ``__post_init__`` (``0`` -> ``None`` and the like)."""
    object.__setattr__(obj, name, value)


# ------------------------------------------------------------------------------------- building


@functools.cache  # a class's fields do not change; get_type_hints costs half a millisecond a call
def sections(cls: type) -> Mapping[str, type]:
    """The fields of ``cls`` that are themselves option dataclasses (RunConfig.target, .load, ...)."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(cls)
        if dataclasses.is_dataclass(hints[f.name]) and any(opt_of(g) for g in dataclasses.fields(hints[f.name]))
    }


@functools.cache
def option_fields(cls: type) -> tuple[tuple[dataclasses.Field, Opt, Any], ...]:
    """Every option field of ``cls`` and its sections, in declaration order: (field, Opt, annotation)."""
    out: list[tuple[dataclasses.Field, Opt, Any]] = []
    subs = sections(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in subs:
            out += option_fields(subs[f.name])
        elif (opt := opt_of(f)) is not None:
            out.append((f, opt, hints[f.name]))
    return tuple(out)


def given(opt: Opt, value: Any) -> bool:
    """Whether the command line gave a value (the CLI passes None, or () for multiple options, when not)."""
    return value is not None and not (opt.multiple and value == ())


def build(cls: type, values: Mapping[str, Any], *, ui: bool) -> Any:
    """``cls`` (and its sections) from command-line values keyed by field name; ``ui``: the dashboard."""
    kw: dict[str, Any] = {}
    subs = sections(cls)
    for f in dataclasses.fields(cls):
        if f.name in subs:
            kw[f.name] = build(subs[f.name], values, ui=ui)
            continue
        opt = opt_of(f)
        if opt is None or f.name not in values:
            continue
        value = values[f.name]
        if not given(opt, value):
            if not (ui and opt.tui_default is not UNSET):
                continue  # the field's own default
            value = opt.tui_default(values) if callable(opt.tui_default) else opt.tui_default
        elif opt.parse is not None:
            value = tuple(opt.parse(v) for v in value) if opt.multiple else opt.parse(value)
        kw[f.name] = value
    return cls(**kw)


def assemble(cls: type, values: Mapping[str, Any]) -> Any:
    """``cls`` from field values by name, its sections filled from the same names (field names are
    unique across sections): ``assemble(RunConfig, {"url": u, "max_tokens": 20, "concurrency": (2,)})``.
    Values are taken as they are (no parsing, no TUI defaults); an unknown name is a TypeError."""
    left = dict(values)
    obj = _assemble(cls, left)
    if left:
        raise TypeError(f"{cls.__name__} has no field {sorted(left)[0]!r}")
    return obj


def _assemble(cls: type, left: dict[str, Any]) -> Any:
    subs = sections(cls)
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in left:
            kw[f.name] = left.pop(f.name)
        elif f.name in subs:
            kw[f.name] = _assemble(subs[f.name], left)
    return cls(**kw)


def to_dict(obj: object) -> dict[str, Any]:
    """A config as plain data (tuples become lists), for the record and for worker processes."""
    return _plain(dataclasses.asdict(obj))  # type: ignore[call-overload]


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def from_dict(cls: type, d: Mapping[str, Any]) -> Any:
    """The inverse of ``to_dict`` for one dataclass: lists back to tuples (nested ones too)."""
    return cls(**{k: _tuples(v) for k, v in d.items()})


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v
