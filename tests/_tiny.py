"""Tiny real-data runs shared by the search, training and end-to-end tests (Tier S,
docs/benchmarks.md#tier-s-smoke)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from docnmt.config import Config
from docnmt.prepare import prepare
from docnmt.readers import read_documents, write_marker

# ../shared/data beside the checkout, or DOCNMT_SHARED_DATA (the GPU run carries a small copy, bench/gpu/README.md)
SHARED = Path(os.environ.get("DOCNMT_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def tiny_corpus_files(directory: Path, n_docs: int = 4, max_sents: int = 40) -> Path:
    """The first documents of TED valid (en-de), truncated, written as marker files ``ted.{en,de}``."""
    docs = read_documents(str(SHARED / "ende/valid/ted.en"), str(SHARED / "ende/valid/ted.de"),
                          docids=str(SHARED / "ende/valid/ted.docids"))[:n_docs]
    for d in docs:
        d.src, d.tgt = d.src[:max_sents], d.tgt[:max_sents]
    directory.mkdir(parents=True, exist_ok=True)
    write_marker(docs, directory / "ted.en", "src", directory / "ted.docids")
    write_marker(docs, directory / "ted.de", "tgt")
    return directory / "ted"


def tiny_data(directory: Path) -> Path:
    prefix = tiny_corpus_files(directory / "raw")
    prepare(directory / "data", "en", "de", [str(prefix)], [str(prefix)], vocab_size=400, log=lambda m: None)
    return directory / "data"


def tiny_config(mode: str = "sent2sent", **train) -> Config:
    over = {"data.mode": mode, "model.d_model": 32, "model.ffn_dim": 64, "model.heads": 2,
            "train.max_tokens": 600, "train.lr": 3e-3, "train.warmup_updates": 10, "train.max_epoch": 0,
            "train.log_interval": 5, "train.patience": 0}
    over.update({f"train.{k}": v for k, v in train.items()})
    return Config.load("transformer_tiny").override(over)


def random_pair(seed: int = 0, vocab: int = 50, src_len: int = 9, tgt_len: int = 11, bos: int = 2):
    """A random source batch (second row padded) and decoder input starting with ``bos``."""
    import torch
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (2, src_len), generator=g)
    src[1, src_len - 2:] = 0
    tgt = torch.randint(4, vocab, (2, tgt_len), generator=g)
    tgt[:, 0] = bos
    return src, tgt


def assert_incremental_equals_full(model, src, tgt) -> None:
    """Decoding token by token with the cache gives the states of one full teacher-forced pass."""
    import torch
    with torch.no_grad():
        enc = model.encode(src)
        full = model.decode(tgt, enc)
        cache: dict = {}
        steps = torch.cat([model.decode(tgt[:, : t + 1], enc, cache) for t in range(tgt.size(1))], 1)
    torch.testing.assert_close(steps, full, rtol=1e-4, atol=1e-5)


def translate_checked(model_dir: Path, raw: Path, n_sents: int, **search):
    """Translate the first two documents of ``raw`` (truncated to ``n_sents`` sentences) with
    beam 2 in batches and one instance at a time; asserts both agree and every source sentence
    got a line. Returns (translator, documents, output, coverage report)."""
    from docnmt.translate import Translator
    tr = Translator.load(model_dir, device="cpu")
    docs = read_documents(str(raw), fmt="marker")[:2]
    for d in docs:
        d.src = d.src[:n_sents]
    cfg = tr.cfg.decode.__class__(**{**vars(tr.cfg.decode), "beam": 2, "max_sentences": 8, **search})
    out, report = tr.translate(docs, cfg)
    single, _ = tr.translate(docs, tr.cfg.decode.__class__(**{**vars(cfg), "max_sentences": 1}))
    assert [d.tgt for d in single] == [d.tgt for d in out]
    assert [len(d.tgt) for d in out] == [len(d.src) for d in docs]
    return tr, docs, out, report


def history(save_dir) -> list[dict]:
    """The rows of a run's ``metrics.jsonl`` (training and validation records)."""
    return [json.loads(line) for line in (Path(save_dir) / "metrics.jsonl").read_text().splitlines()]
