"""What ``docnmt translate`` and ``docnmt score`` write: translations streamed from standard input
as they arrive, translations with their scores (``--print-scores``, Moses n-best lines), the
coverage report, and reference scores (with CXMI) as TSV or JSONL lines."""
from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

from .document import Document
from .errors import DataError
from .readers import _output, write_jsonl, write_marker
from .scoring import context_usage, document_logprobs
from .translate import CoverageReport


def translate_stream(translator, cfg, output: str | None = None, print_scores: bool = False):
    """Standard input in a line format, translated as it arrives: a ``<d>`` line or a blank line
    ends a document, which is translated and written (and flushed) at once to ``output`` (a
    file name; None: stdout); with a model that uses no context (Sent2Sent without context input)
    every line is translated as soon as it is read. The output has the input's lines (``<d>`` and
    blank lines kept). Returns the coverage report, or None when the input turns out to be JSON or
    XML (then read as a whole). An input without a sentence is an error, as an empty file is."""
    stdin = sys.stdin.buffer
    first = stdin.readline()
    if first.lstrip(b"\xef\xbb\xbf").lstrip()[:1] in (b"{", b"<") and first.strip() != b"<d>":
        sys.stdin = io.TextIOWrapper(io.BytesIO(first + stdin.read()), encoding="utf-8")
        return None
    per_line = cfg.data.mode == "sent2sent" and not cfg.data.context_input
    out = _Output(output)
    total = CoverageReport()
    sents: list[str] = []
    ndocs = 0

    def flush() -> None:
        nonlocal ndocs
        if sents:
            _translate_one(translator, cfg, Document(str(ndocs), list(sents)), out.open(), print_scores, total)
            ndocs += 1
            sents.clear()
    try:
        for no, raw in _numbered_lines(first, stdin):
            try:
                line = raw.decode("utf-8").lstrip("\ufeff").strip()
            except UnicodeDecodeError as e:
                raise DataError(f"invalid UTF-8 (byte 0x{raw[e.start]:02x})", "<stdin>", no) from None
            if line in ("", "<d>"):
                flush()
                out.write(line + "\n")
                continue
            sents.append(line)
            if per_line:
                flush()
        flush()
    finally:
        out.close()
    if not ndocs:           # as an empty -i file is refused (and nothing was written)
        raise DataError("empty input: no sentences", "<stdin>")
    return total


class _Output:
    """The stream's output (a file name; None: stdout), opened at the first translation: the
    ``<d>`` and blank lines before it are held, so an input without a sentence writes nothing."""

    def __init__(self, path: str | None):
        self.path, self.file, self.held = path, None, []

    def open(self):
        if self.file is None:
            self.file = Path(self.path).open("w", encoding="utf-8") if self.path else sys.stdout
            self.file.write("".join(self.held))
        return self.file

    def write(self, text: str) -> None:
        if self.file is None:
            self.held.append(text)
        else:
            self.file.write(text)
            self.file.flush()

    def close(self) -> None:
        if self.file is not None and self.file is not sys.stdout:
            self.file.close()


def _translate_one(translator, cfg, doc: Document, out, print_scores: bool, total: CoverageReport) -> None:
    """One document of a stream translated, written and flushed; its coverage added to ``total``."""
    docs, rep = translator.translate([doc], cfg.decode, origin="<stdin>")
    if print_scores:
        add_scores(translator, docs)
        out.write("".join(f"{sc:.4f}\t{t}\n" for sc, t in zip(docs[0].meta["scores"], docs[0].tgt)))
    else:
        out.write("".join(t + "\n" for t in docs[0].tgt))
    out.flush()
    total.add(rep, total.sentences)


def _numbered_lines(first: bytes, stream):
    """``(line number, bytes)`` of ``first`` and then every line of ``stream``, as they arrive."""
    no, line = 1, first
    while line:
        yield no, line
        no, line = no + 1, stream.readline()


def add_scores(translator, docs) -> None:
    """``meta["scores"]``: each output sentence's log-probability per token under the model, in
    its own input format (a teacher-forced pass over the output, as ``docnmt score`` does), with
    ``logprobs`` and ``tokens`` per sentence and ``score`` / ``logprob`` / ``tokens`` of the document."""
    scored = document_logprobs(translator, [Document(d.docid, d.src, list(d.tgt)) for d in docs], origin="translation")
    for doc, per_sent in zip(docs, scored):
        lp, n = sum(x for x, _ in per_sent), sum(k for _, k in per_sent)
        doc.meta.update(scores=[x / max(k, 1) for x, k in per_sent], logprobs=[x for x, _ in per_sent],
                        tokens=[k for _, k in per_sent], score=lp / max(n, 1), logprob=lp)


def write_translations(translator, docs, target, output_format: str = "marker", nbest: int = 1,
                       print_scores: bool = False, scored: bool = False) -> None:
    """Translated documents to ``target`` (a file name or an open file): JSONL, scored lines
    (``--nbest`` > 1 or ``--print-scores``, see :func:`write_scored`) or the marker format.
    ``scored``: :func:`add_scores` has already been run on ``docs`` (a journal's chunks)."""
    if print_scores and not scored:
        add_scores(translator, docs)
    if output_format == "jsonl":
        write_jsonl(docs, target)
    elif nbest > 1 or print_scores:
        write_scored(docs, target, nbest)
    else:
        write_marker(docs, target, side="tgt", allow_empty=True)


def write_scored(docs, target, nbest: int) -> None:
    """Plain output with scores. ``--nbest N`` (N > 1): Moses n-best lines ``I ||| translation |||
    score`` (I: the sentence's 0-based number in the input; score: the length-normalised
    log-probability of the beam hypothesis it comes from), N per sentence, no ``<d>`` lines.
    ``--print-scores``: the marker format with ``score<TAB>translation`` lines and ``<d><TAB>score``
    document lines (log-probability per token under the model); a first document read without a
    ``<d>`` line (plain text) gets none, so the output has its input's lines."""
    with _output(target) as fh:
        i = 0
        for k, doc in enumerate(docs):
            if nbest > 1:
                alts = doc.meta.get("nbest") or [[t] for t in doc.tgt]
                alt_scores = doc.meta.get("nbest_scores") or [[None] * len(a) for a in alts]
                for texts, scores in zip(alts, alt_scores):
                    for text, score in zip(texts, scores):
                        fh.write(f"{i} ||| {text} ||| {'' if score is None else f'{score:.4f}'}\n")
                    i += 1
                continue
            if k or not doc.meta.get("unmarked"):     # as write_marker: a plain input's lines stay aligned
                fh.write(f"<d>\t{doc.meta['score']:.4f}\n")
            for text, score in zip(doc.tgt, doc.meta["scores"]):
                fh.write(f"{score:.4f}\t{text}\n")


def write_report(report: CoverageReport, path) -> None:
    """The coverage report as ``--report`` writes it (JSON)."""
    Path(path).write_text(json.dumps(report.as_dict(), indent=1) + "\n", encoding="utf-8")


def reference_scores(translator, docs: list[Document], cxmi: bool = False, progress: bool = False,
                     origin=None) -> tuple[list, dict | None]:
    """``(scores, words)``: per document, ``(log-probability, tokens)`` of each reference sentence
    (``doc.tgt``) in the model's own input format; with ``cxmi`` also its word pieces'
    log-probability in context (from the same pass) and alone (:func:`~docnmt.scoring.context_usage`)."""
    scores = document_logprobs(translator, docs, progress=progress, origin=origin, with_words=cxmi)
    words = context_usage(translator, docs, progress=progress, origin=origin,
                          in_context=[[s[2:] for s in doc] for doc in scores]) if cxmi else None
    return [[s[:2] for s in doc] for doc in scores], words


def _nll(lp: float, n: int) -> float:
    return -lp / max(n, 1)


def _bits(gain: float, n: int) -> float:
    return gain / max(n, 1) / math.log(2)


def _cxmi_fields(w) -> dict:
    """(with, alone, pieces) as the JSONL fields; None: none."""
    return {"word_pieces": w[2], "logprob_words": w[0], "logprob_words_alone": w[1],
            "cxmi_bits": _bits(w[0] - w[1], w[2])} if w else {}


def _tsv_cells(x: float, k: int, w) -> str:
    return f"\t{x:.4f}\t{k}\t{_nll(x, k):.4f}" + (
        f"\t{w[2]}\t{w[0]:.4f}\t{w[1]:.4f}\t{_bits(w[0] - w[1], w[2]):.4f}" if w else "")


def format_scores(docs: list[Document], scores: list, words: dict | None, output_format: str = "tsv") -> str:
    """Reference scores as ``docnmt score`` writes them. tsv: a header, one line per sentence
    (document id, sentence number, log-probability, tokens, NLL per token, with CXMI's columns)
    and one per document (sentence ``*``); jsonl: one object per document."""
    lines = []
    if output_format == "tsv":
        lines.append("document\tsentence\tlogprob\ttokens\tnll_per_token"
                     + ("\tword_pieces\tlogprob_words\tlogprob_words_alone\tcxmi_bits" if words else ""))
    for d, (doc, per_sent) in enumerate(zip(docs, scores)):
        lp, n = sum(x for x, _ in per_sent), sum(k for _, k in per_sent)
        per_words = words["documents"][d] if words else [None] * len(per_sent)
        doc_words = tuple(map(sum, zip(*per_words))) if words else None
        if output_format == "jsonl":
            lines.append(json.dumps({"id": doc.docid, "logprob": lp, "tokens": n, "nll_per_token": _nll(lp, n),
                                     **_cxmi_fields(doc_words), "sentences": [
                                         {"logprob": x, "tokens": k, "nll_per_token": _nll(x, k), **_cxmi_fields(w)}
                                         for (x, k), w in zip(per_sent, per_words)]}, ensure_ascii=False))
            continue
        lines += [f"{doc.docid}\t{i}" + _tsv_cells(x, k, w)
                  for i, ((x, k), w) in enumerate(zip(per_sent, per_words), 1)]
        lines.append(f"{doc.docid}\t*" + _tsv_cells(lp, n, doc_words))
    return "\n".join(lines) + "\n"


def score_summary(scores: list, words: dict | None) -> str:
    """The lines ``docnmt score`` prints on stderr: NLL, bits and perplexity; with CXMI its total,
    the share of sentences the context made more likely and CXMI by sentence position."""
    total = sum(x for doc in scores for x, _ in doc)
    tokens = sum(k for doc in scores for _, k in doc)
    nll = _nll(total, tokens)
    text = (f"{sum(map(len, scores))} sentences, {tokens} target tokens: NLL {nll:.4f} nats/token "
            f"({nll / math.log(2):.4f} bits), perplexity {math.exp(nll):.2f}")
    if words:
        by_pos = ", ".join(f"{p}: {v:+.4f}" for p, v in words["cxmi_by_position"].items())
        text += (f"\nCXMI {words['cxmi_bits_per_token']:+.4f} bits per word piece (the context made "
                 f"{100 * words['sentences_more_likely_with_context']:.1f}% of the reference sentences more likely; "
                 f"by sentence position {by_pos})")
    return text
