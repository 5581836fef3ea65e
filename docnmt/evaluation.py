"""The work of ``docnmt evaluate`` beyond the metrics themselves (:mod:`docnmt.metrics`): a
translation file scored against its references, with the paired bootstrap against a second system,
d-BLEU by document length, TCP and COMET on request; and the printed tables of ``docnmt entropy``
and of a contrastive suite compared with a baseline.

Results are printed as they are computed (``say``: a line for stdout, ``warn``: one for stderr)
and returned for the JSON files."""
from __future__ import annotations

import sys
from pathlib import Path

from .errors import DocnmtError
from .readers import read_sentences


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def document_counts(a, n_a: int, b, n_b: int) -> str:
    """"A has 1 document, B has 5 documents", with a hint where one side looks unmarked."""
    docs = lambda n: f"{n} document{'s' * (n != 1)}"  # noqa: E731
    hint = (" (documents are separated by <d> lines: a translation keeps its source's <d> lines)"
            if 1 in (n_a, n_b) else "")
    return f"{a} has {docs(n_a)}, {b} has {docs(n_b)}{hint}"


def evaluate_files(hyp_path, ref_path, *, compare=None, samples: int = 1000, src=None, by_length: bool = False,
                   plot=None, tcp=None, tcp_tokenized: bool = False, comet_model=None, say=print,
                   warn=_stderr) -> dict:
    """s-BLEU, d-BLEU and chrF of the translation ``hyp_path`` against ``ref_path``; with
    ``compare`` the paired bootstrap of a second translation against it (BLEU and chrF), with
    ``by_length`` d-BLEU per document-length bucket (``src`` words, else reference words; plotted
    to ``plot``), with ``tcp`` the TCP of a PDC test directory, with ``comet_model`` COMET."""
    from .metrics import evaluate_documents, format_table
    hyp, ref = read_sentences(hyp_path, hypothesis=True), read_sentences(ref_path)
    if len(hyp) != len(ref):
        raise DocnmtError(document_counts(hyp_path, len(hyp), ref_path, len(ref)))
    other = read_sentences(compare, hypothesis=True) if compare else None     # checked before any output
    if other is not None and len(other) != len(ref):
        raise DocnmtError(document_counts(compare, len(other), ref_path, len(ref)))
    result = evaluate_documents(hyp, ref)
    say(format_table(result))
    mismatched = result["n_mismatched_docs"]
    if mismatched * 2 > len(ref):     # most documents: s-level scores cover few sentences, or none
        result["warning"] = (f"{mismatched} of {len(ref)} documents have a different number of sentences in "
                             f"{hyp_path} and {ref_path}; s-level scores leave them out "
                             f"({result['n_sents_scored']} of {result['n_sents']} sentences scored)")
        warn(f"WARNING: {result['warning']}")
    if compare:
        result.update(bootstrap(hyp, ref, hyp_path, compare, samples, bool(result["s_bleu"]), say, other))
    if by_length:
        result["by_length"] = bleu_by_length(hyp, ref, hyp_path, ref_path, src, plot, say)
    if tcp:
        from .tcp import format_tcp, tcp_documents
        result["tcp"] = tcp_documents(hyp, tcp, tokenized=tcp_tokenized)
        say(format_tcp(result["tcp"]))
    if comet_model:
        result["comet"] = comet(hyp, ref, ref_path, src, comet_model, say)
    return result


def bootstrap(hyp, ref, hyp_path, compare_path, samples: int, s_level: bool, say=print, other=None) -> dict:
    """The paired bootstrap of the translation ``compare_path`` against ``hyp`` on d-level (and
    s-level where there are s-level scores) BLEU and chrF, a line each: ``{"bootstrap": ...,
    "bootstrap_chrf": ...}``, each level -> :func:`~docnmt.metrics.paired_bootstrap`'s result."""
    from .metrics import paired_bootstrap
    other = read_sentences(compare_path, hypothesis=True) if other is None else other
    levels = [lvl for lvl in ("s", "d") if lvl == "d" or s_level]
    out = {"bootstrap": {lvl: paired_bootstrap(hyp, other, ref, level=lvl, n_samples=samples) for lvl in levels},
           "bootstrap_chrf": {lvl: paired_bootstrap(hyp, other, ref, level=lvl, metric="chrf", n_samples=samples)
                              for lvl in levels}}
    for name, tests in (("BLEU", out["bootstrap"]), ("chrF", out["bootstrap_chrf"])):
        for lvl, b in tests.items():
            # the paths as given: two systems' outputs often share a file name in different run directories
            say(f"paired bootstrap ({lvl}-{name}, {b['n_samples']} samples): --hyp {hyp_path} {b['a']:.2f}, "
                f"--compare {compare_path} {b['b']:.2f}; compare - hyp = {b['delta']:+.2f}, "
                f"p = {b['p_value']:.4f}, 95% CI [{b['ci95_b_minus_a'][0]:+.2f}, {b['ci95_b_minus_a'][1]:+.2f}]")
    return out


def bleu_by_length(hyp, ref, hyp_path, ref_path, src=None, plot=None, say=print) -> list[dict]:
    """d-BLEU per document-length bucket (words of the ``src`` documents, else of the references),
    printed as a table and plotted to ``plot``."""
    from .metrics import bleu_by_length as by_length
    from .metrics import plot_by_length
    docs = read_sentences(src, source=True) if src else ref
    if len(docs) != len(ref) or any(len(s) != len(r) for s, r in zip(docs, ref)):
        raise DocnmtError(f"{src}: not the same documents and sentences as {ref_path}")
    lengths = [sum(len(s.split()) for s in d) for d in docs]
    rows = by_length(hyp, ref, lengths)
    unit = "source" if src else "reference"
    say(f"\nd-BLEU by document length ({unit} words)\n{'bucket':>16} {'docs':>5} {'cased':>7} {'lc':>7}")
    for r in rows:
        say(f"{r['bucket']:>16} {r['n_docs']:5d} {r['d_bleu']:7.2f} {r['d_bleu_lc']:7.2f}")
    if plot:
        plot_by_length(rows, plot, title=Path(hyp_path).name)
    return rows


def comet(hyp, ref, ref_path, src, model, say=print) -> dict | None:
    """COMET of the sentences of the documents whose sentence counts agree, with the local
    checkpoint ``model``; None (and a line saying why) without ``src`` or the scorer."""
    from .comet import aligned_sentences, comet_score
    if not src:
        say("COMET skipped: it needs the source documents (--src)")
        return None
    docs = read_sentences(src, source=True)
    if len(docs) != len(ref):
        raise DocnmtError(document_counts(src, len(docs), ref_path, len(ref)))
    srcs, hyps, refs, kept = aligned_sentences(docs, hyp, ref)
    res = comet_score(model, srcs, hyps, refs)
    if isinstance(res, str):
        say(res)
        return None
    res.update(documents=kept, of_documents=len(ref))
    say(f"COMET {res['score']:.4f} ({len(res['scores'])} sentences of {kept}/{len(ref)} documents "
        f"whose sentence counts agree; {res['model']})")
    return res


def against_line(t: dict, path) -> str:
    """A contrastive suite's accuracy against a baseline's (``paired_test``'s result ``t``)."""
    return (f"against {path}: {100 * t['delta']:+.2f} points ({t['only_b']} examples right only here, "
            f"{t['only_a']} only there; exact McNemar p = {t['p_value']:.3f})")


def plot_suite(report: dict, name: str, path) -> None:
    """A suite's accuracy by antecedent distance (or pronoun, type, phenomenon: the first the
    report has) plotted to ``path``; nothing when it has none of them."""
    from .contrastive import plot_accuracy_by
    key = next((k for k in ("distance", "pronoun", "type", "phenomenon") if k in report["by"]), None)
    if key:
        plot_accuracy_by({name: report}, key, path)


def entropy_table(res: dict) -> str:
    """:func:`~docnmt.scoring.attention_entropy`'s result as ``docnmt entropy`` prints it."""
    dist, share = res["self_distance_tokens"], res["context_share"]
    lines = [f"{res['instances']} instances, teacher-forced NLL {res['nll_bits_per_token']:.3f} bits/token",
             f"{'module':<22}{'entropy (bits)':>15}{'mean distance (tokens)':>24}{'on other sentences':>20}"]
    for k, v in res["entropy_bits"].items():
        lines.append(f"{k:<22}{v:15.3f}" + (f"{dist[k]:24.1f}" if k in dist else f"{'-':>24}")
                     + (f"{100 * share[k]:19.1f}%" if k in share else f"{'-':>20}"))
    return "\n".join(lines)
