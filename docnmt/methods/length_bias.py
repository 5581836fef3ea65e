"""The length-bias fixes of document-level NMT (docs/methods/length_bias.md), each usable with
any model:

* **dynamic length sampling** (``data.dls``, :data:`DLS`): every epoch, training documents are cut into
  segments of sampled lengths, short ones first, growing over the epochs
  (:func:`training_rows` replaces the mode's fixed instances in training); with
  ``data.dls_adaptive: false`` (the paper's fixed-temperature ablation) the lengths are drawn
  uniformly in every epoch instead;
* **length-aware attention** (``model.length_aware``, :data:`LENGTH_AWARE`): every attention's logits scaled by
  log n / log n̄ (:class:`LengthAwareScale`, the model piece ``length_scale``);
* **sliding decoding** (``decode.sliding``, :data:`SLIDING`) and the sentence-count constraint
  (``decode.sentence_count``): a document longer than the window W (``decode.sliding_window`` ×
  the training instance budget, 0.8 × 512 ≈ 409 source tokens by default) is decoded as a chain
  of sentence windows: each window is re-encoded, the best translation of the sentences it shares
  with the previous window is forced as the target prefix, and only its new sentences are
  generated, so every source sentence is translated exactly once (:class:`Sliding`).
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from .. import ranges
from ..attention import AttnSpec
from ..data import Corpus, ModeConfig, doc_bounds, filter_training_documents, with_sentences
from ..errors import ConfigError
from .base import Extension, Setting, Walk

# --------------------------------------------------------------------------------------------
# Dynamic length sampling
# --------------------------------------------------------------------------------------------

def dls_probabilities(temperature: float, max_length: int) -> np.ndarray:
    """p_T(l) ∝ exp(−l/T) for l = 0 … L−1; T = 0 puts all mass on l = 0
    (docs/methods/length_bias.md#dynamic-length-sampling)."""
    if temperature <= 0:
        p = np.zeros(max_length)
        p[0] = 1.0
        return p
    logits = -np.arange(max_length) / temperature
    p = np.exp(logits - logits.max())
    return p / p.sum()


def dls_temperature(epoch: int, start_epoch: int, adaptive: bool = True) -> float:
    """Epoch 1: T = 0 (sentence level); epoch e ≥ 2: T = exp(e − k) (docs/methods/length_bias.md#lb-temperature).
    Not ``adaptive`` (the fixed-temperature ablation): T = ∞ in every epoch, epoch 1 included, which makes
    p_T uniform over 0 … L−1, as the released code's ``adaptive_sample: false``."""
    if not adaptive:
        return float("inf")
    return 0.0 if epoch <= 1 else float(np.exp(epoch - start_epoch))


def dls_segments(src_costs: np.ndarray, tgt_costs: np.ndarray, start: int, end: int, draw,
                 max_sents: int = 1000) -> list[tuple[int, int]]:
    """Left-to-right segmentation of sentences [start, end) with sampled length budgets
    (docs/methods/length_bias.md#dynamic-length-sampling): draw l; add sentences while both sides
    stay under l; when the next one does not fit a non-empty segment, close it and draw again, so
    a sentence longer than l stands alone.
    Segments never overlap. ``draw()`` returns the next budget."""
    parts, a, src_len, tgt_len, limit = [], start, 0, 0, draw()
    for k in range(start, end):
        fits = src_len + src_costs[k] < limit and tgt_len + tgt_costs[k] < limit and k - a < max_sents
        if not fits and k > a:
            parts.append((a, k))
            a, src_len, tgt_len, limit = k, 0, 0, draw()
        src_len += src_costs[k]
        tgt_len += tgt_costs[k]
    if end > a:
        parts.append((a, end))
    return parts


def dls_instances(corpus: Corpus, epoch: int, seed: int, start_epoch: int, max_length: int,
                  max_sents: int = 1000, marks: int = 1, adaptive: bool = True) -> np.ndarray:
    """Dynamic length sampling: this epoch's segmentation of every training document, drawn
    with p_T(l) at T = dls_temperature(epoch, start_epoch, adaptive) from an RNG seeded by (seed, epoch): the same on
    every process and after a resume. A sentence costs its tokens plus the ``marks`` tokens
    its format adds to it (``Joiner.overhead`` of one sentence: the separator or end token it
    carries; G-Transformer's ``<s> … </s>``)."""
    p = dls_probabilities(dls_temperature(epoch, start_epoch, adaptive), max_length)
    rng = np.random.default_rng([seed, epoch])
    src = corpus.src.lengths + marks
    tgt = src if corpus.tgt is None else corpus.tgt.lengths + marks
    draws = iter(rng.choice(max_length, size=corpus.n_sents + corpus.n_docs, p=p).tolist())
    draw = draws.__next__      # one budget per segment: at most one per sentence plus one per document
    rows = [(a, b, a) for d in range(corpus.n_docs)
            for a, b in dls_segments(src, tgt, *doc_bounds(corpus, d), draw, max_sents)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def training_rows(corpus: Corpus, mode: ModeConfig, epoch: int, seed: int, marks: int) -> np.ndarray:
    """This epoch's training instances under dynamic length sampling (Doc2Doc): the sampled
    segmentation, every sentence pair too with ``mix_sentences``, then the training-document
    filters. ``marks``: the tokens the data format adds to each sentence. A model fine-tuned
    from a sentence-level one has the curriculum's first (sentence-level) epochs behind it:
    ``mode.dls_epoch_offset`` = k makes epoch e sample as epoch e + k."""
    if mode.max_instance_tokens <= 0:
        raise ConfigError("data.dls samples segment lengths below data.max_instance_tokens: set it "
                          f"above 0 for training (it is {mode.max_instance_tokens}, whole documents)")
    rows = dls_instances(corpus, epoch + mode.dls_epoch_offset, seed, mode.dls_start_epoch, mode.max_instance_tokens,
                         mode.max_instance_sents, marks=marks, adaptive=mode.dls_adaptive)
    return filter_training_documents(corpus, with_sentences(corpus, rows, mode), mode)


def uses_dls(mode: ModeConfig) -> bool:
    return mode.dls and mode.mode == "doc2doc"


def format_marks(separator: str) -> int:
    """Tokens a data format adds to each source sentence (a separator or end token; ``<s>`` and
    ``</s>`` in G-Transformer's), which dynamic length sampling counts."""
    from . import joiner_class  # the registry knows every format, the methods' included
    return int(joiner_class(separator).overhead(1, "src"))


def _dls_rows(corpus: Corpus, mode: ModeConfig, epoch: int, seed: int) -> np.ndarray | None:
    return training_rows(corpus, mode, epoch, seed, format_marks(mode.separator)) if uses_dls(mode) else None


def _dls_plots(cfg, corpus: Corpus, save_dir: Path, epoch: int) -> None:
    if uses_dls(cfg.data):
        plot_dls_lengths(corpus, cfg.data, cfg.train.seed, epoch, Path(save_dir) / "dls_lengths.png",
                         format_marks(cfg.data.separator))


def plot_dls_lengths(corpus: Corpus, mode: ModeConfig, seed: int, last_epoch: int, path: Path, marks: int,
                     curves: int = 8) -> None:
    """dls_lengths.png: the distribution of training segment lengths (source tokens) in up to
    ``curves`` epochs from 1 to ``last_epoch`` (the paper's Figures 2 and 6). The segmentations
    are recomputed: they depend only on (seed, epoch)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    csum = np.concatenate([[0], np.cumsum(corpus.src.lengths + marks)])
    epochs = sorted(set(np.linspace(1, max(1, last_epoch), min(curves, max(1, last_epoch))).round().astype(int)))
    fig, ax = plt.subplots(figsize=(6, 4))
    bins = np.linspace(0, mode.max_instance_tokens, 33)
    for e in epochs:
        rows = training_rows(corpus, replace(mode, mix_sentences=False), int(e), seed, marks)
        lengths = csum[rows[:, 1]] - csum[rows[:, 0]]
        t = dls_temperature(int(e) + mode.dls_epoch_offset, mode.dls_start_epoch, mode.dls_adaptive)
        ax.hist(lengths, bins=bins, histtype="step", density=True,
                label=f"epoch {e} (T={t:.3g}, mean {lengths.mean():.0f})")
    ax.set_xlabel("segment length (source tokens)")
    ax.set_ylabel("density")
    ax.set_yscale("log")
    ax.set_title("dynamic length sampling" + ("" if mode.dls_adaptive else ", fixed T = ∞ (uniform budgets)"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Length-aware attention
# --------------------------------------------------------------------------------------------

class LengthAwareScale(nn.Module):
    """Length-aware attention (docs/methods/length_bias.md#length-aware-attention): every
    attention's logits are multiplied by
    λ = max(log n, 0.1) / log n̄, n being the length a query can see -- the instance's source
    length in encoder self- and cross-attention, min(t, target length) for the decoder query at
    1-based position t -- and n̄ the mean of the current epoch's training instances (source
    length; half the target length for decoder self-attention). n̄ lives in buffers saved with
    the weights, refreshed by the trainer every epoch, so decoding uses the final epoch's."""

    def __init__(self):
        super().__init__()
        self.register_buffer("log_mean_src", torch.tensor(1.0))
        self.register_buffer("log_mean_tgt", torch.tensor(1.0))

    def set_training_lengths(self, mean_src: float, mean_tgt: float) -> None:
        self.log_mean_src.fill_(math.log(max(mean_src, 2.0)))
        self.log_mean_tgt.fill_(math.log(max(mean_tgt / 2, 2.0)))

    @staticmethod
    def _scale(spec: AttnSpec, lam: Tensor) -> None:
        spec.scale = lam if spec.scale is None else spec.scale * lam

    def encoder(self, specs: dict[str, AttnSpec], src: Tensor, src_pad: Tensor) -> None:
        lam = self.src_lambda(src_pad)
        for kind, spec in specs.items():
            if kind.startswith("enc"):
                self._scale(spec, lam)

    def src_lambda(self, src_pad: Tensor) -> Tensor:
        n = (~src_pad).sum(1).float()
        return (n.log().clamp_min(0.1) / self.log_mean_src)[:, None, None, None]   # (B, 1, 1, 1)

    def decoder(self, specs: dict[str, AttnSpec], tgt: Tensor, src_pad: Tensor, offset: int, pad_id: int) -> None:
        t = torch.arange(offset + 1, tgt.size(1) + 1, device=tgt.device, dtype=torch.float32)
        n = torch.minimum(t[None, :], tgt.ne(pad_id).sum(1, keepdim=True).float())      # (B, nq)
        lam_self = (n.log().clamp_min(0.1) / self.log_mean_tgt)[:, None, :, None]     # (B, 1, nq, 1)
        lam_src = self.src_lambda(src_pad)
        for kind, spec in specs.items():
            self._scale(spec, lam_self if kind.startswith("dec_self") else lam_src)


# --------------------------------------------------------------------------------------------
# Sliding decoding
# --------------------------------------------------------------------------------------------

def sliding_windows(costs: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Sentence windows [a, b) over sentences with token ``costs`` (steps 1-2 of
    docs/methods/length_bias.md#sliding-decoding).

    The first window holds the sentences that end within the first ``budget`` tokens; then
    each step advances the end by at least one sentence, drops the oldest sentences until the
    window fits, and extends it greedily while it fits. A sentence longer than the budget forms
    its own window (decoded without context), a choice where the code would skip it."""
    n = len(costs)
    csum = np.concatenate([[0], np.cumsum(costs)])
    size = lambda a, b: int(csum[b] - csum[a])  # noqa: E731
    if size(0, n) <= budget:
        return [(0, n)]
    b = 0
    while b < n and size(0, b + 1) <= budget:
        b += 1
    a, b = 0, max(b, 1)
    windows = []
    while True:
        windows.append((a, b))
        if b >= n:
            return windows
        b += 1
        while size(a, b) > budget and a < b - 1:
            a += 1
        while b < n and size(a, b + 1) <= budget:
            b += 1


class SentenceCount:
    """The length-bias generator's sentence-count constraint for separator formats: among the
    separators only the next one (``<sep{c+1}>``, or ``<sep>``) is allowed while fewer than N−1
    were produced, none afterwards, and the end token only once there are N−1; when the steps
    left up to the row's length limit (whose token is the end token) only fit the missing
    separators and the end, the next separator is forced (docs/methods/length_bias.md#sliding-decoding). Counts
    include a forced prefix. ``n_sents`` (B,) is each input row's number of sentences."""

    def __init__(self, n_sents: Tensor, sep_ids: list[int], next_sep: Tensor, end: int):
        self.n_sents, self.end = n_sents, end
        self.seps = torch.tensor(sorted(sep_ids), device=n_sents.device)
        self.next_sep = next_sep        # [c] = token id of the separator that follows c separators

    def __call__(self, step: int, tokens: Tensor, lprobs: Tensor, rows: Tensor, limit: Tensor) -> None:
        count = torch.isin(tokens, self.seps).sum(1)
        missing = self.n_sents[rows] - count              # separators still to come, and the end
        more = (missing > 1).nonzero().squeeze(1)
        nxt = self.next_sep[count[more].clamp(max=len(self.next_sep) - 1)]
        keep = lprobs[more, nxt].clone()
        short = more[limit[more] - step + 1 <= missing[more]]   # steps left = marks missing
        lprobs[short] = float("-inf")
        lprobs[:, self.seps] = float("-inf")
        lprobs[more, nxt] = keep
        lprobs[more, self.end] = float("-inf")


class Sliding(Walk):
    """Sliding decoding: round r holds every document's r-th window; sentences of a window that
    the previous window translated are forced (see module doc)."""

    cuts_documents = True

    def rounds(self, translator, corpus, search):
        data = translator.cfg.data
        costs = corpus.src.lengths + translator.joiner.overhead(np.ones(1, dtype=np.int64), "src")
        budget = int(search.sliding_window * data.max_instance_tokens)
        if budget <= 0:
            raise ConfigError("sliding decoding needs a window: the instance budget "
                              f"(--max-instance-tokens {data.max_instance_tokens}) times "
                              f"--sliding-window {search.sliding_window} is not a positive number of tokens")
        per_doc = []
        for d in range(corpus.n_docs):
            a0, b0 = int(corpus.doc_offsets[d]), int(corpus.doc_offsets[d + 1])
            wins = sliding_windows(costs[a0:b0], budget)
            per_doc.append([(a0 + a, a0 + b, a0 + (wins[i - 1][1] if i else a)) for i, (a, b) in enumerate(wins)])
        rounds = []
        for r in range(max(map(len, per_doc), default=0)):
            wins = np.asarray([w[r] for w in per_doc if len(w) > r], dtype=np.int64)
            rounds.append((np.stack([wins[:, 0], wins[:, 1], wins[:, 0]], 1), wins[:, 2].copy()))
        return rounds


def uses_sliding(cfg, search) -> bool:
    return search.sliding and cfg.data.is_document_level


def _sliding_walk(cfg, search) -> Walk | None:
    return Sliding() if uses_sliding(cfg, search) else None


def count_constraint(translator, rows: np.ndarray):
    """The sentence-count constraint of the rows' instances for separator formats, or None
    (G-Transformer's frame already fixes the count)."""
    joiner, device = translator.joiner, translator.device
    if not joiner.sep_ids:
        return None
    n = torch.as_tensor(rows[:, 1] - rows[:, 2], device=device)
    next_sep = torch.tensor([joiner.sep(c) for c in range(1, int(n.max()) + 1)], device=device)
    return SentenceCount(n, sorted(joiner.sep_ids), next_sep, joiner.end)


def _count_args(translator, search, rows: np.ndarray, src: Tensor) -> dict | None:
    """``decode.sentence_count`` (implied by sliding decoding): the sentence-count constraint."""
    if not (search.sentence_count or search.sliding):
        return None
    count = count_constraint(translator, rows)
    return None if count is None else {"processors": [count]}


def _length_aware(model, cfg, vocab) -> None:
    if cfg.model.length_aware:
        model.add_piece("length_scale", LengthAwareScale())


# --------------------------------------------------------------------------------------------
# The switches (registered in docnmt/methods/__init__.py)
# --------------------------------------------------------------------------------------------

DLS = Extension(name="dls", training_rows=_dls_rows, plots=_dls_plots, settings=(
    Setting("data.dls", False, "doc2doc: training segments resampled every epoch (dynamic length sampling)",
            "--dls"),
    Setting("data.dls_start_epoch", 20, "dynamic length sampling's temperature T = exp(epoch - k): this k",
            "--dls-start-epoch"),
    Setting("data.dls_adaptive", True, "false: T = inf in every epoch, segment lengths drawn uniformly (the "
            "fixed-temperature ablation)"),
    Setting("data.dls_epoch_offset", 0, "epochs of the DLS curriculum already behind a fine-tuned model: epoch e "
            "samples as e + this", limit=ranges.AT_LEAST_0),
))

LENGTH_AWARE = Extension(name="length_aware", model_pieces=_length_aware, settings=(
    Setting("model.length_aware", False, "length-aware attention (logits x log n / log mean n)", "--length-aware"),
))

SLIDING = Extension(name="sliding", walk=_sliding_walk, search_args=_count_args, settings=(
    Setting("decode.sliding", False, "Doc2Doc: sliding decoding of documents longer than the window", "--sliding"),
    Setting("decode.sliding_window", 0.8, "sliding window as a share of the training instance budget",
            "--sliding-window", limit=ranges.FINITE_ABOVE_0),
    Setting("decode.sentence_count", False, "force the source's sentence count (separator formats)",
            "--sentence-count"),
))

EXTENSIONS = (DLS, LENGTH_AWARE, SLIDING)
