"""Prepare the data the GPU run carries (the GPU machine has no ../shared): ``bench/gpu/data/``.

    python bench/gpu/prepare.py [--pairs 300000] [--dry-run]

* ``tierl/``: a prepared docnmt data directory of the first Hansard sittings (whole sittings, up
  to ``--pairs`` sentence pairs) with the Tier M-fr SentencePiece model (8K, learned on all of
  Hansard's training text: bench/common.py ``tier_mfr_data``), and the first two sittings of
  enfr/valid/hansard as its validation split;
* ``valid/hansard.{en,fr,docids}``: those two validation sittings as text, cut to ``--valid-sents``
  sentences each (what the Tier L models translate);
* ``suites/``: Bawden et al.'s anaphora and lexical-choice sets and SCAT's validation split.

Sizes: ``du -sh bench/gpu/data`` must stay under 60 MiB (the GPU run carries the working tree and
this folder, 64 MiB in all). ``--dry-run`` builds a miniature (2K pieces) in ``bench/gpu/data-dry`` in
seconds from the repository's own test data (``tests/data/enfr``: DiaBLa dialogues standing in for
the sittings, and slices of the suites), so it runs on a clone without ../shared.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402

ENFR = common.SHARED / "enfr"
DRY = HERE.parents[1] / "tests/data/enfr"        # the dry run's corpus and suites, inside the repository


def sittings(prefix: Path, max_pairs: int, max_sents: int = 0) -> tuple[list[str], list[str], list[str]]:
    """The first whole sittings (``<d>``-marker files) with at most ``max_pairs`` sentences in all
    (at least one sitting), each cut to ``max_sents`` sentences when that is > 0."""
    src, tgt = (prefix.with_name(prefix.name + f".{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
                for lang in ("en", "fr"))
    ids = prefix.with_name(prefix.name + ".docids").read_text().splitlines()
    starts = [i for i, line in enumerate(src) if line == "<d>\n"] + [len(src)]
    out_s, out_t, out_ids, pairs = [], [], [], 0
    for d, (a, b) in enumerate(zip(starts, starts[1:])):
        n = b - a - 1 if not max_sents else min(b - a - 1, max_sents)
        if out_ids and pairs + n > max_pairs:
            break
        out_s += src[a: a + 1 + n]
        out_t += tgt[a: a + 1 + n]
        out_ids.append(ids[d])
        pairs += n
    return out_s, out_t, out_ids


def write(prefix: Path, src, tgt, ids) -> Path:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_name(prefix.name + ".en").write_text("".join(src), encoding="utf-8")
    prefix.with_name(prefix.name + ".fr").write_text("".join(tgt), encoding="utf-8")
    prefix.with_name(prefix.name + ".docids").write_text("".join(i + "\n" for i in ids))
    return prefix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=250_000, help="training sentence pairs (whole sittings)")
    ap.add_argument("--valid-sents", type=int, default=600, help="sentences kept of each validation sitting")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    from docnmt.prepare import prepare
    out = a.out or HERE / ("data-dry" if a.dry_run else "data")
    if (out / "tierl/prepare.json").exists():
        print(f"{out} exists", file=sys.stderr)
        return
    raw, enfr, corpus = out / "raw", DRY if a.dry_run else ENFR, "diabla" if a.dry_run else "hansard"
    if a.dry_run:
        train = write(raw / "train", *sittings(DRY / "train/diabla", 400, 100))
        spm, vocab_size = None, 2000
    else:
        mfr = common.tier_mfr_data()          # the Tier M-fr SentencePiece model
        src, tgt, ids = sittings(ENFR / "train/hansard", a.pairs)
        keep = [i for i, (x, y) in enumerate(zip(src, tgt))     # Tier M-fr's filter of overlong lines
                if x == "<d>\n" or max(len(x.split()), len(y.split())) <= common.MFR_MAX_WORDS]
        train = write(raw / "train", [src[i] for i in keep], [tgt[i] for i in keep], ids)
        spm, vocab_size = str(mfr / "spm.model"), 8000
    s, t, ids = sittings(enfr / f"valid/{corpus}", 10**9, 60 if a.dry_run else a.valid_sents)
    n_first_two = [i for i, line in enumerate(s) if line == "<d>\n"][2] if len(ids) > 2 else len(s)
    valid = write(out / "valid/hansard", s[:n_first_two], t[:n_first_two], ids[:2])
    prepare(out / "tierl", "en", "fr", [str(train)], [str(valid)], vocab_size=vocab_size, spm_from=spm,
            force=True, log=lambda m: print(m, file=sys.stderr))
    shutil.rmtree(raw)
    bawden = enfr / "suites/bawden2018_discourse_test_sets_enfr/test-sets"
    (out / "suites/bawden").mkdir(parents=True, exist_ok=True)
    for name in ("anaphora.json", "lexical-choice.json"):
        shutil.copy(bawden / name, out / "suites/bawden" / name)
    scat = out / "suites/scat_yin2021_enfr"
    scat.mkdir(parents=True, exist_ok=True)
    for f in (enfr / "suites/scat_yin2021_enfr").glob("*"):
        if "train" not in f.name:
            shutil.copy(f, scat / f.name)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    print(f"{out}: {size:.1f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
