"""Scores of one trained model on the context-dependence suites (experiments/context_bench/README.md):
per suite the contrastive accuracy (what ``docnmt score-contrastive`` reports, strict: ties are
errors) with the exact McNemar test against a baseline's decisions (``--against``), the CXMI of the
dependent sentence (``docnmt score --cxmi``: log2 p(y_n | context) - log2 p(y_n alone), bits per
word piece, over the right variants), and the attention weight on the sentence holding the
antecedent: for every encoder/decoder self- and cross-attention, the head-averaged weight the
queries of the current sentence put on the keys of sentence n-k, averaged over queries, layers and
examples (0 where the instance does not hold sentence n-k). The context-encoder Transformer's
context comes in through its gate, not through these attentions: its gate weight on the context
(``gate_*``) is reported instead.

    python experiments/context_bench/score.py MODEL SUITES_DIR OUT.json [--against BASE_SCORES_DIR] [--scores DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from docnmt.attention import AttentionProbe, attention_weights, module_kind
from docnmt.contrastive import accuracy_report, paired_test, read_decisions, right_answers, score_examples, write_scores
from docnmt.data import Corpus, InstanceSet, model_inputs
from docnmt.document import Document
from docnmt.model import rows_apart
from docnmt.scoring import context_usage, last_sentence_rows
from docnmt.suites import read_suite
from docnmt.translate import Translator


class AntecedentProbe(AttentionProbe):
    """Records, per attention module kind, each instance's mean weight from the queries of its
    current sentence to the keys of its antecedent sentence (instance sentence numbers)."""

    def __init__(self, sentences: dict, current: torch.Tensor, antecedent: torch.Tensor):
        super().__init__(sentences)
        self.current, self.antecedent = current, antecedent
        self.weights: dict[str, list[torch.Tensor]] = {}

    def record(self, name: str, q, k, spec) -> None:
        parts = name.split(".")
        if len(parts) < 3 or parts[0] not in ("enc", "dec") or parts[2] not in ("self", "cross"):
            return
        q_side = "src" if parts[0] == "enc" else "tgt_in"
        q_ids, k_ids = self.sentences[q_side], self.sentences["src" if parts[2] == "cross" else q_side]
        with torch.no_grad():
            w = attention_weights(q, k, spec).mean(1)
            if q_ids.shape != w.shape[:2] or k_ids.shape != (w.size(0), w.size(2)):
                return                                    # flat-batch attention: not per instance
            ante = (k_ids == self.antecedent[:, None]) & (self.antecedent[:, None] >= 0)
            on_ante = (w * ante[:, None, :]).sum(-1)
            mine = q_ids == self.current[:, None]
            per = (on_ante * mine).sum(1) / mine.sum(1).clamp_min(1)
        self.weights.setdefault(module_kind(name), []).append(per.float().cpu())

    def record_context_weight(self, name: str, weight: torch.Tensor) -> None:
        side = "src" if name.startswith("enc") else "tgt_in"
        ids = self.sentences[side]
        if ids.shape == weight.shape:
            mine = ids == self.current[:, None]
            per = (weight * mine).sum(1) / mine.sum(1).clamp_min(1)
            self.weights.setdefault("gate_" + module_kind(name), []).append(per.float().cpu())


@torch.no_grad()
def antecedent_attention(translator, docs: list[Document], k: int, max_tokens: int = 2048) -> dict:
    """Mean weight on sentence n-k per attention kind over ``docs`` (the last sentence is n), and the
    share of instances that hold sentence n-k at all."""
    corpus = Corpus.encode(docs, translator.vocab, max_sentence_tokens=translator.cfg.model.max_positions - 2)
    rows = last_sentence_rows(translator, corpus)
    iset = InstanceSet(corpus, rows, translator.joiner)
    joiner, model = translator.joiner, translator.model
    sums: dict[str, float] = {}
    holds = 0
    with rows_apart(model, translator.method.score_alone):
        for idx in iset.batches(max_tokens, shuffle=False):
            batch = {key: (v.to(translator.device) if torch.is_tensor(v) else v)
                     for key, v in iset.collate(idx).items()}
            current = torch.as_tensor(rows[idx, 1] - 1 - rows[idx, 0])
            shift = torch.as_tensor(rows[idx, 2] - rows[idx, 0])
            tgt = joiner.sentence_ids(batch["tgt_in"])
            pad = translator.vocab.pad       # pads are in no sentence: neither queries nor keys
            sentences = {"src": joiner.sentence_ids(batch["src"]).masked_fill(batch["src"].eq(pad), -1),
                         "tgt_in": torch.where(tgt < 0, tgt, tgt + shift[:, None]).masked_fill(
                             batch["tgt_in"].eq(pad), -1)}
            antecedent = current - k
            holds += int((antecedent >= 0).sum())
            with AntecedentProbe(sentences, current, antecedent) as probe:
                model(batch["src"], batch["tgt_in"], **model_inputs(batch))
            for kind, records in probe.weights.items():
                sums[kind] = sums.get(kind, 0.0) + float(torch.stack(records).mean(0).sum())
    return {"holds_antecedent": holds / max(len(rows), 1), **{kind: s / len(rows) for kind, s in sorted(sums.items())}}


def dependent_cxmi(translator, docs: list[Document]) -> float:
    """CXMI of the last sentence of each document, bits per word piece."""
    usage = context_usage(translator, docs)
    gain = sum(d[-1][0] - d[-1][1] for d in usage["documents"])
    pieces = sum(d[-1][2] for d in usage["documents"])
    return gain / max(pieces, 1) / np.log(2)


def score_suite(translator, path: Path, against: Path | None, scores_out: Path | None) -> dict:
    """One suite's figures (see the module docstring)."""
    examples = read_suite(path, "voita", detokenize=False)
    scores = score_examples(translator, examples)
    report = accuracy_report(examples, scores)
    out = {"examples": report["examples"], "accuracy": report["accuracy"], "ties": report["ties"],
           "source_only_ceiling": report["source_only_ceiling"]}
    if scores_out is not None:
        write_scores(scores_out, examples, scores)
    if against is not None and against.exists():
        test = paired_test(read_decisions(against), right_answers(examples, scores))
        out.update(delta_vs_sent=test["delta"], p_vs_sent=test["p_value"])
    k = int(examples[0].meta["distance"])
    docs = [Document(f"{i}", ex.src_context + [ex.src], ex.candidates[ex.correct].tgt_context
                     + [ex.candidates[ex.correct].tgt]) for i, ex in enumerate(examples)]
    out["cxmi_bits"] = dependent_cxmi(translator, docs)
    out["attention_on_antecedent"] = antecedent_attention(translator, docs, k)
    return out


def score_model(model: Path, suites: Path, against: Path | None = None, scores_dir: Path | None = None) -> dict:
    """Every suite of ``suites`` (``*.json``) scored with the model of ``model``."""
    torch.set_num_threads(1)
    translator = Translator.load(model, None, "cpu")
    if scores_dir is not None:
        scores_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for path in sorted(suites.glob("*.json")):
        name = path.stem
        out[name] = score_suite(translator, path, against / f"{name}.scores.jsonl" if against else None,
                                scores_dir / f"{name}.scores.jsonl" if scores_dir else None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("suites")
    ap.add_argument("out")
    ap.add_argument("--against", help="a directory of the baseline's per-suite NAME.scores.jsonl")
    ap.add_argument("--scores", help="write this model's NAME.scores.jsonl here")
    a = ap.parse_args()
    result = score_model(Path(a.model), Path(a.suites), Path(a.against) if a.against else None,
                         Path(a.scores) if a.scores else None)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    for name, r in result.items():
        print(f"{name:12} {100 * r['accuracy']:6.1f}%  p={r.get('p_vs_sent', float('nan')):.3g}  "
              f"cxmi={r['cxmi_bits']:+.3f}  {r['attention_on_antecedent']}")


if __name__ == "__main__":
    main()
