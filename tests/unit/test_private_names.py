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
