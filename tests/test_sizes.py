"""The size rule of the package (issue 62, docs/testing.md#the-size-rule): every module under
``docnmt/`` at most 400 lines, every function or method at most 60, every class (``Trainer``
included) at most 300, unless the module's docstring names the exception and its reason on a line
of its own::

    Size exception: <name> — <reason>

``<name>`` is ``module`` (the module's own length), a function, ``Class.method`` or a class;
``<reason>`` must be given (the dash may be written ``—`` or ``--``). A ``Size exception:`` line in
another shape, or one naming nothing in the module, is an offence too. The test lists every
offender at once, each with its size.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import docnmt

MODULE_LINES, FUNCTION_LINES, CLASS_LINES = 400, 60, 300
EXCEPTION = re.compile(r"^\s*Size exception:\s*(?P<name>[A-Za-z_][\w.]*)\s+(?:—|--)\s+(?P<reason>\S.*)$")


def exceptions(tree: ast.Module, where: str) -> tuple[dict[str, str], list[str]]:
    """The exceptions a module's docstring names ({name: reason}), and its malformed exception lines."""
    named, bad = {}, []
    for line in (ast.get_docstring(tree) or "").splitlines():
        if "size exception" not in line.lower():
            continue
        if m := EXCEPTION.match(line):
            named[m["name"]] = m["reason"]
        else:
            bad.append(f"{where}: malformed exception line {line.strip()!r} "
                       "(write 'Size exception: <name> — <reason>')")
    return named, bad


def definitions(node: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function and class, nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from definitions(child, f"{name}.")
        else:
            yield from definitions(child, prefix)


def offenders(source: str, where: str) -> list[str]:
    """Every breach of the size rule in one module's ``source``, with its size."""
    tree = ast.parse(source)
    allowed, out = exceptions(tree, where)
    found = {"module"}
    lines = len(source.splitlines())
    if lines > MODULE_LINES and "module" not in allowed:
        out.append(f"{where}: module {lines} lines (limit {MODULE_LINES})")
    for name, node in definitions(tree):
        found |= {name, node.name}
        size = node.end_lineno - node.lineno + 1
        kind, limit = ("class", CLASS_LINES) if isinstance(node, ast.ClassDef) else ("function", FUNCTION_LINES)
        if size > limit and name not in allowed and node.name not in allowed:
            out.append(f"{where}: {kind} {name} {size} lines (limit {limit})")
    out += [f"{where}: exception names {name!r}, which the module does not define" for name in allowed
            if name not in found]
    return out


def test_every_module_and_function_keeps_to_its_size():
    root = Path(docnmt.__file__).resolve().parent
    found = []
    for path in sorted(root.rglob("*.py")):
        found += offenders(path.read_text(encoding="utf-8"), str(path.relative_to(root.parent)))
    assert not found, f"{len(found)} breaches of the size rule:\n" + "\n".join(found)


def planted(docstring: str = "", body_lines: int = 59, methods: int = 0, filler: int = 0) -> str:
    """A module: ``docstring``, a function of ``body_lines + 1`` lines, a class ``Big`` of
    ``methods`` three-line methods, and ``filler`` lines of assignments."""
    out = [f'"""{docstring}"""'] if docstring else []
    out += ["def long(x):"] + ["    x += 1"] * (body_lines - 1) + ["    return x", "", ""]
    if methods:
        out += ["class Big:"] + [line for k in range(methods) for line in
                                 (f"    def m{k}(self):", f"        return {k}", "")]
    out += [f"v{k} = {k}" for k in range(filler)]
    return "\n".join(out) + "\n"


def test_the_scanner_reports_each_breach_with_its_size():
    assert offenders(planted(), "ok.py") == []                      # a function of exactly 60 lines
    found = offenders(planted(body_lines=60, methods=101, filler=40), "big.py")
    assert found == ["big.py: module 407 lines (limit 400)", "big.py: function long 61 lines (limit 60)",
                     "big.py: class Big 303 lines (limit 300)"]


def test_named_exceptions_lift_the_limits_and_malformed_ones_are_reported():
    doc = ("Big module.\n\nSize exception: module — the table of every kernel\n"
           "Size exception: long -- one formula read top to bottom\nSize exception: Big — one protocol\n")
    assert offenders(planted(doc, body_lines=60, methods=101, filler=40), "big.py") == []
    doc = "Size exception: Big.m0 — short anyway\nSize exception: long\nSize exception: gone — removed since\n"
    found = offenders(planted(doc, body_lines=60, methods=1), "m.py")
    assert found == ["m.py: malformed exception line 'Size exception: long' "
                     "(write 'Size exception: <name> — <reason>')",
                     "m.py: function long 61 lines (limit 60)",
                     "m.py: exception names 'gone', which the module does not define"]
