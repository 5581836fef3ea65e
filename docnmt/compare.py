"""``docnmt compare``: one table of every metric of several systems on the same test data.

A system is a model directory (translated here, the translation cached under ``OUT/hyps``) or a
translation file (marker or JSONL), optionally named ``NAME=PATH``. For each: s-/d-BLEU and chrF
(cased), paired bootstrap of s- and d-BLEU against the baseline (the first system unless named),
TCP, COMET and the context usage (CXMI, model directories only) when asked, and the accuracy on
each contrastive suite (model directories only) with an exact McNemar test against the baseline
on the same examples.
Writes ``compare.md``, ``compare.csv``, ``compare.json`` and the plots ``dbleu_by_length.png`` and
``<suite>_by_<key>.png`` (accuracy per antecedent distance, pronoun, ...).
"""
from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from .errors import DocnmtError


@dataclass
class System:
    name: str
    path: Path
    hyp: list[list[str]] | None = None
    metrics: dict = field(default_factory=dict)
    suite_right: dict = field(default_factory=dict)   # suite -> strict per-example decisions
    _translator: object = field(default=None, repr=False)

    @property
    def is_model(self) -> bool:
        return (self.path / "config.yaml").exists()

    @property
    def translator(self):
        """The model, loaded once for translating, CXMI and the suites, dropped when done."""
        if self._translator is None:
            from .translate import Translator
            self._translator = Translator.load(self.path)
        return self._translator


_NAME = re.compile(r"^[\w.+-]+$")
MARKER = ".docnmt-compare"      # made in OUT before the first translation, so a stopped compare is taken up


def parse_systems(runs: list[str]) -> list[System]:
    """``PATH`` or ``NAME=PATH`` (a string that is an existing path is always a path)."""
    systems = []
    for run in runs:
        name, sep, path = run.partition("=")
        if Path(run).exists() or not sep:
            name, path = None, run
        path = Path(path)
        if not path.exists():
            raise DocnmtError(f"{path}: no such model directory or translation file")
        name = name or (path.name if path.is_dir() else path.stem)
        if not _NAME.match(name):
            raise DocnmtError(f"system name {name!r}: use letters, digits, '.', '_', '+' or '-' (NAME=PATH)")
        systems.append(System(name, path))
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise DocnmtError(f"two systems have the same name ({', '.join(names)}); name them NAME=PATH")
    return systems


def suite_names(paths: list[str]) -> dict[str, str]:
    """A unique short name per suite path (its file stem or directory name)."""
    out: dict[str, str] = {}
    for p in paths:
        base = Path(p).stem if Path(p).is_file() else Path(p).name
        name, k = base, 2
        while name in out:
            name, k = f"{base}{k}", k + 1
        out[name] = p
    return out


def compare(runs: list[str], src: str, ref: str, out: str | Path, *, baseline: str | None = None,
            fmt: str = "auto", suites: list[str] = (), suite_format: str = "auto", suite_options: dict | None = None,
            tcp_dir: str | None = None, cxmi: bool = False,
            comet_model: str | None = None, samples: int = 1000, force: bool = False,
            log: Callable[[str], None] = print, progress: bool = True) -> dict:
    """Compare the systems ``runs`` on ``src`` against ``ref`` and write the table and plots to
    ``out`` (see the module docstring); returns what ``compare.json`` holds."""
    out = Path(out)
    _check_out_dir(out, force)
    systems, src_docs, refs, base = _inputs(runs, src, ref, fmt, baseline)
    hypothesis = partial(_hypothesis, src_docs=src_docs, src=src, out=out, force=force, log=log, progress=progress)
    for sysm in systems:                                  # translation files: cheap, so checked first
        if not sysm.is_model:
            sysm.hyp = hypothesis(sysm)
            _check_documents(sysm, refs)
    (out / "hyps").mkdir(parents=True, exist_ok=True)     # only once the inputs are known to be good
    (out / MARKER).touch()
    lengths = [sum(len(s.split()) for s in d.src) for d in src_docs]
    examples = suite_names(list(suites))
    loaded_suites: dict = {}
    for sysm in systems:
        if sysm.is_model:
            sysm.hyp = hypothesis(sysm)
            _check_documents(sysm, refs)
        sysm.metrics = _metrics(sysm, src_docs, refs, lengths, tcp_dir, comet_model, cxmi, progress, log)
        if examples and sysm.is_model:
            sysm.metrics["suites"] = _suites(sysm, examples, loaded_suites, suite_format, suite_options or {},
                                             out, progress, log)
        sysm._translator = None                    # one model in memory at a time
    _paired_tests(systems, base, refs, samples)
    result = {"src": str(src), "ref": str(ref), "baseline": base.name,
              "systems": {s.name: {"path": str(s.path), **s.metrics} for s in systems}}
    _write_outputs(result, systems, examples, out)
    return result


def _check_out_dir(out: Path, force: bool) -> None:
    """An error for an ``--out`` that is a file, or a non-empty directory that is not a compare
    directory (one holding compare.json, or the marker of a compare that stopped early) without force."""
    if out.exists() and not out.is_dir():
        raise DocnmtError(f"--out {out} is a file, not a directory")
    if not out.exists() or not any(out.iterdir()) or (out / "compare.json").exists() or (out / MARKER).exists():
        return
    if not force:
        raise DocnmtError(f"{out} exists and is not a compare directory; pass --force or choose another --out")
    # --force writes into the user's directory, but never over a file of theirs
    taken = [n for n in ("hyps", "compare.md", "compare.csv", "dbleu_by_length.png") if (out / n).exists()]
    if taken:
        raise DocnmtError(f"{out} is not a compare directory and already holds {', '.join(taken)}, which compare "
                          "would replace; choose another --out")


def _inputs(runs: list[str], src: str, ref: str, fmt: str, baseline: str | None) -> tuple:
    """The systems, the source documents, the references (checked to match them) and the baseline."""
    from .readers import read_documents, read_sentences
    systems = parse_systems(runs)
    src_docs = read_documents(src, fmt=fmt)
    refs = read_sentences(ref)
    if len(src_docs) != len(refs) or any(len(d.src) != len(r) for d, r in zip(src_docs, refs)):
        raise DocnmtError(f"{src} and {ref} do not have the same documents and sentences")
    base = next((s for s in systems if s.name == baseline), None) if baseline else systems[0]
    if base is None:
        raise DocnmtError(f"no system named {baseline!r} (systems: {', '.join(s.name for s in systems)})")
    return systems, src_docs, refs, base


def _metrics(sysm: System, src_docs, refs, lengths: list[int], tcp_dir: str | None, comet_model: str | None,
             cxmi: bool, progress, log) -> dict:
    """BLEU and chrF (sentence and document level), d-BLEU by document length, and TCP, COMET and
    CXMI when asked."""
    from .metrics import bleu_by_length, evaluate_documents
    m = evaluate_documents(sysm.hyp, refs, lowercase_too=False)
    metrics = {k: (v["score"] if isinstance(v, dict) else v) for k, v in m.items()
               if k.startswith(("s_", "d_")) and k != "n_sents_scored"}
    metrics["signature"] = m["d_bleu"]["signature"]
    metrics["by_length"] = bleu_by_length(sysm.hyp, refs, lengths)
    if tcp_dir:
        from .tcp import tcp_documents
        metrics["tcp"] = tcp_documents(sysm.hyp, tcp_dir)
    if comet_model:
        metrics["comet"] = _comet(comet_model, src_docs, sysm.hyp, refs, log)
    if cxmi and sysm.is_model:
        metrics["cxmi"] = _cxmi(sysm, src_docs, refs, progress, log)
    return metrics


def _paired_tests(systems: list[System], base: System, refs, samples: int) -> None:
    """Each system against the baseline: paired bootstrap of s- and d-BLEU, McNemar on each suite."""
    from .contrastive import paired_test
    from .metrics import paired_bootstrap
    for sysm in systems:
        if sysm is not base:
            sysm.metrics["bootstrap"] = {
                lvl: paired_bootstrap(base.hyp, sysm.hyp, refs, level=lvl, n_samples=samples)
                for lvl in ("s", "d") if lvl == "d" or (sysm.metrics.get("s_bleu") is not None
                                                        and base.metrics.get("s_bleu") is not None)}
            paired = {k: paired_test(base.suite_right[k], right) for k, right in sysm.suite_right.items()
                      if k in base.suite_right}
            if paired:
                sysm.metrics["suites_paired"] = paired


def _write_outputs(result: dict, systems: list[System], examples: dict, out: Path) -> None:
    """compare.json, compare.md, compare.csv and the plots."""
    from .contrastive import plot_accuracy_by
    from .metrics import plot_by_length
    (out / "compare.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    header, rows = table(result)
    (out / "compare.md").write_text(markdown(header, rows, result))
    with open(out / "compare.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    plot_by_length({s.name: s.metrics["by_length"] for s in systems}, out / "dbleu_by_length.png",
                   title="d-BLEU vs document length")
    for suite in examples:
        reports = {s.name: s.metrics["suites"][suite] for s in systems if suite in s.metrics.get("suites", {})}
        for key in ("distance", "pronoun", "phenomenon", "type"):
            plot_accuracy_by(reports, key, out / f"{suite}_by_{key}.png", title=f"{suite}: accuracy by {key}")


def _check_documents(sysm: System, refs) -> None:
    if len(sysm.hyp) != len(refs):
        raise DocnmtError(f"{sysm.path}: {len(sysm.hyp)} documents, the reference has {len(refs)}")


def _hypothesis(sysm: System, src_docs, src: str, out: Path, force: bool, log, progress) -> list[list[str]]:
    """The system's translation: a file read as it is, a model's translated (its translation
    cached in ``out/hyps``, reused while the model, weights and source are the same)."""
    from .readers import read_sentences, write_marker
    if not sysm.is_model:
        if sysm.path.is_dir():
            raise DocnmtError(f"{sysm.path}: a directory without config.yaml is not a docnmt model")
        return read_sentences(str(sysm.path), hypothesis=True)
    from .checkpoint import WEIGHTS
    cached, meta_path = out / "hyps" / f"{sysm.name}.txt", out / "hyps" / f"{sysm.name}.json"
    weights = sysm.path / WEIGHTS
    meta = {"model": str(sysm.path.resolve()), "weights_mtime": weights.stat().st_mtime if weights.exists() else None,
            "src": hashlib.sha256(Path(src).read_bytes()).hexdigest() if Path(src).is_file() else str(src)}
    if cached.exists() and not force:
        if meta_path.exists() and json.loads(meta_path.read_text()) == meta:
            log(f"{sysm.name}: reusing the translation in {cached}")
            return read_sentences(str(cached), hypothesis=True)
        log(f"{sysm.name}: {cached} is from another model, weights or source; translating again")
    docs, report = sysm.translator.translate(src_docs, progress=progress)
    log(f"{sysm.name}: {report.summary()}")
    write_marker(docs, cached, side="tgt", allow_empty=True)
    meta_path.write_text(json.dumps(meta))
    return [d.tgt for d in docs]


def _comet(model: str, src_docs, hyp, refs, log) -> dict | None:
    from .comet import aligned_sentences, comet_score
    srcs, hyps, rs, kept = aligned_sentences([d.src for d in src_docs], hyp, refs)
    res = comet_score(model, srcs, hyps, rs)
    if isinstance(res, str):
        log(res)
        return None
    return {"score": res["score"], "model": res["model"], "documents": kept, "of_documents": len(refs)}


def _cxmi(sysm: System, src_docs, refs, progress, log) -> dict:
    """How much the model uses its context on the test documents (docnmt score --cxmi)."""
    from .document import Document
    from .scoring import context_usage
    docs = [Document(d.docid, d.src, r) for d, r in zip(src_docs, refs)]
    usage = context_usage(sysm.translator, docs, progress=progress)
    log(f"{sysm.name}: CXMI {usage['cxmi_bits_per_token']:+.4f} bits per word piece")
    return {k: usage[k] for k in ("cxmi_bits_per_token", "sentences_more_likely_with_context", "cxmi_by_position")}


def _suites(sysm: System, examples: dict, loaded: dict, fmt: str, options: dict, out: Path, progress, log) -> dict:
    from .contrastive import accuracy_report, format_report, right_answers, score_examples, write_scores
    from .suites import read_suite
    translator = sysm.translator
    res = {}
    for name, path in examples.items():
        if name not in loaded:
            loaded[name] = read_suite(path, fmt, **options)
            if not loaded[name]:
                raise DocnmtError(f"{path}: no contrastive examples")
        scores = score_examples(translator, loaded[name], progress=progress)
        write_scores(out / "hyps" / f"{sysm.name}.{name}.scores.jsonl", loaded[name], scores)
        res[name] = accuracy_report(loaded[name], scores)
        sysm.suite_right[name] = right_answers(loaded[name], scores)
        log(format_report(res[name], f"{sysm.name} on {name}"))
    return res


def table(result: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows (strings) of the comparison table."""
    systems = result["systems"]
    suites = sorted({k for s in systems.values() for k in s.get("suites", {})})
    has = lambda key: any(s.get(key) for s in systems.values())  # noqa: E731
    header = ["system", "s-BLEU", "d-BLEU", "s-chrF", "d-chrF", "Δs-BLEU (p)", "Δd-BLEU (p)"]
    header += ["TC", "CP", "PT", "TCP"] if has("tcp") else []
    header += ["COMET"] if has("comet") else []
    header += ["CXMI (bits)"] if has("cxmi") else []
    header += [h for s in suites for h in (f"{s} acc.", f"Δ{s} acc. (p)")]
    rows = []
    for name, s in systems.items():
        num = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        boot = s.get("bootstrap", {})
        delta = lambda lvl: (f"{boot[lvl]['delta']:+.2f} ({boot[lvl]['p_value']:.3f})"  # noqa: E731
                             if lvl in boot else ("baseline" if name == result["baseline"] else "-"))
        row = [name, num(s.get("s_bleu")), num(s.get("d_bleu")), num(s.get("s_chrf")), num(s.get("d_chrf")),
               delta("s"), delta("d")]
        if has("tcp"):
            row += [f"{s['tcp'][k]['score']:.1f}" for k in ("TC", "CP", "PT")] + [f"{s['tcp']['TCP']:.1f}"]
        if has("comet"):
            row.append(f"{s['comet']['score']:.4f}" if s.get("comet") else "-")
        if has("cxmi"):
            row.append(f"{s['cxmi']['cxmi_bits_per_token']:+.4f}" if s.get("cxmi") else "-")
        for k in suites:
            row.append(f"{100 * s['suites'][k]['accuracy']:.2f}" if k in s.get("suites", {}) else "-")
            t = s.get("suites_paired", {}).get(k)
            row.append(f"{100 * t['delta']:+.2f} ({t['p_value']:.3f})" if t else
                       ("baseline" if name == result["baseline"] and k in s.get("suites", {}) else "-"))
        rows.append(row)
    return header, rows


def markdown(header: list[str], rows: list[list[str]], result: dict) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    sig = next(iter(result["systems"].values())).get("signature", "")
    lines += ["", f"Reference: `{result['ref']}`; source: `{result['src']}`. Baseline of the paired bootstrap "
              f"(Δ = system − baseline, one-sided p): **{result['baseline']}**. BLEU: `{sig}`. "
              "Suite accuracy counts ties as errors; Δ acc. is in points against the baseline, "
              "with the two-sided p of an exact McNemar test on the same examples."
              + (" CXMI: how much the context raises the references' log-probability, in bits per "
                 "word piece (0 for a sentence model; models only)." if any(s.get("cxmi") for s in
                                                                   result["systems"].values()) else "")]
    return "\n".join(lines) + "\n"
