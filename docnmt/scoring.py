"""Teacher-forced passes of a trained model over given translations: the log-probability of a
sentence in its context (contrastive test suites, docs/methods/discourse.md#contrastive-scoring) and the attention
entropy per module (docs/methods/discourse.md#attention-entropy) of any model on any parallel documents.

Both build the model's input exactly as translation does for the model's mode (the same
:class:`~docnmt.data.Joiner`, instance rows and context input), so a Doc2Sent model sees its K
previous source sentences, a context-encoder model its context input, and a Doc2Doc / G- / P-
Transformer model the context sentences on both sides with the target context forced, as
decoding with a forced prefix would.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import torch

from .attention import AttentionProbe, module_kind
from .data import Corpus, InstanceSet, build_instances, model_inputs, sentence_costs
from .document import Document
from .errors import DataError
from .model import rows_apart
from .progress_log import progress_bar


def last_sentence_rows(translator, corpus: Corpus, max_context: int | None = None) -> np.ndarray:
    """One instance per document whose target ends with the document's last sentence, built
    as the model's mode builds it: Sent2Sent ``(n, n+1, n)``; Doc2Sent with its K previous
    source sentences; pseudo-documents with their K previous sentences on both sides (a DocFlat
    model then scores each instance in a batch of its own); document modes with as many previous sentences
    (at most ``max_context``) as the training split would put with it (Σ max(|x|, |y|) + 2 below the instance budget and
    the model's positions), on both sides. (A context-encoder model's context input always has
    its configured N sentences.)"""
    data, max_pos = translator.cfg.data, translator.cfg.model.max_positions
    last = corpus.doc_offsets[1:] - 1
    first = corpus.doc_offsets[:-1]
    if max_context is not None:
        first = np.maximum(first, last - max_context)
    if data.mode == "sent2sent":
        return np.stack([last, last + 1, last], 1)
    if data.mode == "doc2sent":
        return np.stack([np.maximum(first, last - data.context), last + 1, last], 1)
    if data.mode == "pseudodoc":
        start = np.maximum(first, last - data.context)
        return np.stack([start, last + 1, start], 1)
    budget = min(data.max_instance_tokens if data.max_instance_tokens > 0 else max_pos, max_pos)
    costs = sentence_costs(corpus)           # the training split's rule: add while C + c_k < budget
    rows = []
    for a0, n in zip(first.tolist(), last.tolist()):
        a, total = n, int(costs[n])
        while a > a0 and total + int(costs[a - 1]) < budget:
            a -= 1
            total += int(costs[a])
        rows.append((a, n + 1, a))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


@torch.no_grad()
def teacher_forced(translator, corpus: Corpus, rows: np.ndarray, *, max_tokens: int | None = None,
                   progress: bool = False, desc: str = "score", probe: bool = False) -> Iterable:
    """Yield ``(indices, batch, token_logprobs, probe)`` for batches of ``rows``:
    ``token_logprobs[i, t]`` is log p(labels[i, t]) (0 at pads), with the probe recording the
    attention entropy when ``probe``, and each attention's weight on other sentences: target
    sentences are numbered as the source sentences they translate (an instance whose target
    starts later than its source, Doc2Sent, is shifted)."""
    model, device = translator.model, translator.device
    iset = InstanceSet(corpus, rows, translator.joiner)
    batches = iset.batches(max_tokens or translator.cfg.decode.max_tokens, shuffle=False)
    pad = translator.vocab.pad
    # a model that looks across its batch (DocFlat) scores every instance as if alone: candidates
    # must not see each other
    apart = rows_apart(model, translator.method.score_alone)
    with progress_bar(total=len(rows), desc=desc, unit="inst", disable=not progress, leave=False) as bar, apart:
        for idx in batches:
            batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in iset.collate(idx).items()}
            sentences = None
            if probe:
                joiner, shift = translator.joiner, torch.as_tensor(rows[idx, 2] - rows[idx, 0], device=device)
                tgt = joiner.sentence_ids(batch["tgt_in"])
                sentences = {"src": joiner.sentence_ids(batch["src"]),
                             "tgt_in": torch.where(tgt < 0, tgt, tgt + shift[:, None])}
            with (AttentionProbe(sentences) if probe else _Null()) as p:
                logits = model(batch["src"], batch["tgt_in"], **model_inputs(batch))
            lp = torch.log_softmax(logits.float(), -1).gather(-1, batch["labels"][..., None]).squeeze(-1)
            yield idx, batch, lp.masked_fill(batch["labels"].eq(pad), 0.0), p
            bar.update(len(idx))


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def sentence_logprobs(translator, docs: list[Document], max_context: int | None = None,
                      progress: bool = False, max_tokens: int | None = None) -> np.ndarray:
    """Σ log p over the target tokens of each document's **last** sentence (with its separator
    or end token), teacher-forced after the document's earlier target sentences where the
    model's mode has target context (docs/methods/discourse.md#contrastive-scoring). The earlier
    sentences are the context."""
    if any(d.tgt is None or len(d.tgt) != len(d.src) or not d.src for d in docs):
        raise DataError("every scored document needs as many target as source sentences, at least one")
    corpus = Corpus.encode(docs, translator.vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2,
                           origin="contrastive examples")
    rows = last_sentence_rows(translator, corpus, max_context)
    # labels before this offset predict the forced target context (the decoding prefix)
    skip = np.asarray([len(translator.joiner.prefix([corpus.tgt[i] for i in range(t, b - 1)]))
                       for _, b, t in rows.tolist()])
    out = np.zeros(len(rows))
    for idx, _, lp, _ in teacher_forced(translator, corpus, rows, max_tokens=max_tokens, progress=progress):
        keep = (torch.arange(lp.size(1), device=lp.device)[None, :]
                >= torch.as_tensor(skip[idx], device=lp.device)[:, None])
        out[idx] = (lp * keep).sum(1).double().cpu().numpy()
    return out


def document_logprobs(translator, docs: list[Document], progress: bool = False,
                      max_tokens: int | None = None, origin: str = "reference",
                      words_only: bool = False, with_words: bool = False) -> list[list[tuple]]:
    """``(Σ log p, tokens)`` of every target sentence of every document, teacher-forced in the
    model's own input format: the instances translation decodes (Doc2Doc splits, Doc2Sent and
    pseudo-document context, the context encoder's input), each target sentence counted with its
    separator or end token. A sentence that is the context of later instances (pseudo-documents,
    forced as a prefix there) is scored in the instance where it is the one generated.
    ``words_only`` counts a sentence's word pieces only, never a format's own tokens (separators,
    ``<s>``, ``</s>``, G-Transformer's EOD), so a sentence has the same tokens in every format and
    wherever it stands in its document. ``with_words`` gives both from one pass:
    ``(Σ log p, tokens, Σ log p of the word pieces, word pieces)``."""
    if any(d.tgt is None or len(d.tgt) != len(d.src) for d in docs):
        raise DataError("every scored document needs as many target as source sentences", origin)
    corpus = Corpus.encode(docs, translator.vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2,
                           origin=origin)
    rows = build_instances(corpus, translator.cfg.data, training=False)
    owner: dict[int, int] = {}
    for r, (_, b, _) in enumerate(rows.tolist()):
        owner[b - 1] = r                              # the instance a sentence ends
    for r, (_, b, t) in enumerate(rows.tolist()):
        for i in range(t, b - 1):
            owner.setdefault(i, r)                    # else the first holding it
    first = InstanceSet(corpus, rows, translator.joiner).tfirst
    joiner, vocab = translator.joiner, translator.vocab
    out: list[tuple[float, int, float, int]] = [(0.0, 0, 0.0, 0)] * corpus.n_sents
    for idx, batch, lp, _ in teacher_forced(translator, corpus, rows, max_tokens=max_tokens, progress=progress):
        labels, lp = batch["labels"].cpu(), lp.double().cpu()
        every = labels.ne(vocab.pad)
        words = vocab.word_mask(labels) | labels.eq(vocab.unk)     # an unknown word is a word
        n_labels = every.sum(1).tolist()
        masked = [(lp * mask, mask) for mask in (every, words)]
        for pos, k in enumerate(idx):
            _, b, t = (int(x) for x in rows[k])
            tgt = [corpus.tgt[i] for i in range(t, b)]
            bounds = [len(joiner.prefix(tgt[:j], int(first[k]))) for j in range(b - t)] + [n_labels[pos]]
            for j in range(b - t):
                if owner[t + j] == k:
                    span = slice(bounds[j], bounds[j + 1])
                    out[t + j] = tuple(x for lp_m, mask in masked
                                       for x in (float(lp_m[pos, span].sum()), int(mask[pos, span].sum())))
    pick = (lambda s: s) if with_words else (lambda s: s[2:]) if words_only else (lambda s: s[:2])  # noqa: E731
    return [[pick(out[i]) for i in corpus.doc_range(d)] for d in range(corpus.n_docs)]


def context_usage(translator, docs: list[Document], progress: bool = False,
                  max_tokens: int | None = None, origin: str = "reference", in_context: list | None = None) -> dict:
    """How much the model uses its context: conditional cross-mutual information (CXMI,
    docs/methods/discourse.md#context-usage-cxmi), the mean over the word pieces of the
    references of log2 p(y | sentence, context) - log2 p(y | sentence alone). Each reference
    sentence is scored twice by :func:`document_logprobs`: in its document, and as a
    one-sentence document of its own (the same model, so no context at all), both over its word
    pieces only (``words_only``: a format's separators, ``<s>``, ``</s>`` and EOD differ with the
    sentence's place and are left out both ways). 0 for a sentence model; positive when the
    context makes the references more likely. Returns the totals, the share of sentences the
    context made more likely (a sentence whose score does not change counts as not), the CXMI
    by sentence position in the document (1, 2, 3, 4+), and per document the
    ``(with, alone, word pieces)`` triple of every sentence. ``in_context``: the words-only
    scores of ``docs`` in context when already computed (``document_logprobs(with_words=True)``
    gives them beside the full scores in one pass)."""
    kw = dict(progress=progress, max_tokens=max_tokens, origin=origin, words_only=True)
    with_ctx = in_context if in_context is not None else document_logprobs(translator, docs, **kw)
    if [len(d) for d in with_ctx] != [len(d.src) for d in docs]:
        raise ValueError("in_context must hold one score per sentence of docs")
    alone_docs = [Document(f"{d.docid}#{i}", [s], [t]) for d in docs for i, (s, t) in enumerate(zip(d.src, d.tgt))]
    flat = iter(document_logprobs(translator, alone_docs, **kw))
    per_doc = []
    for d_i, d in enumerate(with_ctx):
        sents = []
        for i, (lp, k) in enumerate(d):
            alone, k_alone = next(flat)[0]
            if k_alone != k:   # the same word pieces either way, or the difference means nothing
                raise DataError(f"document {d_i + 1}, sentence {i + 1}: {k} target word pieces in context, "
                                f"{k_alone} alone", origin)
            sents.append((lp, alone, k))
        per_doc.append(sents)
    return usage_totals(per_doc)


def usage_totals(per_doc: list[list[tuple]]) -> dict:
    """:func:`context_usage`'s totals from its per-document ``(with, alone, word pieces)`` triples
    (``docnmt score`` adds chunks scored apart this way)."""
    gain, tokens, better, n = 0.0, 0, 0, 0
    by_pos: dict[str, list[float]] = {}
    for sents in per_doc:
        for i, (lp, alone, k) in enumerate(sents):
            gain, tokens, better, n = gain + lp - alone, tokens + k, better + (lp > alone), n + 1
            pos = by_pos.setdefault(str(i + 1) if i < 3 else "4+", [0.0, 0])
            pos[0], pos[1] = pos[0] + lp - alone, pos[1] + k
    bits = lambda nats, k: nats / max(k, 1) / math.log(2)  # noqa: E731
    return {"cxmi_bits_per_token": bits(gain, tokens), "sentences": n, "tokens": tokens,
            "sentences_more_likely_with_context": better / max(n, 1),
            "cxmi_by_position": {p: bits(g, k) for p, (g, k) in by_pos.items()}, "documents": per_doc}


def attention_entropy(translator, docs: list[Document], progress: bool = False,
                      max_tokens: int | None = None) -> dict:
    """Attention entropy in bits per module kind (docs/methods/discourse.md#attention-entropy:
    head-averaged weights, mean over the real queries of an instance, mean over layers and
    instances) of the model on parallel documents, cut into instances as at test time; also the
    mean self-attention distance in tokens per module kind (``AttentionProbe``), the mean weight
    a query of each encoder/decoder self- and cross-attention kind puts on other sentences than
    its own (``context_share``: 0 for a sentence model and for G-Transformer's group attention;
    for the context encoder's gated context attention, ``enc_context``/``dec_context``, the gate's
    weight on the context) and the teacher-forced NLL in bits/token."""
    if any(d.tgt is None for d in docs):
        raise DataError("attention entropy needs parallel documents (source and target)")
    corpus = Corpus.encode(docs, translator.vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2)
    rows = build_instances(corpus, translator.cfg.data, training=False)
    meter, nll, ntok = EntropyMeter(), 0.0, 0
    for _, batch, lp, probe in teacher_forced(translator, corpus, rows, max_tokens=max_tokens, progress=progress,
                                              desc="entropy", probe=True):
        meter.add(probe, batch, translator.vocab.pad)
        nll -= float(lp.sum())
        ntok += batch["ntokens"]
    return {"instances": len(rows), "nll_bits_per_token": nll / max(ntok, 1) / math.log(2),
            "entropy_bits": meter.result(), "self_distance_tokens": meter.result("distance"),
            "context_share": meter.result("context_share")}


class EntropyMeter:
    """Attention entropy per module kind (docs/methods/discourse.md#attention-entropy): per
    instance the mean over its real (non-pad) queries of the entropy in bits of the head-averaged
    weights, averaged over the layers of that kind and over instances; the same for the
    self-attention distance in tokens and the weight on other sentences (``AttentionProbe``)."""

    def __init__(self):
        self.sums: dict[tuple[str, str], float] = {}
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, probe: AttentionProbe, batch: dict, pad: int) -> None:
        for stat, recorded in (("entropy", probe.entropy), ("distance", probe.distance),
                               ("context_share", probe.context_share)):
            for name, records in recorded.items():
                kind = module_kind(name)
                side = "ctx" if kind.startswith("ctx") else "src" if kind.startswith("enc") else "tgt_in"
                real = batch[side].ne(pad)
                for h in records:
                    if h.shape == (real.size(0), real.size(1) + 1):     # a position the model put first
                        real = torch.nn.functional.pad(real, (1, 0), value=True)   # (DocFlat's MBE mean)
                    elif h.shape != real.shape:  # flat-batch attention (DocFlat): one row of the batch's real tokens
                        real = torch.ones_like(h, dtype=torch.bool)
                    ok = real & ~h.isnan()     # NaN: a query outside every sentence (context share)
                    per_instance = (h.nan_to_num(0.0) * ok).sum(1) / ok.sum(1).clamp_min(1)
                    key = (stat, kind)
                    self.sums[key] = self.sums.get(key, 0.0) + float(per_instance.sum())
                    self.counts[key] = self.counts.get(key, 0) + h.size(0)

    def result(self, stat: str = "entropy") -> dict[str, float]:
        """Per module kind: ``entropy`` in bits, ``distance`` in tokens (self-attention only), or
        ``context_share``, the weight on other sentences (when the probe knew the sentences)."""
        return {k: self.sums[s, k] / self.counts[s, k] for s, k in sorted(self.sums) if s == stat}
