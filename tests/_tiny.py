"""Tiny real-data runs shared by the search, training and end-to-end tests (Tier S,
docs/benchmarks.md#tier-s-smoke), and the paths of the real data the tests read: the BConTrasT
chats bundled with the package (``docnmt/quickstart_data``) and the small slices in ``tests/data``
(tests/data/README.md). Nothing here reads data from outside the repository."""
from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import docnmt
from docnmt.config import Config
from docnmt.prepare import prepare
from docnmt.readers import read_documents, read_marker, write_marker

DATA = Path(__file__).resolve().parent / "data"      # real slices, laid out as the project's full copy
CHATS = Path(docnmt.__file__).resolve().parent / "quickstart_data"       # BConTrasT, CC BY-SA 4.0


def unpack_chats(directory: Path, split: str = "valid") -> Path:
    """The bundled BConTrasT chats of ``split`` (valid: its 78 dev chats; test: 5 test chats; train: 550),
    unpacked as marker files ``chat.{en,de,docids}`` into ``directory``; returns the prefix."""
    directory.mkdir(parents=True, exist_ok=True)
    for ext in ("en", "de", "docids"):
        (directory / f"chat.{ext}").write_bytes(gzip.decompress((CHATS / f"{split}.{ext}.gz").read_bytes()))
    return directory / "chat"


def chat_documents(split: str = "valid", target: bool = True) -> list:
    """The bundled chats of ``split`` as documents, with their German side unless ``target`` is false
    (a fresh list each call: change it freely)."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix = unpack_chats(Path(tmp), split)
        return read_marker(f"{prefix}.en", f"{prefix}.de" if target else None, f"{prefix}.docids")


def tiny_corpus_files(directory: Path, n_docs: int = 12, max_sents: int = 40) -> Path:
    """The first chats of the bundled BConTrasT dev set (en-de), truncated, written as marker files
    ``chat.{en,de,docids}``; returns the prefix. The default: 12 chats, 260 turns."""
    docs = chat_documents("valid")[:n_docs]
    for d in docs:
        d.src, d.tgt = d.src[:max_sents], d.tgt[:max_sents]
    directory.mkdir(parents=True, exist_ok=True)
    write_marker(docs, directory / "chat.en", "src", directory / "chat.docids")
    write_marker(docs, directory / "chat.de", "tgt")
    return directory / "chat"


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

    from docnmt.decoder_state import DecoderCache
    with torch.no_grad():
        enc = model.encode(src)
        full = model.decode(tgt, enc)
        cache = DecoderCache()
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


# a tiny DocFlat's settings (tests/conftest.py TINY_MODELS, the pretrained-model tests); here rather than in
# conftest.py, which a test cannot import by name once pytest also collects experiments/ (its own conftest)
DOCFLAT = {"method.name": "docflat", "data.separator": "global_index", "data.batch_order": "ordered",
           "data.context": 2}

# every document method, as (mode, config overrides) for tiny_config: the methods a training aid
# (docs/methods/split_pairs.md, context_margin.md) must compose with
DOC_METHODS = {
    "doc2doc": ("doc2doc", {}),
    "doc2sent": ("doc2sent", {"data.context": 2}),
    "mr": ("mr", {}),
    "gtransformer": ("doc2doc", {"method.name": "gtransformer", "data.separator": "group",
                                 "method.combined_enc_self": 1, "method.combined_dec_self": 1,
                                 "method.combined_cross": 1}),
    "ptransformer": ("doc2doc", {"method.name": "ptransformer"}),
    "docflat": ("pseudodoc", DOCFLAT),
    "context": ("sent2sent", {"method.name": "context_transformer", "data.context_input": 2}),
}


def aid_trainer(method: str, data: Path, save_dir: Path, aid: dict):
    """A one-update trainer of document method ``method`` (:data:`DOC_METHODS`) on ``data`` with a
    training aid's settings ``aid`` (``{"train.split_pairs": 0.5}``)."""
    from docnmt.training import Trainer
    mode, over = DOC_METHODS[method]
    return Trainer.from_dirs(tiny_config(mode, max_update=1).override({**over, **aid}), data, save_dir,
                             progress_bar=False)
