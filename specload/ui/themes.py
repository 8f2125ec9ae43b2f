"""Colour themes as data: TOML files turned into ``textual.theme.Theme`` objects.

Themes live outside the code so a user can add one without touching Python. Three places are read,
later ones overriding earlier ones by name: the themes shipped with specload (``specload/_themes`` in a
wheel, the repository's top-level ``themes/`` in an editable install), then the user's
``$XDG_CONFIG_HOME/specload/themes/*.toml`` (``~/.config`` when unset). A file that cannot be read or
has a bad colour is skipped and reported as a problem string, never raised: a broken theme must not
stop a load test from starting.

The app's own colours (``specload-*`` variables) have defaults here, so Textual's built-in themes,
which know nothing of them, still work from the command palette.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

DEFAULT_THEME = "specload-dark"

# Fallbacks for the app-specific variables (values, not CSS: the CSS refers to them by name only).
# They match specload-dark so a built-in Textual theme picked from the palette still reads well.
VARIABLE_DEFAULTS: dict[str, str] = {
    "specload-throughput": "#4EA8DE",
    "specload-server": "#B392F0",
    "specload-p50": "#57AB5A",
    "specload-p99": "#F4A261",
    "specload-accept": "#E9C46A",
    "specload-good": "#57AB5A",
    "specload-bad": "#E5534B",
    "specload-muted": "#7D8A99",
    "specload-flash": "#6E1F1F",
    "specload-crash-line": "#FF7B72",
}

_COLOR_FIELDS = (
    "primary", "secondary", "accent", "warning", "error", "success",
    "foreground", "background", "surface", "panel", "boost",
)


@dataclass
class ThemeSet:
    """The themes found, by name, and one line per file that could not be used."""

    themes: dict[str, Theme] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def shipped_themes_dir() -> Path | None:
    """Where the shipped theme files are: inside the package (wheel) or at the repo's top level."""
    pkg = Path(__file__).resolve().parent.parent  # .../specload
    for candidate in (pkg / "_themes", pkg.parent / "themes"):
        if candidate.is_dir():
            return candidate
    return None


def user_themes_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "specload" / "themes"


def theme_from_mapping(data: dict) -> Theme:
    """A ``Theme`` from a parsed TOML table; ``ValueError`` with a one-line reason when it is unusable."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("missing 'name'")
    if not isinstance(data.get("primary"), str):
        raise ValueError("missing 'primary' colour")
    kwargs: dict[str, object] = {}
    for key in _COLOR_FIELDS:
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"{key!r} must be a colour string")
        _check_colour(key, value)
        kwargs[key] = value
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ValueError("'dark' must be true or false")
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError("[variables] must be a table")
    clean_vars: dict[str, str] = {}
    for key, value in variables.items():
        if not isinstance(value, str):
            raise ValueError(f"variable {key!r} must be a string")
        if key.startswith("specload-"):
            # ours are all colours; Textual's own variables may be other CSS values, so pass those through
            _check_colour(key, value)
        clean_vars[key] = value
    unknown = set(data) - set(_COLOR_FIELDS) - {"name", "dark", "variables"}
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
    return Theme(name=name.strip(), dark=dark, variables=clean_vars, **kwargs)  # type: ignore[arg-type]


def _check_colour(key: str, value: str) -> None:
    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(f"{key!r}: not a colour: {value!r}") from None


def load_theme_file(path: Path) -> Theme:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"bad TOML: {e}") from None
    return theme_from_mapping(data)


def load_themes(dirs: list[Path] | None = None) -> ThemeSet:
    """Every theme in ``dirs`` (default: shipped, then user); later files override earlier names."""
    if dirs is None:
        dirs = [d for d in (shipped_themes_dir(), user_themes_dir()) if d is not None]
    found = ThemeSet()
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            try:
                theme = load_theme_file(path)
            except ValueError as e:
                found.problems.append(f"theme file {path}: {e}")
                continue
            found.themes[theme.name] = theme
    return found


def unknown_theme(name: str) -> str | None:
    """The one-line error for ``--theme NAME`` when no theme has that name (shipped, user or
    Textual's own), naming the choices and any theme file that could not be read; None when known."""
    from textual.theme import BUILTIN_THEMES

    found = load_themes()
    names = {DEFAULT_THEME} | set(found.themes) | set(BUILTIN_THEMES)
    if name in names:
        return None
    return "; ".join([f"unknown theme {name!r}: one of {', '.join(sorted(names))}", *found.problems])


# The last resort when even the shipped files are missing (a broken install): the default must exist.
FALLBACK_DARK = Theme(
    name=DEFAULT_THEME,
    dark=True,
    primary="#4EA8DE",
    secondary="#7B8CDE",
    accent="#F4A261",
    warning="#E9C46A",
    error="#E5534B",
    success="#57AB5A",
    foreground="#D6DEE8",
    background="#12161C",
    surface="#1A2029",
    panel="#222B36",
    variables=dict(VARIABLE_DEFAULTS),
)
