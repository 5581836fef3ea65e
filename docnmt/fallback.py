"""Every sentence guaranteed: the sentences a document output lost, translated again alone.

A model whose outputs hold several sentences (Doc2Doc, MR, P-Transformer, G-Transformer; DocFlat,
whose current sentence may come back empty) can lose one: the recovery rules
(docs/methods/baselines.md#recovering-sentences-from-document-outputs) still give every source
sentence a line, but the line may be empty, or hold two sentences' translation while its
neighbour is empty. ``decode.fallback`` (``docnmt translate --fallback``) translates exactly
those sentences again, each alone as its own instance: by the model itself in its sentence mode,
or by the sentence model ``decode.fallback_model`` names. ``auto`` (the default) is ``sentence``
for the modes that can lose sentences (:data:`AUTO_MODES`) and ``none`` for sentence models,
Doc2Sent and the context encoder, whose every output is one sentence.

Which sentences are lost (:func:`lost_sentences`): in an output whose structure was not as
expected, every sentence that came back empty, every one that received more than one piece of the
output (two separators of one index, extra sentences appended to the last) and every non-empty one
followed by an empty one (a missing separator leaves the next sentence's translation in it); and
every sentence whose translation is empty at the end. Sentences of a well-formed output are never
touched.
"""
from __future__ import annotations

from dataclasses import replace

from .data import sent_instances
from .document import Document
from .errors import DocnmtError

AUTO_MODES = ("doc2doc", "mr", "pseudodoc")      # data.mode: outputs that can lose a sentence


def active(cfg, search) -> bool:
    """Whether the fallback runs for a model of ``cfg`` decoding with ``search``."""
    if search.fallback == "auto":
        return cfg.data.mode in AUTO_MODES or bool(search.fallback_model)
    return search.fallback == "sentence"


def lost_sentences(joiner, ids: list[int], n: int) -> set[int]:
    """The sentences (0-based, of ``n``) that generated target ``ids`` lost: none when it splits
    as expected; else the empty ones, those that received more than one piece of output and the
    non-empty ones followed by an empty one (see the module doc)."""
    sents, ok = joiner.split(ids, n)
    if ok:
        return set()
    pieces = pieces_per_sentence(joiner, ids, n)
    lost = {j for j in range(n) if not sents[j] or pieces[j] > 1}
    return lost | {j for j in range(n - 1) if sents[j] and not sents[j + 1]}


def pieces_per_sentence(joiner, ids: list[int], n: int) -> list[int]:
    """How many pieces of ``ids`` (the runs between separators or end-of-sentence tokens) the
    recovery rules put into each sentence: the split of each longer prefix, compared with the
    last (a token only ever adds to one sentence)."""
    bounds = set(joiner.sep_ids) | {joiner.vocab.eos}
    cuts = [k + 1 for k, t in enumerate(ids) if t in bounds]
    cuts = [c for c in cuts if c < len(ids)] + [len(ids)]
    counts, before = [0] * n, [0] * n
    for c in cuts:
        now = [len(s) for s in joiner.split(ids[:c], n)[0]]
        for j in range(n):
            counts[j] += now[j] > before[j]
        before = now
    return counts


def repair(translator, docs: list[Document], corpus, outputs: list, report, bad_docs: set, search, decode_alone,
           fixed=frozenset()) -> None:
    """Translate the lost sentences again, each alone (``decode_alone(rows, outputs)`` decodes
    sentence instances with the model; ``search.fallback_model``: that model instead), and put
    each translation that is not empty in ``outputs``. Sentences in ``fixed`` (a context: forced,
    or decoded and dropped) are never touched. Sets the report's ``fallback`` and ``repaired``; ``bad_docs`` keeps the
    documents with a sentence still lost."""
    def blank(out) -> bool:
        return not out or not translator.vocab.decode(out[0]).strip()
    lost = sorted((report.lost | {i for i, o in enumerate(outputs) if blank(o)}) - set(fixed))
    by = "sentence_model" if search.fallback_model else "model"
    report.fallback = {"by": by, "path": search.fallback_model or None, "sentences": len(lost)}
    bad_docs.clear()
    if not lost:
        return
    if search.fallback_model:
        fresh = _by_sentence_model(translator, [s for d in docs for s in d.src], lost, search)
    else:
        fresh = [[] for _ in range(corpus.n_sents)]
        decode_alone(sent_instances(corpus)[lost], fresh)
    for i in lost:
        if not blank(fresh[i]):
            outputs[i] = fresh[i]
            report.repaired.add(i)
    bad_docs.update(int(corpus.doc_of(i)) for i in lost if i not in report.repaired)


def _by_sentence_model(translator, sources: list[str], lost: list[int], search) -> list:
    """The lost sentences translated by the model ``search.fallback_model`` names (loaded once per
    translator), each as a one-sentence document, its output in this model's word pieces."""
    other = sentence_model(translator, search.fallback_model)
    own = other.cfg.decode                    # the user's search settings, the other model's batching
    out, _ = other.translate([Document(str(i), [sources[i]]) for i in lost],
                             replace(search, max_sentences=own.max_sentences, max_tokens=own.max_tokens,
                                     fallback="none", fallback_model=""))
    fresh: list = [[] for _ in sources]
    for i, ids in zip(lost, translator.vocab.encode_batch([d.tgt[0] for d in out], "tgt")):
        fresh[i] = [ids] if ids else []
    return fresh


def sentence_model(translator, path: str):
    """The fallback model in directory ``path``, loaded once per translator (a DocnmtError for a
    directory that holds no model: ``docnmt translate`` asks before decoding)."""
    models = translator.__dict__.setdefault("fallback_models", {})
    if path not in models:
        other = type(translator).load(path, device=str(translator.device))
        if other.cfg.data.mode in AUTO_MODES:
            raise DocnmtError(f"--fallback-model {path}: a {other.cfg.data.mode} model can lose sentences too; "
                              "name a sentence-level model (Sent2Sent, Doc2Sent or a context encoder)")
        models[path] = other
    return models[path]


def mark(docs: list[Document], corpus, report) -> None:
    """Each document's repaired sentences (0-based) as ``meta["repaired"]``, where there are any."""
    for i in sorted(report.repaired):
        d = int(corpus.doc_of(i))
        docs[d].meta.setdefault("repaired", []).append(i - int(corpus.doc_offsets[d]))
