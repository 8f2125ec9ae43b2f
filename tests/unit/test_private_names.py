"""No module imports another module's private name (``from specload.headless import _install_loop``
tied the dashboard to the printer's insides): a name two modules share is public, or it moves."""

from __future__ import annotations

import re
from pathlib import Path

import specload

ROOT = Path(specload.__file__).parent
# every ``from X import ...`` statement, top-level or inside a function, parenthesised or not (read
# as text: parsing every module would cost seconds of the unit tier)
FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_imports_a_private_name_of_another() -> None:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for m in FROM_IMPORT.finditer(path.read_text(encoding="utf-8")):
            base, names = m.group(1), re.sub(r"#[^\n]*", "", m.group(2))
            if base.startswith("."):
                dots = len(base) - len(base.lstrip("."))
                up = package.split(".")[: len(package.split(".")) - dots + 1]
                base = ".".join([*up, base[dots:]] if base[dots:] else up)
            for item in names.strip("() \n").split(","):
                imported = item.split()[0] if item.split() else ""  # "x as _y" imports x
                private = imported.startswith("_") and not imported.startswith("__")
                if private and base.startswith("specload") and f"{base}.{imported}" not in modules:
                    found.append(f"{name} imports {imported} from {base}")
    assert not found, found


# a module bound to a name: ``import specload.x.y as z``, ``import specload.x.y`` (bound as the dotted
# path) or ``from specload.x import y`` where y is a module
IMPORT_AS = re.compile(r"^[ \t]*import[ \t]+(specload[\w.]*)(?:[ \t]+as[ \t]+(\w+))?[ \t]*$", re.M)


def test_no_module_reaches_a_private_name_through_another_module() -> None:
    # ``from specload import headless`` then ``headless._install_loop()`` ties the modules as the
    # import of the name does
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    found = []
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        bound = {m.group(2) or m.group(1): m.group(1) for m in IMPORT_AS.finditer(text)}
        for m in FROM_IMPORT.finditer(text):
            base = m.group(1)
            for item in re.sub(r"#[^\n]*", "", m.group(2)).strip("() \n").split(","):
                words = item.split()
                if words and f"{base}.{words[0]}" in modules:
                    bound[words[-1]] = f"{base}.{words[0]}"
        for alias, module in bound.items():
            if module == name:
                continue
            for hit in re.finditer(rf"(?<![\w.]){re.escape(alias)}\.(_[A-Za-z]\w*)", text):
                if not hit.group(1).startswith("__"):
                    found.append(f"{name} reaches {module}.{hit.group(1)}")
    assert not found, found
