"""``docnmt quickstart``: the whole pipeline on the bundled BConTrasT chats, in minutes on a CPU.

prepare (joint SentencePiece on the chats) → train a small Doc2Sent model (preset
``quickstart``) for a fixed number of updates (1,200), so that the result does not depend on how
busy the machine is; a time cap (30 minutes by default) only guards against a machine far slower
than expected, and is reported loudly when it stops training early → translate a held-back chat →
print it aligned sentence by sentence with s-BLEU and d-BLEU of the five held-back chats.
Run again in the same directory, it keeps the prepared data and resumes training from its last
checkpoint; ``--force`` starts over (prepare and train each with their own --force: only what they wrote is removed).
"""
from __future__ import annotations

import gzip
import shutil
import sys
import time
from pathlib import Path

from .errors import DocnmtError

BUNDLE = Path(__file__).parent / "quickstart_data"


def unpack(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for gz in BUNDLE.glob("*.gz"):
        with gzip.open(gz, "rb") as f, open(dest / gz.stem, "wb") as out:
            shutil.copyfileobj(f, out)


QUICKSTART_PARTS = ("raw", "data-bin", "model")   # what a quick-start directory holds


UPDATES = 1200          # the quickstart preset's max_update: what the README's figures are for
MINUTES_CAP = 30.0


def run(workdir: Path, minutes: float = MINUTES_CAP, force: bool = False, updates: int = UPDATES) -> int:
    from .config import Config
    from .metrics import evaluate_documents, format_table
    from .prepare import prepare
    from .readers import read_documents
    from .training import Trainer
    from .translate import Translator

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if workdir.exists() and not workdir.is_dir():
        raise DocnmtError(f"{workdir} is a file; --workdir names a directory")
    if workdir.exists() and any(workdir.iterdir()):
        foreign = sorted(p.name for p in workdir.iterdir() if p.name not in QUICKSTART_PARTS)
        if foreign:
            raise DocnmtError(f"{workdir} holds files the quick start did not make ({', '.join(foreign[:3])}); "
                              "choose another --workdir (--force only starts a quick-start directory over)")
        if not force:
            say(f"{workdir} holds an earlier quick start: going on from where it stopped (--force starts over)")
    t0 = time.time()
    raw, data, model_dir = (workdir / part for part in QUICKSTART_PARTS)
    unpack(raw)
    if (data / "prepare.json").exists() and not force:    # prepare renames its directory into place when complete
        say(f"[1/3] the bundled BConTrasT chats are already prepared in {data}")
    else:
        say(f"[1/3] preparing the bundled BConTrasT chats (CC BY-SA 4.0) in {workdir}")
        prepare(data, "en", "de", [str(raw / "train")], [str(raw / "valid")], [str(raw / "test")],
                vocab_size=4000, force=force, log=say)     # --force: each part by its verb's own rule
    say(f"[2/3] training a small Doc2Sent model for {updates:,} updates (time cap {minutes:g} minutes)")
    cfg = Config.load("quickstart").override({"train.max_minutes": minutes, "train.max_update": updates})
    trainer = Trainer.from_dirs(cfg, data, model_dir, force=force)
    say("      " + trainer.describe())
    trainer.train()
    reached = trainer.progress.updates
    if reached < updates:
        say(f"\nWARNING: the {minutes:g}-minute time cap stopped training after {reached:,} of {updates:,} updates "
            f"(this machine is slower or busier than expected). The model is undertrained: expect poor "
            f"translations and a BLEU far below the README's figures. Run `docnmt quickstart --workdir {workdir}"
            + ("" if updates == UPDATES else f" --updates {updates}")
            + f" --minutes {max(2 * minutes, minutes * (updates - reached) / max(reached, 1) * 1.2):.0f}` to "
            "train it on from here.\n")
    say("[3/3] translating the held-back chats")
    test = read_documents(str(raw / "test.en"), str(raw / "test.de"), docids=str(raw / "test.docids"))
    translator = Translator.load(model_dir, device="cpu")
    hyps, report = translator.translate([d.src for d in test])
    doc, hyp = test[0], hyps[0]
    print(f"\n=== held-back chat {doc.docid}: source | docnmt | reference ===")
    for i, (s, h, r) in enumerate(zip(doc.src, hyp.tgt, doc.tgt), 1):
        print(f"{i:3d} EN  {s}\n    MT  {h}\n    REF {r}")
    result = evaluate_documents([h.tgt for h in hyps], [d.tgt for d in test])
    print(f"\n=== scores on the {len(test)} held-back chats ({sum(len(d) for d in test)} sentences) ===")
    print(format_table(result))
    print(report.summary())
    print(f"\nfinished in {(time.time() - t0) / 60:.1f} minutes; the model is in {model_dir} "
          f"(docnmt translate {model_dir} -i FILE)")
    return 0
