"""Experiments stay outside the toolkit: they use docnmt's public names only, docnmt never imports
them, and no toolkit test (under tests/) imports an experiment script."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement of a Python file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level:
            out.append((node.module or "", [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def private_uses(path: Path) -> list[str]:
    """docnmt names a file imports that are private (a part starting with an underscore)."""
    bad = []
    for module, names in imports(path):
        if module.split(".")[0] != "docnmt":
            continue
        parts = module.split(".")[1:] + names
        bad += [f"{module}: {p}" for p in parts if p.startswith("_") and p != "__version__"]
    return bad


def test_experiments_use_public_names_only():
    files = sorted((ROOT / "experiments").rglob("*.py")) + sorted((ROOT / "bench").rglob("*.py"))
    assert files
    bad = {str(f.relative_to(ROOT)): private_uses(f) for f in files}
    assert not {k: v for k, v in bad.items() if v}


def test_neither_the_toolkit_nor_its_tests_import_an_experiment():
    for top in ("docnmt", "tests"):
        for f in sorted((ROOT / top).rglob("*.py")):
            found = {m.split(".")[0] for m, _ in imports(f)} & {"experiments", "bench"}
            assert not found, f"{f.relative_to(ROOT)} imports {found}"
            code = "\n".join(line for line in f.read_text(encoding="utf-8").splitlines()
                             if not line.lstrip().startswith("#"))
            strings = [n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant)
                       and isinstance(n.value, str) and not n.value.lstrip().startswith(("\"\"\"", ))]
            paths = [s for s in strings if "experiments/" in s and "\n" not in s]     # a path, not a docstring
            assert not paths, f"{f.relative_to(ROOT)} reads files under experiments/: {paths}"


def test_the_checks_see_a_violation(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from docnmt.methods.docflat import _build\nimport experiments.tier_mfr.tier_mfr_keep\n")
    assert private_uses(probe) == ["docnmt.methods.docflat: _build"]
    assert ("experiments.tier_mfr.tier_mfr_keep", []) in imports(probe)
