"""Click options generated from the config dataclasses' fields (``options.py`` declares them).

One click parameter per option field, named after the field, so ``ctx.params`` is exactly what
``options.build`` reads. A value the user did not give arrives as None (or ``()`` for repeatable
options): that is how ``build`` tells "not given" (take the field's default, or its TUI default)
from "given". The default shown in ``--help`` is the field's own. ``--help`` lists the options in
groups (``GROUPS``, click's own sections: no extra library for a table of titles) and ends with
examples.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

import click

from specload.options import Opt, option_fields, sections

# --help's groups, in order: a section of the config is one group (its name -> title); the fields
# named in SPLIT go to another (a request's body is not its prompt; the run-wide fields each have one)
GROUPS = {
    "target": "Target", "load": "Load shape", "request": "Prompts and workload", "body": "Request body",
    "record": "Outputs", "compare": "Comparison", "capacity": "Capacity search", "watch": "Server watch",
    "workers": "Workers", "TuiOptions": "Dashboard",
}
SPLIT = {
    **dict.fromkeys(("output_len", "max_tokens", "ignore_eos", "continuous_usage", "temperature", "extra_body"),
                    "body"),
    "sim_args": "target", "seed": "load", "label": "record", "as_json": "record", "no_record": "record",
    "workers": "workers", "on_worker_death": "workers", "ray": "workers",
}


class GroupedCommand(click.Command):
    """A command whose ``--help`` lists its options under the titles of ``GROUPS`` (the options'
    ``group``), then any others, then its epilog (the examples) as written."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[str, str]]] = {}
        for p in self.get_params(ctx):
            rec = p.get_help_record(ctx) if isinstance(p, click.Option) else None  # [URL]: in the usage line
            if rec is not None:
                rows.setdefault(GROUPS.get(getattr(p, "group", ""), "Other options"), []).append(rec)
        for title in (*GROUPS.values(), "Other options"):
            if title in rows:
                with formatter.section(title):
                    formatter.write_dl(rows[title])

    def __init__(self, *args: Any, examples: tuple[tuple[str, str], ...] = (), **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.examples = examples  # (what it does, the command line)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.examples:
            with formatter.section("Examples"):
                for what, line in self.examples:
                    formatter.write_text(what)
                    formatter.write(f"{' ' * (formatter.current_indent + 2)}{line}\n")
        super().format_epilog(ctx, formatter)


class _Option(click.Option):
    """A click option whose default stays None (so "not given" is visible to ``build``) while
    ``--help`` shows the field's default as click would: ``[default: 256]``; ``group``: its title in
    ``--help`` (a key of ``GROUPS``)."""

    def __init__(self, *args: Any, shown_default: str | None = None, group: str = "", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.shown_default = shown_default
        self.group = group

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


def click_param(name: str, opt: Opt, hint: Any, default: Any, group: str = "") -> Callable:
    """The click argument or option for one field; ``group``: its group in ``--help``."""
    if opt.argument:
        return click.argument(name, required=False)
    base = _base(hint)
    kw: dict[str, Any] = {"help": opt.help, "default": None, "cls": _Option, "group": group}
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
    return click.option(*opt.flags, name, shown_default=shown, **kw)


def click_options(*classes: type) -> Callable[[Callable], Callable]:
    """A decorator adding the options of these dataclasses (and their sections) to a click command,
    in declaration order."""
    params = []
    seen: set[str] = set()
    for cls in classes:
        section = {f.name: name for name, sub in sections(cls).items() for f, _, _ in option_fields(sub)}
        for f, opt, hint in option_fields(cls):
            # one namespace: ctx.params is keyed by field name
            assert f.name not in seen, f"two options are called {f.name!r}"
            seen.add(f.name)
            group = SPLIT.get(f.name) or section.get(f.name) or cls.__name__
            params.append(click_param(f.name, opt, hint, f.default, group))

    def decorate(fn: Callable) -> Callable:
        for p in reversed(params):
            fn = p(fn)
        return fn

    return decorate
