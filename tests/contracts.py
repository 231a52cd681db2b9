"""The room rules of ``contracts.toml``, checked over the source as text (nothing is imported or run).

``violations(root)`` lists every broken rule as one readable line; ``python -m tests.contracts`` prints them with the
longest import chain and the largest modules, the figures the README quotes.

What counts as an import: every ``import``/``from … import`` statement of a module, wherever it stands (a function's
lazy import is a dependency all the same), but those under ``if TYPE_CHECKING:``, which never run. ``from a.b import
c`` depends on ``a.b.c`` when that is a module, else on ``a.b``; importing a module also runs its packages'
``__init__`` files, so a non-empty one counts as a dependency of every module outside that package that imports
below it.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: dict[str, int] = field(default_factory=dict)  # module of the project → first line importing it
    externals: dict[str, int] = field(default_factory=dict)  # top-level outside package → first line
    strings: list[tuple[str, int]] = field(default_factory=list)  # string constants, docstrings aside
    test_names: list[tuple[str, int]] = field(default_factory=list)  # functions named test*


def contract(root: Path = ROOT) -> dict:
    return tomllib.loads((root / "contracts.toml").read_text())


def scan(root: Path, packages: list[str]) -> dict[str, Module]:
    """Every module of ``packages`` under ``root``, migrations aside, with what it imports."""
    paths: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    modules = {}
    for name, path in paths.items():
        text = path.read_text()
        module = Module(name, path, len(text.splitlines()))
        if text not in _STATED:
            _STATED[text] = _stated(ast.parse(text, str(path)))
        _read(module, _STATED[text], paths, package=path.name == "__init__.py")
        modules[name] = module
    return modules


@dataclass(frozen=True)
class Stated:
    """What a module's text says, wherever it stands: its imports (``from`` base or ``None`` for ``import``, relative
    level, name, line) but those under ``if TYPE_CHECKING:``, its functions named test*, its strings but docstrings."""

    imports: tuple[tuple[str | None, int, str, int], ...]
    test_names: tuple[tuple[str, int], ...]
    strings: tuple[tuple[str, int], ...]


# Module text → what it says: the contract tests scan a dozen copies of the tree, each with one file changed.
_STATED: dict[str, Stated] = {}


def _stated(tree: ast.Module) -> Stated:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    typing_only = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for child in ast.walk(node)
    }
    imports, test_names, strings = [], [], []
    for node in ast.walk(tree):
        if id(node) in typing_only and isinstance(node, ast.Import | ast.ImportFrom):
            continue  # annotations only: no dependency when the program runs
        if isinstance(node, ast.Import):
            imports += [(None, 0, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imports += [(node.module or "", node.level, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            test_names.append((node.name, node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            strings.append((node.value, node.lineno))
    return Stated(tuple(imports), tuple(test_names), tuple(strings))


def _read(module: Module, stated: Stated, known: dict[str, Path], *, package: bool) -> None:
    own_package = module.name if package else module.name.rpartition(".")[0]
    for base, level, name, line in stated.imports:
        if base is None:
            _depend(module, name, line, known)
            continue
        if level:
            anchor = own_package.split(".")[: len(own_package.split(".")) - level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        target = f"{base}.{name}"
        _depend(module, target if target in known else base, line, known)
    module.test_names += stated.test_names
    module.strings += stated.strings


def _depend(module: Module, target: str, line: int, known: dict[str, Path]) -> None:
    if target.split(".")[0] not in {name.split(".")[0] for name in known}:
        module.externals.setdefault(target.split(".")[0], line)
        return
    parts = target.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        inside = module.name == package or module.name.startswith(package + ".")
        if package in known and not inside and known[package].stat().st_size and package != module.name:
            module.imports.setdefault(package, line)
    if target in known and target != module.name:
        module.imports.setdefault(target, line)


def under(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def where(m: Module, line: int, root: Path) -> str:
    return f"{m.path.relative_to(root)}:{line}"


def violations(root: Path = ROOT) -> list[str]:
    """Every broken rule, one line each: where, what, and the rule."""
    rules = contract(root)
    rooms = scan(root, rules["rooms"])
    found = []
    for m in rooms.values():
        at = where(m, 1, root)
        for target, line in m.imports.items():
            at = where(m, line, root)
            for rule in rules.get("forbidden", []):
                if under(m.name, rule["importers"]) and under(target, rule["imported"]):
                    found.append(f"{at}: {m.name} imports {target} ({rule['importers']} import no {rule['imported']})")
            for rule in rules.get("layers", []):
                mine, theirs = _layer(m.name, rule["layers"]), _layer(target, rule["layers"])
                if mine is not None and theirs is not None and theirs < mine:
                    order = " > ".join("/".join(layer) for layer in rule["layers"])
                    found.append(f"{at}: {m.name} imports {target}, a layer above it ({order})")
        for package, line in m.externals.items():
            for rule in rules.get("only", []):
                if package == rule["package"] and not under(m.name, rule["modules"]):
                    only = ", ".join(rule["modules"])
                    found.append(f"{where(m, line, root)}: {m.name} imports {package}, which only {only} may import")
        for value, line in m.strings:
            for rule in rules.get("strings", []):
                if under(m.name, rule["in"]) and re.fullmatch(r"\w+(\.\w+)+", value) and under(value, rule["naming"]):
                    found.append(f"{where(m, line, root)}: {m.name} names {value!r} by string, a dependency on it")
        for name, line in m.test_names:
            found.append(f"{where(m, line, root)}: function {name} starts with test (pytest would collect it)")
        if m.path.name.startswith("test"):
            found.append(f"{where(m, 1, root)}: product module named like a test")
        limit = rules.get("exceptions", {}).get("module_lines", {}).get(str(m.path.relative_to(root)))
        if m.lines > (limit := limit or rules["limits"]["module_lines"]):
            found.append(f"{where(m, 1, root)}: {m.lines} lines (limit {limit}: make it two modules)")
    if config := rules.get("config"):
        for m in rooms.values():
            if config in m.imports:
                found.append(f"{where(m, m.imports[config], root)}: {m.name} imports {config}, which nothing imports")
    for cycle in cycles(rooms):
        found.append(f"import cycle: {' -> '.join(cycle)} -> {cycle[0]}")
    for room in rules["rooms"]:
        chain = longest_chain(rooms, starting=room)
        limit = rules.get("exceptions", {}).get("import_chain", {}).get(room) or rules["limits"]["import_chain"]
        if len(chain) > limit:
            found.append(f"import chain of {len(chain)} modules (limit {limit}): {' -> '.join(chain)}")
    return found


def _layer(name: str, layers: list[list[str]]) -> int | None:
    for i, layer in enumerate(layers):
        if under(name, layer):
            return i
    return None


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in modules[v].imports:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(modules)))
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return found


def longest_chain(modules: dict[str, Module], *, starting: str = "") -> list[str]:
    """The longest chain of imports (as modules, the importer first) from a module of package ``starting`` (any
    module by default); an edge closing a cycle is not followed."""
    best: dict[str, list[str]] = {}
    visiting: set[str] = set()

    def chain(v: str) -> list[str]:
        if v in best:
            return best[v]
        visiting.add(v)
        longest: list[str] = []
        for w in sorted(modules[v].imports):
            if w not in visiting:
                candidate = chain(w)
                if len(candidate) > len(longest):
                    longest = candidate
        visiting.discard(v)
        best[v] = [v, *longest]
        return best[v]

    starts = [v for v in sorted(modules) if not starting or under(v, [starting])]
    return max((chain(v) for v in starts), key=len, default=[])


def report(root: Path = ROOT) -> str:
    rules = contract(root)
    rooms = scan(root, rules["rooms"])
    chains = [
        f"longest import chain from {room}: {len(c)} modules: {' -> '.join(c)}"
        for room in rules["rooms"]
        for c in [longest_chain(rooms, starting=room)]
    ]
    biggest = sorted(rooms.values(), key=lambda m: -m.lines)[:5]
    lines = [
        f"{len(rooms)} modules in {', '.join(rules['rooms'])}",
        *chains,
        "largest modules: " + ", ".join(f"{m.path.relative_to(root)} {m.lines}" for m in biggest),
    ]
    broken = violations(root)
    lines += [f"{len(broken)} broken rules", *broken]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
