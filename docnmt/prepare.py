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
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .checkpoint import swap_into_place, work_dir_beside
from .data import Corpus, ModeConfig, build_instances
from .document import Document
from .errors import ConfigError, DataError, DocnmtError
from .readers import read_documents, sentence_line
from .vocab import Vocab, default_symbols, moses_bpe

# the vocabulary and record files `prepare` writes (beside each split's .npy and .docids.json files):
# --force starts over only a directory with a prepare.json, and only one holding nothing it does not list
PREPARED_FILES = ("prepare.json", "spm.model", "vocab.json", "bpe.codes", "bpe.vocab.json")


def corpus_files(prefix: str, src_lang: str, tgt_lang: str) -> tuple[str, str | None]:
    """The files a prefix names (see module docstring): (source, target), or (JSONL file, None)."""
    p = Path(prefix)
    for src, tgt in ((f"{p}.{src_lang}", f"{p}.{tgt_lang}"),
                     (f"{p}.{src_lang}.xml", f"{p}.{tgt_lang}.xml"),
                     (f"{p}.{src_lang}.sgm", f"{p}.{tgt_lang}.sgm")):
        if Path(src).exists():
            if not Path(tgt).exists():
                raise DataError(f"no target side {tgt} for this source", src)
            return src, tgt
    if Path(f"{p}.jsonl").exists():
        return f"{p}.jsonl", None
    raise DataError(f"no corpus found for prefix {prefix!r} (looked for {p}.{src_lang}/{tgt_lang}, "
                    f".xml, .sgm and {p}.jsonl)")


def resolve_prefix(prefix: str, src_lang: str, tgt_lang: str, fmt: str = "auto") -> list[Document]:
    """Read one corpus named by a prefix (see module docstring)."""
    src, tgt = corpus_files(prefix, src_lang, tgt_lang)
    if tgt is None:
        return read_documents(src, fmt="jsonl")
    docids = f"{prefix}.docids" if Path(f"{prefix}.docids").exists() else None
    return read_documents(src, tgt, fmt=fmt, docids=docids)


def read_split(prefixes: list[str], src_lang: str, tgt_lang: str, fmt: str = "auto",
               origins: list | None = None) -> list[Document]:
    """The documents of one split. A sentence-level corpus (one sentence per line, no document
    structure: ``meta["sentence_level"]``) becomes one single-sentence document per line, so
    no instance ever joins its unrelated sentences ("+sent" data, docs/benchmarks.md#tier-m-miniature).
    ``origins``, when given, gets ``(prefix, document of its file, first sentence)`` per document
    returned (to name the file and line of a sentence in an error)."""
    docs: list[Document] = []
    names = [Path(p).name for p in prefixes]
    unique = len(set(names)) == len(names)   # else a/train and b/train are told apart by their paths
    for pref, name in zip(prefixes, names):
        part = resolve_prefix(pref, src_lang, tgt_lang, fmt)
        for k, d in enumerate(part):
            if d.tgt is None:
                raise DataError("training and validation data need both sides", pref)
            d.docid = f"{name if unique else pref}/{d.docid}" if len(prefixes) > 1 else d.docid
            if d.meta.get("sentence_level"):
                docs.extend(Document(f"{d.docid}:{i + 1}", [s], [t], {"sentence_level": True})
                            for i, (s, t) in enumerate(zip(d.src, d.tgt)))
                if origins is not None:
                    origins.extend((pref, k, i) for i in range(len(d.src)))
            else:
                docs.append(d)
                if origins is not None:
                    origins.append((pref, k, 0))
    return docs


def prepare(destdir: str | Path, src_lang: str, tgt_lang: str, trainpref: list[str],
            validpref: list[str] | None = None, testpref: list[str] | None = None,
            vocab_size: int = 8000, spm_from: str | None = None, fmt: str = "auto",
            max_sentence_tokens: int = 1022, force: bool = False, log=print,
            subword: str = "spm", bpe_merges: int = 30000) -> dict:
    """Read, learn the subword model, encode and store (see module docstring). The data
    directory is built beside ``destdir`` and renamed into place only when complete (over an
    existing one, with ``force``, swapped in): a failure, a typo in a prefix or a kill leaves no
    half-prepared directory and the old one as it was. An empty ``destdir`` the user made is
    filled in place (and emptied again on failure)."""
    destdir = Path(destdir)
    if subword not in ("spm", "moses-bpe"):
        raise ConfigError(f"unknown subword model {subword!r}; choose spm or moses-bpe")
    bpe_vocab = moses_bpe() if subword == "moses-bpe" and not spm_from else None  # fails early without the extra
    replace = _check_destdir(destdir, force)
    beside = replace or not destdir.exists()
    splits = {"train": trainpref, "valid": validpref or [], "test": testpref or []}
    origins: dict[str, list] = {name: [] for name in splits}
    docs = {name: read_split(prefs, src_lang, tgt_lang, fmt, origins[name])
            for name, prefs in splits.items() if prefs}
    work = work_dir_beside(destdir) if beside else destdir
    with _removed_on_failure(work, whole=beside):
        if spm_from:
            vocab = (Vocab.load(spm_from) if Path(spm_from).is_dir()
                     else Vocab(Path(spm_from).read_bytes(), default_symbols(), spm_from))
            log(f"using the existing subword model {spm_from} ({len(vocab)} symbols)")
        elif bpe_vocab:
            src = [s for d in docs["train"] for s in d.src]
            tgt = [s for d in docs["train"] for s in d.tgt]
            log(f"Moses-tokenising {len(src) + len(tgt)} sentences and learning {bpe_merges} joint BPE merges on them")
            vocab = bpe_vocab.train(src, tgt, src_lang, tgt_lang, bpe_merges)
        else:
            texts = [s for d in docs["train"] for s in d.src + d.tgt]
            log(f"learning a joint SentencePiece BPE model of {vocab_size} pieces on {len(texts)} sentences")
            vocab = _learn_subwords(texts, vocab_size, trainpref, src_lang, tgt_lang)
            if vocab.n_pieces < vocab_size:
                log(f"the training text gave only {vocab.n_pieces} pieces (SentencePiece stops when no pair of "
                    f"pieces is left to merge); the vocabulary has {len(vocab)} symbols with docnmt's own")
        vocab.save(work)
        stats = {"source_lang": src_lang, "target_lang": tgt_lang, "subword": vocab.backend, "vocab": len(vocab),
                 "splits": {}}
        for name, split_docs in docs.items():
            corpus = Corpus.encode(split_docs, vocab, max_sentence_tokens=2**62, origin=",".join(splits[name]))
            _check_sentence_lengths(corpus, split_docs, origins[name], max_sentence_tokens,
                                    (src_lang, tgt_lang), fmt)
            corpus.save(work, name)
            stats["splits"][name] = split_stats(corpus)
            s = stats["splits"][name]
            log(f"{name}: {s['documents']} documents, {s['sentences']} sentences, "
                f"{s['src_tokens']}/{s['tgt_tokens']} subword tokens; instances: " +
                ", ".join(f"{k} {v}" for k, v in s["instances"].items()))
        stats["files"] = sorted([p.name for p in work.iterdir()] + ["prepare.json"])  # what --force may remove
        (work / "prepare.json").write_text(json.dumps(stats, indent=1))
        if beside:
            swap_into_place(work, destdir)
    return stats


def _learn_subwords(texts: list[str], vocab_size: int, prefixes: list[str], src_lang: str, tgt_lang: str) -> Vocab:
    """The joint SentencePiece model; an error about the text (no usable sentence) names the training files."""
    try:
        return Vocab.train(texts, vocab_size)
    except DataError as e:
        if e.path is not None:
            raise
        files = [f for p in prefixes for f in corpus_files(p, src_lang, tgt_lang) if f]
        raise DataError(e.message, ", ".join(files)) from None


def _check_destdir(destdir: Path, force: bool) -> bool:
    """Whether ``destdir`` holds prepared data that ``force`` may replace; an error if it holds
    anything else, or anything at all without ``force``. What a kill left beside it is cleaned
    first: the old directory moved aside by a replacement killed between its two renames is put
    back, half-built ones (``.NAME.new-*``) are removed."""
    for old in sorted(destdir.parent.glob(f".{destdir.name}.old-*")):
        if not destdir.exists():
            os.replace(old, destdir)
        else:
            shutil.rmtree(old, ignore_errors=True)
    for new in destdir.parent.glob(f".{destdir.name}.new-*"):
        shutil.rmtree(new, ignore_errors=True)
    if destdir.exists() and not destdir.is_dir():
        raise DocnmtError(f"{destdir} is a file, not a directory; choose another --destdir")
    if not destdir.exists() or not any(destdir.iterdir()):
        return False
    if not force:
        raise DocnmtError(f"{destdir} exists and is not empty; choose another --destdir or pass --force")
    ours = prepared_names(destdir)
    if ours is None:
        first = sorted(p.name for p in destdir.iterdir())[0]
        raise DocnmtError(f"{destdir} holds {first} but no readable prepare.json, so `docnmt prepare` did not make it, "
                          "and --force only starts over a prepared data directory: remove its files yourself or "
                          "choose another --destdir")
    foreign = sorted(p.name for p in destdir.iterdir() if p.name not in ours or p.is_dir())
    if foreign:
        raise DocnmtError(f"{destdir} holds {foreign[0]}, which `docnmt prepare` did not write, and --force only "
                          "starts over a prepared data directory: remove it yourself or choose another --destdir")
    return True


def prepared_names(destdir: Path) -> set[str] | None:
    """The names a prepared directory's prepare.json says `prepare` wrote (its ``files``; in one
    written before that list, the files of its splits), or None without a readable prepare.json."""
    try:
        record = json.loads((destdir / "prepare.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("splits"), dict):
        return None
    if isinstance(record.get("files"), list):
        return {str(name) for name in record["files"]}
    per_split = ("src.tokens.npy", "src.offsets.npy", "tgt.tokens.npy", "tgt.offsets.npy", "docs.npy", "docids.json",
                 "sentence_level.npy")
    return set(PREPARED_FILES) | {f"{split}.{name}" for split in record["splits"] for name in per_split}



def _check_sentence_lengths(corpus: Corpus, docs: list[Document], origins: list, limit: int,
                            langs: tuple[str, str], fmt: str) -> None:
    """A sentence of more than ``limit`` subword tokens is an error naming its file and line."""
    first = None
    for side, lang in ((corpus.src, langs[0]), (corpus.tgt, langs[1])):
        over = np.flatnonzero(side.lengths > limit)
        if len(over) and (first is None or over[0] < first[0]):
            first = (int(over[0]), lang, int(side.lengths[over[0]]))
    if first is None:
        return
    k, lang, n = first
    d = int(corpus.doc_of(k))
    prefix, file_doc, sent = origins[d]
    sent += k - int(corpus.doc_offsets[d])
    src, tgt = corpus_files(prefix, *langs)
    path = src if tgt is None or lang == langs[0] else tgt
    line, own = sentence_line(path, "jsonl" if tgt is None else fmt, file_doc, sent)
    where = "" if own else f"document {docs[d].docid!r}, sentence {sent + 1}: "   # the line is the document's
    raise DataError(f"{where}{n} subword tokens, more than the {limit} a sentence may have (--max-sentence-tokens)",
                    path, line)


@contextmanager
def _removed_on_failure(destdir: Path, whole: bool = False):
    """Make ``destdir``; if the block fails, leave no half-prepared directory (an empty one the
    user gave stays, empty; ``whole``: remove it, a work directory of our own)."""
    existed = destdir.exists()
    fresh = not existed or not any(destdir.iterdir())
    destdir.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if whole:
            shutil.rmtree(destdir, ignore_errors=True)
        elif fresh:
            for p in ([destdir] if not existed else list(destdir.iterdir())):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        raise


def split_stats(corpus: Corpus) -> dict:
    modes = {"sent2sent": ModeConfig("sent2sent"), "doc2sent": ModeConfig("doc2sent"),
             "doc2doc": ModeConfig("doc2doc"), "mr": ModeConfig("mr")}
    return {"documents": corpus.n_docs, "sentences": corpus.n_sents,
            "src_tokens": int(corpus.src.lengths.sum()), "tgt_tokens": int(corpus.tgt.lengths.sum()),
            "instances": {k: len(build_instances(corpus, m)) for k, m in modes.items()}}
