"""Click options generated from the config dataclasses' fields (``options.py`` declares them).

One click parameter per option field, named after the field, so ``ctx.params`` is exactly what
``options.build`` reads. A value the user did not give arrives as None (or ``()`` for repeatable
options): that is how ``build`` tells "not given" (take the field's default, or its TUI default)
from "given". The default shown in ``--help`` is the field's own.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

import click

from specload.options import Opt, option_fields


class _Option(click.Option):
    """A click option whose default stays None (so "not given" is visible to ``build``) while
    ``--help`` shows the field's default as click would: ``[default: 256]``."""

    def __init__(self, *args: Any, shown_default: str | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.shown_default = shown_default

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if self.shown_default is not None:
            extra["default"] = self.shown_default
        return extra


def _base(hint: Any) -> Any:
    """``float | None`` -> float; other annotations as they are."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return hint


def _shown(default: Any) -> str | None:
    if default is None or isinstance(default, bool) or default == ():
        return None
    if isinstance(default, tuple):
        return ",".join(str(x) for x in default)
    return str(default)


def click_param(name: str, opt: Opt, hint: Any, default: Any) -> Callable:
    """The click argument or option for one field."""
    if opt.argument:
        return click.argument(name, required=False)
    base = _base(hint)
    kw: dict[str, Any] = {"help": opt.help, "default": None}
    if base is bool and opt.parse is None:
        if any("/" in f for f in opt.flags):
            return click.option(*opt.flags, name, **kw)
        # a single flag turns the field away from its default: --ignore-eos, --no-health
        return click.option(*opt.flags, name, is_flag=True, flag_value=not default, **kw)
    if opt.multiple:
        kw["multiple"] = True
        kw["default"] = ()
    if opt.choices is not None:
        kw["type"] = click.Choice(list(opt.choices))
    elif opt.path:
        kw["type"] = click.Path(dir_okay=False)
    elif opt.parse is None and base in (int, float):
        kw["type"] = base
    if opt.metavar:
        kw["metavar"] = opt.metavar
    shown = opt.show_default if opt.show_default is not None else _shown(default)
    return click.option(*opt.flags, name, cls=_Option, shown_default=shown, **kw)


def click_options(*classes: type) -> Callable[[Callable], Callable]:
    """A decorator adding the options of these dataclasses (and their sections) to a click command,
    in declaration order."""
    params = []
    seen: set[str] = set()
    for cls in classes:
        for f, opt, hint in option_fields(cls):
            # one namespace: ctx.params is keyed by field name
            assert f.name not in seen, f"two options are called {f.name!r}"
            seen.add(f.name)
            params.append(click_param(f.name, opt, hint, f.default))

    def decorate(fn: Callable) -> Callable:
        for p in reversed(params):
            fn = p(fn)
        return fn

    return decorate
