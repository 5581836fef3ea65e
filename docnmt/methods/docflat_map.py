"""``docnmt fba-map``: where DocFlat's encoder flat-batch attention looks, aggregated to sentence
pairs (docs/methods/docflat.md), and its plot. Analysis of a trained model, kept apart from the
model's own module."""
from __future__ import annotations

import torch
from torch import Tensor

from ..attention import attention_weights
from ..data import Corpus, InstanceSet, build_instances
from ..errors import ConfigError
from ..model import State
from .docflat import FlatBatchSublayer, flatten_batch


@torch.no_grad()
def sentence_attention_map(translator, doc, start: int = 0, batch: int = 16) -> tuple[Tensor, list[int]]:
    """The encoder FBA of one decoding batch -- the pseudo-documents of sentences
    [start, start + batch) of ``doc`` -- aggregated to sentences: cell (i, j) is the mean of the
    head-averaged attention weights from the tokens of sentence i to those of sentence j, over
    every copy of them in the batch's pseudo-documents. Returns the map and the (1-based)
    sentence numbers of its rows and columns."""
    model, joiner = translator.model, translator.joiner
    sub = model.encoder.layers[0].inserted["0"] if "0" in model.encoder.layers[0].inserted else None
    if not isinstance(sub, FlatBatchSublayer):
        raise ConfigError("the model has no encoder flat-batch attention "
                          "(a DocFlat model with flat_sides both or encoder)")
    corpus = Corpus.encode([doc], translator.vocab, max_sentence_tokens=model.cfg.max_positions - 2)
    rows = build_instances(corpus, translator.cfg.data, training=False)[start: start + batch]
    if not len(rows):
        raise ConfigError(f"the document has {corpus.n_sents} sentences; nothing starts at sentence {start + 1}")
    iset = InstanceSet(corpus, rows, joiner)
    src = iset.collate(list(range(len(rows))))["src"].to(translator.device)
    sent_of = torch.zeros(src.shape, dtype=torch.long)             # the sentence each source token belongs to
    for k, (a, b, _) in enumerate(rows.tolist()):
        sents = [corpus.src[i] for i in range(a, b)]
        ends = [len(joiner.source(sents[: j + 1], int(iset.first[k]))) for j in range(len(sents))]
        sent_of[k] = b - 1                                         # the end token, and pads (dropped)
        for j in reversed(range(len(sents))):
            sent_of[k, : ends[j]] = a + j
    x = model.embed_source(src, {})                               # (eval mode: no dropout)
    if sub.pre_norm:                                               # a pre-LN sublayer attends over LN(x)
        x = sub.norm(x)
    pad = src.eq(model.cfg.pad_id)
    flat, idx = flatten_batch(x, pad)
    q, k, _ = sub.attn._split(sub.attn.project(flat, slice(0, 3))).chunk(3, dim=1)
    spec = sub.flat_spec(x, idx, State(model.policy.encoder_specs(src, pad)))
    w = attention_weights(q, k, spec)[0].mean(0).cpu()               # (T, T)
    owner = sent_of.reshape(-1)[idx.cpu()]
    first, last = int(rows[:, 0].min()), int(rows[:, 1].max())
    onehot = torch.nn.functional.one_hot(owner - first, last - first).float()     # (T, S)
    sums = onehot.t() @ w @ onehot
    counts = onehot.sum(0)
    return sums / (counts[:, None] * counts[None, :]).clamp_min(1), list(range(first + 1, last + 1))


def plot_attention_map(weights: Tensor, sentences: list[int], path, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 5))
    im = ax.imshow(weights.numpy(), cmap="viridis")
    ticks = range(0, len(sentences), max(1, len(sentences) // 16))
    ax.set_xticks(list(ticks), [sentences[i] for i in ticks])
    ax.set_yticks(list(ticks), [sentences[i] for i in ticks])
    ax.set_xlabel("key sentence")
    ax.set_ylabel("query sentence")
    ax.set_title(title or "encoder flat-batch attention, mean weight per sentence pair")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
