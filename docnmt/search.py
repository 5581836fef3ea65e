"""Batched beam search (and greedy search, beam 1) with a key/value cache.

One search for every method. Its extension points:

* ``prefix``: target tokens forced at the start of each hypothesis (sliding decoding and
  two-pass decoding force an already translated context); an end token among them, such as a
  context sentence's ``</s>``, does not end the hypothesis. The first ``min(len(prefix))`` forced
  tokens go through the decoder in one pass, once per input rather than once per beam (a
  model's incremental decoding must give the same states for a multi-token first step as step
  by step, and its cache must survive :meth:`DecoderCache.expand`: tested for every method);
* ``processors``: callables ``f(step, tokens, lprobs, rows, limit)`` that edit the
  log-probabilities of the next token in place, ``tokens`` being each hypothesis' prefix (``<s>``
  first), ``rows`` the index of the input sentence each row belongs to and ``limit`` each row's
  last step, where only the end token is left (finite-state constraints such as G-Transformer's
  sentence frame, the length-bias sentence count and :class:`NoRepeatNgram`);
* ``banned``: token ids never generated (pad, ``<s>``, ``<mask>``, …).

Scores follow fairseq: sum of token log-probabilities divided by ``length ** lenpen`` (or GNMT's
``((5 + length) / 6) ** lenpen`` with ``lenpen_style: gnmt``, docs/methods/context_transformer.md#decoding) with the
length counting ``</s>``; a sentence is finished once ``beam`` hypotheses have ended, and it is
then dropped from the batch so the remaining sentences run faster. A forced prefix is context,
not output: its tokens cost nothing and do not count in the length, so only the generated part
is normalised (sliding decoding "beam-searches only the new sentences", docs/methods/length_bias.md#sliding-decoding;
two-pass decoding only the current one, docs/methods/docflat.md#decoding-two-passes-batch-by-batch), and
a long prefix does not weaken the length penalty.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

from .decoder_state import DecoderCache, StaticDecoderCache, bucket
from .model import Transformer
from .ops import decoding_mode


@dataclass
class SearchConfig:
    beam: int = 5
    lenpen: float = 1.0
    lenpen_style: str = "fairseq"   # fairseq: length ** lenpen | gnmt: ((5 + length) / 6) ** lenpen
    max_len_a: float = 1.2
    max_len_b: int = 10
    min_len: int = 1
    nbest: int = 1
    no_repeat_ngram_size: int = 0   # > 0: no n-gram of word pieces twice in a hypothesis (NoRepeatNgram)
    static_cache: bool = False      # self-attention keys/values preallocated for the longest output, written in
                                    # place (StaticDecoderCache; same beams; for GPUs: docs/performance.md)
    compile_step: str = ""          # torch.compile the step's output layer in this mode for row buckets (default |
                                    # reduce-overhead: CUDA graphs | max-autotune; "" = eager; docs/performance.md)
    fallback: str = "auto"          # sentences a document output lost (empty or merged) translated again, each
                                    # alone: auto (on where a model can lose them) | sentence | none (fallback.py)
    fallback_model: str = ""        # ... by this sentence model (a directory) instead of the model in sentence mode


LENPEN_STYLES = ("fairseq", "gnmt")
COMPILE_MODES = ("", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")   # "": eager
COMPILE_LIMIT = (lambda v: v in COMPILE_MODES, "empty (eager) or " + ", ".join(COMPILE_MODES[1:]))   # config LIMITS
FALLBACKS = ("auto", "sentence", "none")
FALLBACK_LIMIT = (lambda v: v in FALLBACKS, "auto, sentence or none")


@dataclass
class Hypothesis:
    tokens: list[int]   # generated tokens after the forced prefix, without </s>
    score: float        # length-normalised log-probability


Processor = Callable[[int, Tensor, Tensor, Tensor, Tensor], None]


def with_processor(extra: dict, proc: Processor) -> dict:
    """``beam_search`` keyword arguments ``extra`` with ``proc`` appended to their processors."""
    return {**extra, "processors": [*extra.get("processors", []), proc]}


class NoRepeatNgram:
    """fairseq's ``--no-repeat-ngram-size``: a hypothesis never produces an ``n``-gram it already
    contains (the tokens that would complete one get -inf). Unlike fairseq, only n-grams made of
    word pieces count, ids in ``[words[0], words[1])``: an n-gram with a special token (``<s>``,
    ``</s>``, a separator) is never blocked, so sentence frames and separators are untouched and
    "<sep> Das ist" may start two sentences. The hypothesis includes its forced prefix, as in
    fairseq: sliding decoding blocks what whole-document decoding would block."""

    def __init__(self, n: int, words: tuple[int, int]):
        if n < 1:
            raise ValueError(f"no-repeat n-gram size must be at least 1, not {n}")
        self.n, self.words = n, words

    def __call__(self, step: int, tokens: Tensor, lprobs: Tensor, rows: Tensor, limit: Tensor) -> None:
        n = self.n
        if tokens.size(1) < n:
            return
        grams = tokens.unfold(1, n, 1)                           # (rows, windows, n): every n-gram so far
        tail = tokens[:, tokens.size(1) - n + 1:]                # the n-1 tokens a new n-gram starts with
        hit = (grams[:, :, :-1] == tail[:, None, :]).all(-1)
        hit &= ((grams >= self.words[0]) & (grams < self.words[1])).all(-1)
        row, win = hit.nonzero(as_tuple=True)
        lprobs[row, grams[row, win, -1]] = float("-inf")


@decoding_mode
def beam_search(model: Transformer, src: Tensor, cfg: SearchConfig, bos: int | Tensor, eos: int,
                banned: Sequence[int] = (), prefix: list[list[int]] | None = None,
                processors: Sequence[Processor] = (), max_len: Tensor | None = None,
                inputs: dict | None = None, sentences: Tensor | None = None) -> list[list[Hypothesis]]:
    """Translate a padded source batch ``src`` (B, S); returns ``nbest`` hypotheses per row.
    ``bos`` is the decoder's start token, or one per row (B,).
    Each row's output is at most ``max_len_a · |src| + max_len_b · sentences`` tokens long after its
    forced prefix: ``sentences`` (B,) counts the sentences a row translates (default 1), so a
    document instance gets what its sentences would get alone (see :func:`output_limit`);
    ``max_len`` (B,) replaces that limit; ``inputs`` are the model's other inputs (a context batch)."""
    B, K, device = src.size(0), cfg.beam, src.device
    enc = model.encode(src, **(inputs or {}))
    rules = _Rules.of(cfg, eos, (~enc.pad).sum(1), prefix, processors, banned, max_len, sentences)
    rules.head = CompiledHead.of(model, cfg.compile_step) if cfg.compile_step else None
    max_len, forced, last = rules.max_len, rules.forced, int(rules.max_len.max())

    tokens = torch.as_tensor(bos, dtype=torch.long, device=device).expand(B).repeat_interleave(K)[:, None]
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0                                                # all beams start identical
    cache = decoder_cache(cfg, B * K, last + 1)
    finished = _Finished(B, K, rules.pre_host, device)
    alive = torch.arange(B, device=device)                            # sentences still searched

    # the forced prefix all rows share in length (the shortest) goes through the decoder in one
    # pass: the same states as step by step (it is forced at no cost), without a step per token;
    # the beams of an input are identical until it ends, so this pass runs once per input and
    # the cache is then copied to the beams (its last token is fed by the first step below)
    start = min(rules.pre_host) if forced is not None else 0
    if start:
        tokens = torch.cat([tokens, forced[:, :start].repeat_interleave(K, 0)], dim=1)
        _prefill(model, tokens[::K, :start], enc, cache, K)
    one = start == 0 and K > 1 and not processors      # the first step's beams are identical: run it once per input
    enc_inputs, enc = enc, enc.expand_beams(K)
    for step in range(start, last + 1):
        n = alive.numel()
        if one and step == 0:
            lprobs = _first_step(model, rules, tokens[::K], enc_inputs, cache, alive, K)
        else:
            hidden = model.decode(tokens, enc, cache)[:, -1]
            lprobs = rules.next_lprobs(model, hidden, tokens, step, alive.repeat_interleave(K))
        V = lprobs.size(1)
        cand = (scores[:, :, None] + lprobs.view(n, K, V)).view(n, K * V)
        top_scores, top_idx = cand.topk(2 * K, dim=1)
        top_beam, top_tok = top_idx // V, top_idx % V
        ends = rules.ends(alive, step, top_tok)
        cont_scores, src_rows, new_tok, dead = _continuations(top_scores, top_beam, top_tok, ends, K)
        keep = finished.add(tokens, alive, step, ends, top_scores, top_beam, rules, dead)
        if keep.numel() == 0:
            break
        order = src_rows[keep].view(-1)
        tokens = torch.cat([tokens.index_select(0, order), new_tok[keep].view(-1, 1)], dim=1)
        scores = cont_scores[keep]
        alive = alive[keep]
        static = None
        if keep.numel() < n:    # whole inputs finished: drop their rows from the static state too
            static = (keep[:, None] * K + torch.arange(K, device=device)).view(-1)
            enc = enc.select(static)
        cache.reorder(order, static, K)
    return finished.best(cfg.nbest)


def decoder_cache(cfg: SearchConfig, rows: int, positions: int) -> DecoderCache:
    """The cache of one search of ``rows`` decoder rows and ``positions`` target positions: a
    :class:`DecoderCache` that may forget what no later query sees (the search's rows never feed a
    tag-0 token after the start: an ended hypothesis leaves its row), or with ``cfg.static_cache``
    a :class:`StaticDecoderCache` of rows and positions rounded up to buckets (with room for the
    positions a model adds before the tokens: a language code, DocFlat's mean token)."""
    if not cfg.static_cache:
        return DecoderCache(forgets=True)
    return StaticDecoderCache(bucket(rows), bucket(positions + POSITION_SLACK, smallest=32))


POSITION_SLACK = 2      # decoder positions a model may feed besides the tokens (see decoder_cache)
_HEADS: "weakref.WeakKeyDictionary[Transformer, dict[str, CompiledHead]]" = weakref.WeakKeyDictionary()


class CompiledHead:
    """The step's output layer and log-softmax (hidden states -> fp32 log-probabilities) compiled
    with ``torch.compile`` in ``mode`` for fixed shapes: the rows are padded up to a bucket
    (:func:`bucket`), so a run compiles once per bucket, not once per batch or per step, and
    ``reduce-overhead`` can replay it as a CUDA graph. Not bit-identical to the eager layer (the
    compiled kernels sum in their own order)."""

    def __init__(self, model: Transformer, mode: str):
        self.model = model
        self.fn = torch.compile(self._head, mode=mode, dynamic=False)

    @classmethod
    def of(cls, model: Transformer, mode: str) -> "CompiledHead":
        """The model's compiled head in ``mode``, made once (its graphs then serve every search)."""
        heads = _HEADS.setdefault(model, {})
        if mode not in heads:
            heads[mode] = cls(model, mode)
        return heads[mode]

    def _head(self, hidden: Tensor) -> Tensor:
        return torch.log_softmax(self.model.output_projection(hidden).float(), dim=-1)

    def __call__(self, hidden: Tensor) -> Tensor:
        n = hidden.size(0)
        padded = hidden.new_zeros(bucket(n, smallest=8), hidden.size(1))
        padded[:n] = hidden
        return self.fn(padded)[:n].clone()       # a copy: a CUDA graph's output is overwritten by its next replay


class _Finished:
    """The hypotheses that ended, per input. What the search needs every step stays on the
    device (how many each input has); the hypotheses themselves are gathered there and read
    to the host once, at the end: one transfer per step (which rows go on, which candidates
    end) instead of one per hypothesis and per input."""

    def __init__(self, B: int, K: int, pre_len: list[int], device):
        self.K, self.pre_len, self.hyps = K, pre_len, [[] for _ in range(B)]
        self.count = torch.zeros(B, dtype=torch.long, device=device)
        self.pending: list[tuple[list[int], Tensor, Tensor]] = []      # (inputs, token rows, scores)
        self.alive = list(range(B))

    def add(self, tokens: Tensor, alive: Tensor, step: int, ends: Tensor, top_scores: Tensor, top_beam: Tensor,
            rules: "_Rules", dead: Tensor) -> Tensor:
        """Keep the candidates that end here (only among the K best, as fairseq does; the first
        ones while an input has fewer than K); returns the rows of the inputs that go on."""
        K = self.K
        is_eos = ends & torch.isfinite(top_scores)
        is_eos[:, K:] = False
        take = is_eos & (is_eos.cumsum(1) <= (K - self.count[alive])[:, None])
        self.count[alive] += take.sum(1)
        done = dead | (self.count[alive] >= K)
        n = done.numel()
        flags = torch.cat([done, take.view(-1)]).tolist()                # the step's one device->host read
        taken = [f for f in range(2 * K * n) if flags[n + f]]
        if taken:
            at = torch.tensor(taken, device=tokens.device)
            i, j = at // (2 * K), at % (2 * K)
            length = (step + 1 - rules.pre_len[alive[i]]).clamp(min=1).float()   # generated, </s> included
            norm = top_scores[i, j] / length_penalty(length, rules.cfg)
            self.pending.append(([self.alive[f // (2 * K)] for f in taken],
                                 tokens.index_select(0, i * K + top_beam[i, j]), norm))
        keep = [i for i in range(n) if not flags[i]]
        self.alive = [self.alive[i] for i in keep]
        return torch.tensor(keep, dtype=torch.long, device=tokens.device)

    def best(self, nbest: int) -> list[list[Hypothesis]]:
        for inputs, rows, norm in self.pending:
            for s, row, score in zip(inputs, rows.tolist(), norm.tolist()):
                self.hyps[s].append(Hypothesis(row[1 + self.pre_len[s]:], score))
        return [sorted(f, key=lambda h: -h.score)[:nbest] for f in self.hyps]


class _Rules:
    """What stays fixed during one search, and the two steps that apply it: the next token's
    log-probabilities under the constraints, and which candidates end."""

    def __init__(self, cfg: SearchConfig, eos: int, pre_len: list[int], max_len: Tensor, forced: Tensor | None,
                 processors: Sequence[Processor], banned: Tensor):
        self.cfg, self.eos, self.pre_host, self.max_len = cfg, eos, pre_len, max_len
        self.pre_len = torch.tensor(pre_len, device=max_len.device)
        self.forced, self.processors, self.banned = forced, processors, banned
        self.head = None        # the output layer (None: the model's, eager; or a CompiledHead)

    @classmethod
    def of(cls, cfg: SearchConfig, eos: int, src_len: Tensor, prefix: list[list[int]] | None,
           processors: Sequence[Processor], banned: Sequence[int], max_len: Tensor | None,
           sentences: Tensor | None) -> "_Rules":
        """The rules of :func:`beam_search`'s arguments (each row's length limit after its prefix)."""
        B, device = src_len.size(0), src_len.device
        pre_host = [len(p) for p in prefix] if prefix else [0] * B
        pre_len = torch.tensor(pre_host, device=device)
        if max_len is None:
            max_len = output_limit(src_len, cfg, sentences)
        # not capped at the training positions: the sinusoidal table grows, and a whole document
        # (G-Transformer's frame, --max-instance-tokens 0) may need more target positions than that
        max_len = torch.maximum(max_len.to(device) + pre_len, pre_len + 1)   # room for a forced prefix
        return cls(cfg, eos, pre_host, max_len, _prefix_tensor(prefix, B, device), processors,
                   torch.tensor(sorted(set(banned) - {eos}), dtype=torch.long, device=device))

    def next_lprobs(self, model: Transformer, hidden: Tensor, tokens: Tensor, step: int, rows: Tensor) -> Tensor:
        """Log-probabilities of the next token of every hypothesis (``rows``: its input's index):
        banned tokens, the processors, the minimum length, the length limit (where only the end
        token is left, at what it costs) and the forced prefix applied (without reading the
        device, except while a prefix is forced)."""
        eos, inf = self.eos, float("-inf")
        forcing = self.forced is not None and step < max(self.pre_host)
        lprobs = _next_lprobs(model, hidden, step < self.pre_len[rows] if forcing else None, self.head)
        eos_lprob = lprobs[:, eos].clone()        # what ending costs when the length limit forces it
        lprobs[:, self.banned] = inf
        lim = self.max_len[rows]
        for proc in self.processors:
            proc(step, tokens, lprobs, rows, lim)
        lprobs[:, eos].masked_fill_(self.pre_len[rows] + self.cfg.min_len > step, inf)
        at_max = step >= lim
        lprobs.masked_fill_(at_max[:, None], inf)
        lprobs[:, eos] = torch.where(at_max, eos_lprob, lprobs[:, eos])
        if forcing:
            _force_prefix(lprobs, self.forced[rows], step)
        return lprobs

    def ends(self, alive: Tensor, step: int, top_tok: Tensor) -> Tensor:
        """Which candidates end: an end token after the prefix (an end token the prefix forces,
        a context sentence's ``</s>``, ends nothing)."""
        return (top_tok == self.eos) & (step >= self.pre_len[alive])[:, None]


def _continuations(top_scores: Tensor, top_beam: Tensor, top_tok: Tensor, ends: Tensor, K: int):
    """The K best candidates of each input that did not end: their scores, the hypothesis rows
    they extend, their tokens, and which inputs have none left."""
    cont_scores, pick = top_scores.masked_fill(ends, float("-inf")).topk(K, dim=1)
    n = top_scores.size(0)
    src_rows = torch.arange(n, device=top_scores.device)[:, None] * K + top_beam.gather(1, pick)
    new_tok = top_tok.gather(1, pick)
    # ranks left without a finite candidate (while a prefix is forced, all but rank 0) repeat
    # rank 0 rather than carry arbitrary tokens: they can never win, but models whose rows
    # see each other (DocFlat's decoder FBA, rank r of every input: docs/methods/docflat.md#df-beams)
    # attend to them
    dead = ~torch.isfinite(cont_scores)
    src_rows = torch.where(dead, src_rows[:, :1], src_rows)
    new_tok = torch.where(dead, new_tok[:, :1], new_tok)
    return cont_scores, src_rows, new_tok, dead.all(1)


def _first_step(model: Transformer, rules: "_Rules", tokens: Tensor, enc, cache: DecoderCache, alive: Tensor,
                beams: int) -> Tensor:
    """The first step's log-probabilities for every beam, computed once per input (``tokens``:
    one row per input) and repeated: the beams are identical until then (as in :func:`_prefill`),
    so the decoder and the output layer run on 1/beams of the rows."""
    hidden = model.decode(tokens, enc, cache)[:, -1]
    cache.expand(torch.arange(tokens.size(0), device=tokens.device).repeat_interleave(beams))
    return rules.next_lprobs(model, hidden, tokens, 0, alive).repeat_interleave(beams, 0)


def _prefill(model: Transformer, tokens: Tensor, enc, cache: DecoderCache, beams: int) -> None:
    """Feed the shared forced prefix ``tokens`` (one row per input) through the decoder once and
    copy the cache to every beam. (Without it, the first step below would feed the prefix once
    per beam: the same states, more work.)"""
    model.decode(tokens, enc, cache)
    cache.expand(torch.arange(tokens.size(0), device=tokens.device).repeat_interleave(beams))


def _next_lprobs(model: Transformer, hidden: Tensor, forced: Tensor | None, head: CompiledHead | None = None) -> Tensor:
    """Log-probabilities of the next token (through ``head``, default the model's output layer);
    rows whose next token the prefix forces (``forced``, None: none) skip the output layer
    (-inf: :func:`_force_prefix` sets them)."""
    if head is None:
        def head(h):
            return torch.log_softmax(model.output_projection(h).float(), dim=-1)
    if forced is None or not forced.any():
        return head(hidden)
    out = hidden.new_full((hidden.size(0), model.cfg.vocab_size), float("-inf"),
                          dtype=torch.float32)
    free = (~forced).nonzero().squeeze(1)
    if free.numel():
        out[free] = head(hidden[free])
    return out


def output_limit(src_len: Tensor, cfg: SearchConfig, sentences: Tensor | None = None) -> Tensor:
    """The most tokens a row may generate: ``max_len_a · |src| + max_len_b`` per sentence it
    translates. For one sentence this is fairseq's ``a · |src| + b``; for a document instance of N
    sentences, ``a · |src| + b · N`` (as G-Transformer's official generator counts it), the sum
    of its sentences' own limits. A single ``b`` for a whole instance would cut the last sentences
    of most documents in a language pair whose translations are longer than ``a`` times the
    source (docs/methods/baselines.md#decoding-document-instances)."""
    per_sentence = cfg.max_len_b if sentences is None else cfg.max_len_b * sentences.to(src_len.device).float()
    return (cfg.max_len_a * src_len.float() + per_sentence).long()


def length_penalty(length, cfg: SearchConfig):
    """The divisor of a hypothesis' summed log-probability (``length``: int or tensor)."""
    if cfg.lenpen_style == "gnmt":
        return ((5 + length) / 6) ** cfg.lenpen
    if cfg.lenpen_style != "fairseq":
        raise ValueError(f"unknown lenpen_style {cfg.lenpen_style!r}; choose one of {', '.join(LENPEN_STYLES)}")
    return length ** cfg.lenpen


def _prefix_tensor(prefix: list[list[int]] | None, B: int, device) -> Tensor | None:
    if not prefix or not any(prefix):
        return None
    width = max(len(p) for p in prefix)
    out = torch.full((B, width), -1, dtype=torch.long, device=device)
    for i, p in enumerate(prefix):
        out[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    return out


def _force_prefix(lprobs: Tensor, forced: Tensor, step: int) -> None:
    """Rows whose prefix is not exhausted may only produce the prefix token (at no cost)."""
    if step >= forced.size(1):
        return
    tok = forced[:, step]
    rows = (tok >= 0).nonzero().squeeze(1)
    if rows.numel():
        lprobs[rows] = float("-inf")
        lprobs[rows, tok[rows]] = 0.0
