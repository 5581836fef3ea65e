"""Where a model's encoder self-attention goes, per layer (docs/methods/ptransformer.md, the ablations).

Teacher-forced on parallel documents cut into instances as at test time, it prints for each encoder
layer the share of the head-averaged attention mass within ±W tokens of the query, on special
tokens (<sepI>, <eod>, ...), the mean largest weight of a query, and how many queries share the
instance's most common top key (an attention sink on one position), all over real (non-pad)
queries. `docnmt entropy` gives each layer kind's entropy and mean distance; this says where.

    python experiments/tier_m/attention_where.py runs/tierm/pt_noselfsrc runs/tierm/pt_noselftgt \
        --src ../shared/data/ende/valid/ted.en --ref ../shared/data/ende/valid/ted.de
"""
import argparse

import torch

from docnmt.attention import AttentionProbe, attention_weights
from docnmt.data import Corpus, build_instances
from docnmt.readers import read_documents
from docnmt.scoring import teacher_forced
from docnmt.translate import Translator


class EncoderWeights(AttentionProbe):
    """Keeps the head-averaged weights of the current batch's encoder self-attention calls."""

    def __init__(self):
        super().__init__()
        self.weights: dict[str, torch.Tensor] = {}

    def record(self, name, q, k, spec):
        if name.startswith("enc.") and name.endswith(".self"):
            with torch.no_grad():
                self.weights[name] = attention_weights(q, k, spec).mean(1)


def where(model_dir: str, src: str, ref: str, window: int) -> dict[str, dict[str, float]]:
    translator = Translator.load(model_dir, None, "cpu")
    vocab = translator.vocab
    corpus = Corpus.encode(read_documents(src, ref), vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2)
    rows = build_instances(corpus, translator.cfg.data, training=False)
    sums: dict[str, torch.Tensor] = {}
    queries = 0
    with EncoderWeights() as probe:
        for _, batch, _, _ in teacher_forced(translator, corpus, rows):
            tokens = batch["src"].cpu()
            real = tokens.ne(vocab.pad)
            special = torch.tensor([[vocab.is_special(int(t)) for t in row] for row in tokens])
            pos = torch.arange(tokens.size(1))
            near = (pos[:, None] - pos[None, :]).abs() <= window
            queries += int(real.sum())
            for name, w in probe.weights.items():
                w = w.cpu()
                top = w.argmax(-1)
                shared = sum(int((t == t.mode().values).sum()) for t in (top[b][real[b]] for b in range(len(top))))
                stats = torch.tensor([float((w * near).sum(-1)[real].sum()),
                                      float((w * special[:, None, :]).sum(-1)[real].sum()),
                                      float(w.max(-1).values[real].sum()), float(shared)])
                sums[name] = sums.get(name, torch.zeros(4)) + stats
            probe.weights.clear()
    keys = ("near", "special", "max_weight", "shared_top")
    return {name: dict(zip(keys, (s / queries).tolist())) for name, s in sorted(sums.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="model directories")
    ap.add_argument("--src", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--window", type=int, default=8, help="W of 'within ±W tokens' (default 8)")
    args = ap.parse_args()
    print(f"| model | layer | mass within ±{args.window} | mass on special tokens | mean max weight "
          "| queries sharing the top key |")
    print("|---|---|---|---|---|---|")
    for m in args.models:
        for name, s in where(m, args.src, args.ref, args.window).items():
            print(f"| {m.rstrip('/').split('/')[-1]} | {name} | {100 * s['near']:.1f}% | {100 * s['special']:.1f}% "
                  f"| {s['max_weight']:.2f} | {100 * s['shared_top']:.1f}% |")


if __name__ == "__main__":
    main()
