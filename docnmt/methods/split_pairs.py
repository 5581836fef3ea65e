"""Split-pair training (Lupo et al., 2022, "Divide and Rule"; docs/methods/split_pairs.md), a
switch any document method can use: every epoch, each training sentence pair is, with probability
``train.split_pairs``, also cut into two consecutive segment pairs that become a two-sentence
document of their own: the first half is the context of the second, whose words often need it
(an intra-sentence link broken by the cut), so the model learns to look there.

The cut (:func:`split_pair`, ``train.split_rule``): the source at its word boundary nearest the
middle; the target, by the ``middle`` rule, at its word boundary nearest the proportional position
(source cut j of n tokens: the target's m·j/n), by the ``anchored`` rule at the word boundary that
the fewest anchor links cross (a piece with a digit, a punctuation mark or a capital letter found
exactly once on each side: a number, a name, a lone comma), the proportional one breaking ties, so
that the halves correspond. The extra documents are cut into instances by the method's own mode like any document
(without the sentence-pair mixture and the training-document filters: they are not real
documents); the draws depend on (seed, epoch) only, so a resumed run sees the same ones.
"""
from __future__ import annotations

import unicodedata
from dataclasses import replace

import numpy as np

from .. import ranges
from ..data import Corpus, Side, build_instances
from ..data.instances import train_documents
from ..errors import ConfigError
from .base import Extension, Setting, require_context


def word_starts(vocab) -> tuple[np.ndarray, np.ndarray]:
    """Per vocabulary id: whether its piece opens a word (SentencePiece's ``▁``, byte BPE's ``Ġ``;
    without either, every piece but WordPiece's ``##`` ones) and whether it runs on into the next
    piece (Moses BPE's ``@@``). A word starts at token j iff j opens one and j−1 does not run on."""
    pieces = [vocab.piece(i) for i in range(len(vocab))]
    marked = any(p.startswith(("▁", "Ġ")) for p in pieces)
    opens = np.array([p.startswith(("▁", "Ġ")) if marked else not p.startswith("##") for p in pieces])
    joins = np.array([p.endswith("@@") for p in pieces])
    return opens, joins


RULES = ("middle", "anchored")


def anchor_pieces(vocab) -> np.ndarray:
    """Per vocabulary id: whether its piece can anchor a cut (:func:`anchored_cut`): it holds a
    digit, a punctuation mark or a capital letter (numbers, names, punctuation: what a translation
    usually keeps as it is)."""
    def anchor(piece: str) -> bool:
        text = piece.lstrip("▁Ġ").removesuffix("@@").removeprefix("##")
        return any(c.isdigit() or c.isupper() or unicodedata.category(c).startswith("P") for c in text)
    return np.array([anchor(vocab.piece(i)) for i in range(len(vocab))])


def word_boundaries(tokens: np.ndarray, opens: np.ndarray, joins: np.ndarray) -> np.ndarray:
    """The token indices in 1..n−1 where a word of ``tokens`` starts."""
    tokens = np.asarray(tokens, dtype=np.int64)
    return np.flatnonzero(opens[tokens[1:]] & ~joins[tokens[:-1]]) + 1


def cut_point(tokens: np.ndarray, opens: np.ndarray, joins: np.ndarray, at: float) -> int:
    """The word boundary of ``tokens`` (a token index in 1..n−1 where a word starts) nearest
    position ``at`` (the earlier of two as near); 0 when the sentence is one word."""
    starts = word_boundaries(tokens, opens, joins)
    return int(starts[np.argmin(np.abs(starts - at))]) if len(starts) else 0


def anchored_cut(src: np.ndarray, tgt: np.ndarray, j: int, opens: np.ndarray, joins: np.ndarray,
                 anchors: np.ndarray) -> int:
    """The target's cut for a source cut at ``j``: of the target's word boundaries, the one that the
    fewest anchor links cross (an anchor piece found exactly once in each side links its two
    positions; the link crosses when one end is before its side's cut and the other is not), the
    one nearest the proportional position m·j/n among those (the earlier of two as near); 0 when
    the target is one word."""
    starts = word_boundaries(tgt, opens, joins)
    if not len(starts):
        return 0
    src, tgt = np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)
    ids, n_src = np.unique(src, return_counts=True)
    once_src = set(ids[(n_src == 1) & anchors[ids]].tolist())
    ids, n_tgt = np.unique(tgt, return_counts=True)
    linked = [t for t in ids[n_tgt == 1].tolist() if t in once_src]
    before = np.array([np.flatnonzero(src == t)[0] < j for t in linked], dtype=bool)       # source end
    ends = np.array([np.flatnonzero(tgt == t)[0] for t in linked], dtype=np.int64)          # target end
    crossed = ((ends[None, :] < starts[:, None]) != before[None, :]).sum(axis=1)
    best = starts[crossed == crossed.min()]
    return int(best[np.argmin(np.abs(best - len(tgt) * j / len(src)))])


def split_pair(src: np.ndarray, tgt: np.ndarray, opens: np.ndarray, joins: np.ndarray,
               anchors: np.ndarray | None = None) -> tuple[int, int]:
    """Where a sentence pair is cut: the source at its word boundary nearest its middle, the target
    at its word boundary nearest the proportional position (the ``middle`` rule), or, given
    ``anchors`` (:func:`anchor_pieces`; the ``anchored`` rule), at :func:`anchored_cut`'s; (0, 0)
    when either side is one word."""
    j = cut_point(src, opens, joins, len(src) / 2)
    if not j:
        return 0, 0
    k = anchored_cut(src, tgt, j, opens, joins, anchors) if anchors is not None else \
        cut_point(tgt, opens, joins, len(tgt) * j / len(src))
    return (j, k) if k else (0, 0)


def split_corpus(corpus: Corpus, sents: np.ndarray, vocab, rule: str = "middle") -> Corpus:
    """The two-sentence documents (first half, second half) of the sentence pairs ``sents`` that
    can be cut, by ``rule`` (:data:`RULES`)."""
    opens, joins = word_starts(vocab)
    anchors = anchor_pieces(vocab) if rule == "anchored" else None
    src, tgt = [], []
    for i in sents:
        s, t = corpus.src[int(i)], corpus.tgt[int(i)]
        j, k = split_pair(s, t, opens, joins, anchors)
        if j:
            src += [s[:j], s[j:]]
            tgt += [t[:k], t[k:]]
    n = len(src) // 2
    return Corpus(Side.from_lists(src), Side.from_lists(tgt), np.arange(0, 2 * n + 1, 2, dtype=np.int64),
                  [f"split-pair-{d}" for d in range(n)], generated=np.ones(n, dtype=bool))


def joined(a: Corpus, b: Corpus) -> Corpus:
    """``b``'s documents after ``a``'s, in one corpus (a copy of both)."""
    def side(x: Side, y: Side) -> Side:
        return Side(np.concatenate([x.tokens, y.tokens]), np.concatenate([x.offsets, y.offsets[1:] + len(x.tokens)]))
    return Corpus(side(a.src, b.src), side(a.tgt, b.tgt),
                  np.concatenate([a.doc_offsets, b.doc_offsets[1:] + a.n_sents]), [*a.docids, *b.docids],
                  np.concatenate([a.sentence_level, b.sentence_level]), np.concatenate([a.generated, b.generated]))


def with_split_pairs(corpus: Corpus, rows: np.ndarray, data, vocab, rate: float, epoch: int,
                     seed: int, rule: str = "middle") -> tuple[Corpus, np.ndarray]:
    """``corpus`` with this epoch's split pairs as documents after its own, and ``rows`` with their
    instances (the mode's, without sentence mixture and document filters). Each sentence pair of a
    document the filters keep is drawn with probability ``rate``."""
    rng = np.random.default_rng([seed, epoch, 0x5B])
    kept = train_documents(corpus, data)[corpus.doc_of(np.arange(corpus.n_sents))]
    extra = split_corpus(corpus, np.flatnonzero((rng.random(corpus.n_sents) < rate) & kept), vocab, rule)
    if not extra.n_docs:
        return corpus, rows
    plain = replace(data, mix_sentences=False, min_train_doc_sents=0, max_train_sent_tokens=0)
    more = build_instances(extra, plain, training=True, epoch=epoch, seed=seed) + corpus.n_sents
    return joined(corpus, extra), np.concatenate([rows, more])


def _check(cfg) -> None:
    require_context(cfg.train.split_pairs > 0, cfg.data, "train.split_pairs (--split-pairs)",
                    "a sentence-level model would see the halves without their context")
    if cfg.train.split_rule != "middle" and cfg.train.split_pairs == 0:
        raise ConfigError(f"train.split_rule (--split-rule) {cfg.train.split_rule} cuts split pairs, and there are "
                          "none: add --split-pairs P (P > 0), or leave the rule out")


def _extend(corpus, rows, cfg, vocab, epoch: int, seed: int):
    if cfg.train.split_pairs <= 0 or corpus.tgt is None:
        return None
    return with_split_pairs(corpus, rows, cfg.data, vocab, cfg.train.split_pairs, epoch, seed,
                            cfg.train.split_rule)


EXTENSION = Extension(name="split_pairs", training_data=_extend, check=_check, settings=(
    Setting("train.split_pairs", 0.0, "P(a training sentence pair is also added, cut in two, as a two-sentence "
            "document: first half as the second's context), drawn anew each epoch (split-pair training)",
            "--split-pairs", limit=ranges.PROBABILITY),
    Setting("train.split_rule", "middle", "with --split-pairs, where it cuts the target: middle (the word boundary at "
            "the source cut's proportional position) or anchored (the one the fewest shared numbers, names and "
            "punctuation marks cross, so that the halves correspond)", "--split-rule", limit=ranges.one_of(RULES),
            needs="train.split_pairs"),
))
