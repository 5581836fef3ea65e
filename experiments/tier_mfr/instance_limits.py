"""How many reference document instances are longer than an output limit (the numbers of
docs/methods/baselines.md#decoding-document-instances).

    python experiments/tier_mfr/instance_limits.py MODEL_DIR PREFIX --preset doc2doc_small --out FILE.json

MODEL_DIR gives the vocabulary; PREFIX.{en,fr,docids} the documents (e.g. ../shared/data/enfr/valid/hansard).
"""
import argparse
import json

import numpy as np

from docnmt.config import Config
from docnmt.data import Corpus
from docnmt.data.batching import InstanceSet
from docnmt.data.instances import build_instances
from docnmt.readers import read_documents
from docnmt.translate import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model"), ap.add_argument("prefix")
    ap.add_argument("--preset", default="doc2doc_small"), ap.add_argument("--langs", nargs=2, default=["en", "fr"])
    ap.add_argument("--out")
    a = ap.parse_args()
    docs = read_documents(f"{a.prefix}.{a.langs[0]}", f"{a.prefix}.{a.langs[1]}", docids=f"{a.prefix}.docids")
    tr = load(a.model, device="cpu")
    corpus = Corpus.encode(docs, tr.vocab)
    rows = build_instances(corpus, Config.load(a.preset).data, training=False)
    batch = InstanceSet(corpus, rows, tr.joiner).collate(np.arange(len(rows)))
    src = (batch["src"] != tr.vocab.pad).sum(1).numpy()
    ref = (batch["labels"] != tr.vocab.pad).sum(1).numpy()
    n = rows[:, 1] - rows[:, 0]
    limits = {"1.1*|x|+7": 1.1 * src + 7, "1.2*|x|+10": 1.2 * src + 10,
              "1.1*|x|+7*N": 1.1 * src + 7 * n, "1.2*|x|+10*N": 1.2 * src + 10 * n}
    out = {"instances": len(rows), "mean_sentences": float(n.mean()), "mean_source_tokens": float(src.mean()),
           "reference_over_source": float(ref.sum() / src.sum()),
           "references_longer_than": {k: int((ref > v).sum()) for k, v in limits.items()}}
    print(json.dumps(out, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
