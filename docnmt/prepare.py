"""``docnmt prepare``: read corpora, learn (or reuse) a joint subword model, encode, store.

Corpora are named fairseq-style by prefixes: ``--trainpref ../shared/data/ende/train/ted`` with
``--source-lang en --target-lang de`` reads ``ted.en`` / ``ted.de`` (and ``ted.docids`` when it
exists); ``PREFIX.en.xml`` / ``PREFIX.en.sgm`` pairs and a ``PREFIX.jsonl`` file work the same
way. Several prefixes per split are concatenated. The output directory holds the vocabulary and
one memory-mapped encoded corpus per split (see :mod:`docnmt.data`), plus ``prepare.json`` with
the sentence, document and instance counts of every mode.

The subword model is a joint SentencePiece model (``subword="spm"``, ``vocab_size`` pieces) or
the classic Moses tokenisation + joint subword-nmt BPE (``subword="moses-bpe"``, ``bpe_merges``
merges; the ``docnmt[moses]`` extra, see :mod:`docnmt.subword`).
"""
from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path

from .data import Corpus, ModeConfig, build_instances
from .document import Document
from .errors import ConfigError, DataError, DocnmtError
from .readers import read_documents
from .vocab import Vocab, default_symbols, moses_bpe


def resolve_prefix(prefix: str, src_lang: str, tgt_lang: str, fmt: str = "auto") -> list[Document]:
    """Read one corpus named by a prefix (see module docstring)."""
    p = Path(prefix)
    for src, tgt in ((f"{p}.{src_lang}", f"{p}.{tgt_lang}"),
                     (f"{p}.{src_lang}.xml", f"{p}.{tgt_lang}.xml"),
                     (f"{p}.{src_lang}.sgm", f"{p}.{tgt_lang}.sgm")):
        if Path(src).exists():
            if not Path(tgt).exists():
                raise DataError(f"no target side {tgt} for this source", src)
            docids = f"{p}.docids" if Path(f"{p}.docids").exists() else None
            return read_documents(src, tgt, fmt=fmt, docids=docids)
    if Path(f"{p}.jsonl").exists():
        return read_documents(f"{p}.jsonl", fmt="jsonl")
    raise DataError(f"no corpus found for prefix {prefix!r} (looked for {p}.{src_lang}/{tgt_lang}, "
                    f".xml, .sgm and {p}.jsonl)")


def read_split(prefixes: list[str], src_lang: str, tgt_lang: str, fmt: str = "auto") -> list[Document]:
    """The documents of one split. A sentence-level corpus (one sentence per line, no document
    structure: ``meta["sentence_level"]``) becomes one single-sentence document per line, so
    no instance ever joins its unrelated sentences ("+sent" data, docs/benchmarks.md#tier-m-miniature)."""
    docs: list[Document] = []
    names = [Path(p).name for p in prefixes]
    unique = len(set(names)) == len(names)   # else a/train and b/train are told apart by their paths
    for pref, name in zip(prefixes, names):
        part = resolve_prefix(pref, src_lang, tgt_lang, fmt)
        for d in part:
            if d.tgt is None:
                raise DataError("training and validation data need both sides", pref)
            d.docid = f"{name if unique else pref}/{d.docid}" if len(prefixes) > 1 else d.docid
            if d.meta.get("sentence_level"):
                docs.extend(Document(f"{d.docid}:{i + 1}", [s], [t], {"sentence_level": True})
                            for i, (s, t) in enumerate(zip(d.src, d.tgt)))
            else:
                docs.append(d)
    return docs


def prepare(destdir: str | Path, src_lang: str, tgt_lang: str, trainpref: list[str],
            validpref: list[str] | None = None, testpref: list[str] | None = None,
            vocab_size: int = 8000, spm_from: str | None = None, fmt: str = "auto",
            max_sentence_tokens: int = 1022, force: bool = False, log=print,
            subword: str = "spm", bpe_merges: int = 30000) -> dict:
    destdir = Path(destdir)
    if subword not in ("spm", "moses-bpe"):
        raise ConfigError(f"unknown subword model {subword!r}; choose spm or moses-bpe")
    bpe_vocab = moses_bpe() if subword == "moses-bpe" and not spm_from else None  # fails early without the extra
    if destdir.exists() and any(destdir.iterdir()) and not force:
        raise DocnmtError(f"{destdir} exists and is not empty; choose another --destdir or pass --force")
    if force and destdir.exists():
        for old in [*destdir.glob("*.npy"), *destdir.glob("*.docids.json"),
                    *(destdir / n for n in ("prepare.json", "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json"))]:
            old.unlink(missing_ok=True)
    splits = {"train": trainpref, "valid": validpref or [], "test": testpref or []}
    docs = {name: read_split(prefs, src_lang, tgt_lang, fmt) for name, prefs in splits.items() if prefs}
    with _removed_on_failure(destdir):
        if spm_from:
            vocab = (Vocab.load(spm_from) if Path(spm_from).is_dir()
                     else Vocab(Path(spm_from).read_bytes(), default_symbols()))
            log(f"using the existing subword model {spm_from} ({len(vocab)} symbols)")
        elif bpe_vocab:
            src = [s for d in docs["train"] for s in d.src]
            tgt = [s for d in docs["train"] for s in d.tgt]
            log(f"Moses-tokenising {len(src) + len(tgt)} sentences and learning {bpe_merges} joint BPE merges on them")
            vocab = bpe_vocab.train(src, tgt, src_lang, tgt_lang, bpe_merges)
        else:
            texts = [s for d in docs["train"] for s in d.src + d.tgt]
            log(f"learning a joint SentencePiece BPE model of {vocab_size} pieces on {len(texts)} sentences")
            vocab = Vocab.train(texts, vocab_size)
        vocab.save(destdir)
        stats = {"source_lang": src_lang, "target_lang": tgt_lang, "subword": vocab.backend, "vocab": len(vocab),
                 "splits": {}}
        for name, split_docs in docs.items():
            corpus = Corpus.encode(split_docs, vocab, max_sentence_tokens, origin=",".join(splits[name]))
            corpus.save(destdir, name)
            stats["splits"][name] = split_stats(corpus)
            s = stats["splits"][name]
            log(f"{name}: {s['documents']} documents, {s['sentences']} sentences, "
                f"{s['src_tokens']}/{s['tgt_tokens']} subword tokens; instances: " +
                ", ".join(f"{k} {v}" for k, v in s["instances"].items()))
        (destdir / "prepare.json").write_text(json.dumps(stats, indent=1))
    return stats


@contextmanager
def _removed_on_failure(destdir: Path):
    """Make ``destdir``; if the block fails, leave no half-prepared directory (an empty one the
    user gave stays, empty)."""
    existed = destdir.exists()
    fresh = not existed or not any(destdir.iterdir())
    destdir.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if fresh:
            for p in ([destdir] if not existed else list(destdir.iterdir())):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        raise


def split_stats(corpus: Corpus) -> dict:
    modes = {"sent2sent": ModeConfig("sent2sent"), "doc2sent": ModeConfig("doc2sent"),
             "doc2doc": ModeConfig("doc2doc"), "mr": ModeConfig("mr")}
    return {"documents": corpus.n_docs, "sentences": corpus.n_sents,
            "src_tokens": int(corpus.src.lengths.sum()), "tgt_tokens": int(corpus.tgt.lengths.sum()),
            "instances": {k: len(build_instances(corpus, m)) for k, m in modes.items()}}
