"""What a sweep runs: the launch command, its configurations, their order, and the TOML plan file.

The launch command is a template: ``{port}`` becomes a free port specload picks for each attempt and
``{args}`` the configuration's arguments; nothing else in it is touched (a server's JSON argument,
``--speculative-config '{"method": "eagle3"}'``, keeps its braces). Configurations come from
``--config NAME='ARGS'`` (in order) and ``--grid 'KEY=V1,V2' ...`` (every combination, each KEY a
flag ``--KEY V``). The first is the baseline unless ``--baseline NAME``. Repeats run interleaved,
A B B A A B ..., so that drift over the hours meets every configuration alike.

A plan file (``specload sweep PLAN.toml``) says the same as the command line: its ``[configs]``
table (NAME = "ARGS", in order) or ``[[config]]`` entries (name, args), its ``[grid]`` table (KEY =
[values]), and every other key an option of the command by its flag's name (``max-tokens = 128``,
``concurrency = [1, 4, 16]``, ``ignore-eos = true``), at the top or in a ``[run]`` table. It becomes
the command line's words, before those given after it, which therefore win.
"""

from __future__ import annotations

import itertools
import shlex
import socket
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PORT, ARGS = "{port}", "{args}"
DEFAULT_URL = "http://127.0.0.1:{port}"


class PlanError(ValueError):
    """A sweep that cannot be run as given; one line for the user."""


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    args: str  # shell words put where {args} is


@dataclass(frozen=True, slots=True)
class Slot:
    """One run of the plan: a configuration's repeat, at its place in the order."""

    index: int  # position in the order
    config: int  # index into the plan's configurations
    repeat: int  # 0-based


@dataclass(frozen=True)
class SweepPlan:
    launch: str
    configs: tuple[Config, ...]
    baseline: str
    repeats: int = 1
    retries: int = 1
    url: str = DEFAULT_URL  # the server's URL; {port} in it is the attempt's port

    def __post_init__(self) -> None:
        if not self.configs:
            raise PlanError("no configurations: give --config NAME='ARGS' (and more), --grid, or a plan file")
        names = [c.name for c in self.configs]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise PlanError(f"two configurations are called {dup!r}")
        if self.baseline not in names:
            raise PlanError(f"--baseline {self.baseline!r} is none of the configurations ({', '.join(names)})")
        if ARGS not in self.launch:
            raise PlanError("the --launch command needs {args} where each configuration's arguments go")
        if PORT in self.url and PORT not in self.launch:
            raise PlanError("the --launch command has no {port}: put {port} where the server's port goes, or give "
                            "the fixed URL it serves with --url http://HOST:PORT")
        if self.repeats < 1 or self.retries < 0:
            raise PlanError("--repeats must be at least 1 and --retries at least 0")

    @property
    def fixed_port(self) -> bool:
        return PORT not in self.url

    def config(self, name: str) -> Config:
        return next(c for c in self.configs if c.name == name)

    def schedule(self) -> list[Slot]:
        """Every run in order: the configurations forward, then backward, and so on (A B B A ...)."""
        out: list[Slot] = []
        n = len(self.configs)
        for r in range(self.repeats):
            for i in (range(n) if r % 2 == 0 else reversed(range(n))):
                out.append(Slot(len(out), i, r))
        return out

    def command(self, config: Config, port: int | None) -> str:
        return self.launch.replace(PORT, str(port) if port is not None else PORT).replace(ARGS, config.args)

    def server_url(self, port: int | None) -> str:
        return self.url.replace(PORT, str(port)) if port is not None else self.url

    def as_record(self) -> dict[str, Any]:
        return {"launch": self.launch, "configs": [{"name": c.name, "args": c.args} for c in self.configs],
                "baseline": self.baseline, "repeats": self.repeats, "retries": self.retries, "url": self.url}


def parse_config(text: str) -> Config:
    name, sep, args = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise PlanError(f"--config {text!r}: expected NAME='ARGS' (the arguments may be empty: NAME=)")
    return Config(name, args.strip())


def _flag(key: str) -> str:
    return key if key.startswith("-") else f"--{key}"


def grid_configs(specs: Iterable[str]) -> list[Config]:
    """``KEY=V1,V2`` axes -> one configuration per combination, in order (the last axis fastest), named
    ``KEY=V KEY2=V2`` and with the arguments ``--KEY V --KEY2 V2``."""
    axes: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        vals = [v.strip() for v in values.split(",")]
        if not sep or not key or not all(vals):
            raise PlanError(f"--grid {spec!r}: expected KEY=V1,V2,...")
        axes.append((key, vals))
    out: list[Config] = []
    if not axes:
        return out
    for combo in itertools.product(*(vals for _, vals in axes)):
        pairs = list(zip((k for k, _ in axes), combo, strict=True))
        name = " ".join(f"{k.lstrip('-')}={v}" for k, v in pairs)
        out.append(Config(name, " ".join(f"{_flag(k)} {shlex.quote(v)}" for k, v in pairs)))
    return out


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's pick); the server is started on it at once."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether something still holds ``host:port``: bound as a server would bind it (SO_REUSEADDR, so the
    TIME_WAIT of closed connections does not count), it fails while a listener is there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


# ------------------------------------------------------------------------------------------ plan file


def plan_words(path: str, *, flags: dict[str, str]) -> list[str]:
    """A TOML plan as the command line's words. ``flags``: each option's long flag -> its kind
    ("flag", "multiple" or "value"), and "--no-X" -> "negative" where the option has one."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise PlanError(f"cannot read the plan {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise PlanError(f"{path} is not a TOML plan: {e}") from None
    words: list[str] = []
    run = doc.pop("run", {})
    if not isinstance(run, dict):
        raise PlanError(f"{path}: [run] must be a table of options")
    for key, value in [*doc.items(), *run.items()]:
        if key in ("configs", "config"):
            words += [w for c in _plan_configs(path, value) for w in ("--config", f"{c.name}={c.args}")]
        elif key == "grid":
            if not isinstance(value, dict):
                raise PlanError(f"{path}: [grid] must be a table of KEY = [values]")
            for k, vals in value.items():
                vals = vals if isinstance(vals, list) else [vals]
                words += ["--grid", f"{k}=" + ",".join(_scalar(path, k, v) for v in vals)]
        else:
            words += _option_words(path, key, value, flags)
    return words


def _plan_configs(path: str, value: Any) -> list[Config]:
    if isinstance(value, dict):  # [configs] NAME = "ARGS"
        return [Config(str(k), _scalar(path, k, v)) for k, v in value.items()]
    if isinstance(value, list) and all(isinstance(c, dict) and "name" in c for c in value):  # [[config]]
        return [Config(str(c["name"]), _scalar(path, str(c["name"]), c.get("args", ""))) for c in value]
    raise PlanError(f"{path}: configurations are a [configs] table (NAME = \"ARGS\") or [[config]] entries "
                    "with name and args")


def _scalar(path: str, key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, int, float)):
        return str(v)
    raise PlanError(f"{path}: {key} = {v!r}: expected a string or a number")


def _option_words(path: str, key: str, value: Any, flags: dict[str, str]) -> list[str]:
    flag = _flag(key)
    kind = flags.get(flag)
    if kind is None:
        raise PlanError(f"{path}: {key!r} is not an option of specload sweep (see specload sweep --help)")
    if kind == "flag":
        if not isinstance(value, bool):
            raise PlanError(f"{path}: {key} takes true or false")
        negative = "--no-" + flag[2:]
        return [flag] if value else [negative] if flags.get(negative) == "negative" else []
    if kind == "multiple":
        return [w for v in (value if isinstance(value, list) else [value]) for w in (flag, _scalar(path, key, v))]
    if isinstance(value, list):
        return [flag, ",".join(_scalar(path, key, v) for v in value)]
    return [flag, _scalar(path, key, value)]

