"""Every sentence guaranteed (``docnmt translate --fallback``, docs/translating.md#every-sentence-guaranteed):
documents fully recovered and BLEU of a freshly trained small Doc2Doc model without the fallback and
with it.

A small Doc2Doc model (preset ``transformer_tiny``, whole chats as instances) is trained for a fixed
number of updates on the bundled BConTrasT chats (550 training chats, docnmt/quickstart_data) and
translates the first ``--docs`` dev chats twice with the same search: ``--fallback none`` (the
sentences it loses stay empty or merged) and ``--fallback sentence`` (exactly those translated again
alone by the model in its sentence mode). An undertrained document model loses many sentences, which
is where the fallback matters; the figures are for this small run, not for a converged model.

    python bench/fallback.py [--updates 400] [--docs 40] [--name fallback]

Prints the figures and saves them to bench/results/NAME.json (the model stays in
bench/.cache/fallback_UPDATES and is reused).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def train(workdir: Path, updates: int) -> Path:
    """The bundled chats prepared and a small Doc2Doc model trained for ``updates`` (kept and reused)."""
    from docnmt.config import Config
    from docnmt.prepare import prepare
    from docnmt.quickstart import unpack
    from docnmt.training import Trainer
    raw, data, model = workdir / "raw", workdir / "data", workdir / "model"
    unpack(raw)
    if not (data / "prepare.json").exists():
        prepare(data, "en", "de", [str(raw / "train")], [str(raw / "valid")], vocab_size=4000,
                log=lambda m: print(m, file=sys.stderr))
    if not (model / "model.safetensors").exists():
        cfg = Config.load("transformer_tiny").override({
            "data.mode": "doc2doc", "data.max_instance_tokens": 512, "train.max_update": updates,
            "train.max_epoch": 0, "train.patience": 0, "train.max_tokens": 2048, "train.log_interval": 50})
        Trainer.from_dirs(cfg, data, model, progress_bar=False).train()
    return model


def measure(model: Path, raw: Path, docs: int, beam: int) -> dict:
    from docnmt.metrics import evaluate_documents
    from docnmt.readers import read_documents
    from docnmt.translate import Translator
    test = read_documents(str(raw / "valid.en"), str(raw / "valid.de"), docids=str(raw / "valid.docids"))[:docs]
    tr = Translator.load(model, device="cpu")
    out = {"model": str(model), "documents": len(test), "sentences": sum(len(d) for d in test), "beam": beam}
    for fallback in ("none", "sentence"):
        search = tr.cfg.override({"decode.fallback": fallback, "decode.beam": beam}).decode
        t0 = time.time()
        hyps, report = tr.translate([d.src for d in test], search)
        scores = evaluate_documents([h.tgt for h in hyps], [d.tgt for d in test])
        out[fallback] = {"documents_fully_recovered": report.documents_fully_recovered,
                         "empty_sentences": report.empty_sentences,
                         "malformed_instances": report.malformed_instances, "instances": report.instances,
                         "lost_sentences": (report.fallback or {}).get("sentences"),
                         "repaired_sentences": report.repaired_sentences,
                         "s_bleu": round(scores["s_bleu"]["score"], 2), "d_bleu": round(scores["d_bleu"]["score"], 2),
                         "seconds": round(time.time() - t0, 1)}
        print(f"--fallback {fallback}: {report.summary()}; s-BLEU {out[fallback]['s_bleu']}, "
              f"d-BLEU {out[fallback]['d_bleu']}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--updates", type=int, default=400)
    p.add_argument("--docs", type=int, default=40, help="dev chats translated")
    p.add_argument("--beam", type=int, default=3)
    p.add_argument("--workdir", type=Path, default=None, help="default: bench/.cache/fallback_UPDATES")
    p.add_argument("--name", default="fallback", help="the results file: bench/results/NAME.json")
    args = p.parse_args()
    from common import save
    workdir = args.workdir or HERE / ".cache" / f"fallback_{args.updates}"
    model = train(workdir, args.updates)
    result = {"updates": args.updates, **measure(model, workdir / "raw", args.docs, args.beam)}
    result["model"] = str(Path(result["model"]).relative_to(HERE.parent)) if HERE.parent in Path(
        result["model"]).parents else result["model"]
    save(args.name, result)
    print(result)


if __name__ == "__main__":
    main()
