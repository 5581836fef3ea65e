"""The layering rules of the package: the core never imports a method module nor names a method;
only docnmt.methods (the registry) knows them."""
from __future__ import annotations

import ast
from pathlib import Path

import docnmt
from docnmt import methods

PACKAGE = Path(docnmt.__file__).parent
CORE = ["model.py", "layers.py", "positions.py", "attention.py", "attention_spec.py", "kernels.py", "decoder_state.py",
        "ops.py", "search.py", "translate.py", "scoring.py", "config.py",
        "checkpoint.py", *(f"data/{p.name}" for p in (PACKAGE / "data").glob("*.py")),
        *(f"training/{p.name}" for p in sorted((PACKAGE / "training").glob("*.py"))),
        *(f"cli/{p.name}" for p in sorted((PACKAGE / "cli").glob("*.py"))), "translate_io.py", "evaluation.py",
        *(f"serve/{p.name}" for p in sorted((PACKAGE / "serve").glob("*.py")))]


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the docnmt modules a file imports (relative imports resolved)."""
    package = ("docnmt." + ".".join(path.relative_to(PACKAGE).parts[:-1])).rstrip(".")
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_core_imports_no_method_module():
    method_modules = {f"docnmt.methods.{p.stem}" for p in (PACKAGE / "methods").glob("*.py") if p.stem != "__init__"}
    for name in CORE:
        bad = imported_modules(PACKAGE / name) & method_modules
        assert not bad, f"{name} imports {sorted(bad)}: go through the registry (docnmt.methods)"


def test_the_core_never_names_a_method():
    names = set(methods.METHODS) - {"transformer"}
    for name in CORE:
        strings = {n.value for n in ast.walk(ast.parse((PACKAGE / name).read_text()))
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not strings & names, f"{name} branches on a method name: {sorted(strings & names)}"


def extension_names(path: Path) -> set[str]:
    """The switches' names and their settings' names a file uses as a string or an attribute
    (``"sliding"``, ``search.first_pass``): a core file that does is a switch in disguise."""
    names = set(methods.EXTENSIONS) | {s.name for s in methods.settings()}
    found = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names:
            found.add(n.value)
        elif isinstance(n, ast.Attribute) and n.attr in names:
            found.add(n.attr)
    return found


def test_the_core_never_names_a_switch_or_its_settings():
    """Switches (and the methods' own decoding settings) are read only by their own modules: the
    core asks the registry's hooks instead."""
    for name in CORE:
        found = extension_names(PACKAGE / name)
        assert not found, f"{name} names switches or their settings: {sorted(found)}"


def test_the_switch_check_sees_a_violation(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(search):\n    return search.sliding or getattr(search, 'first_pass', '')\n")
    assert extension_names(probe) == {"sliding", "first_pass"}


def test_the_import_check_sees_a_violation(tmp_path):
    """The checks above can fail: a file importing a method module is caught."""
    fake = PACKAGE / "data" / "_architecture_probe.py"
    try:
        fake.write_text("from ..methods.gtransformer import GroupJoiner\nX = 'gtransformer'\n")
        assert "docnmt.methods.gtransformer" in imported_modules(fake)
    finally:
        fake.unlink()


def test_every_method_has_a_unique_name_and_options_dataclass():
    import dataclasses
    for name, method in methods.METHODS.items():
        assert method.name == name
        assert dataclasses.is_dataclass(method.options)
    assert set(methods.formats()) >= {"index", "uniform", "group", "global_index"}
