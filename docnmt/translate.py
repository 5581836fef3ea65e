"""Translating whole documents with a trained model, walking each document as its mode needs.

Sent2Sent translates sentence by sentence; Doc2Sent feeds the previous source sentences as
context; Doc2Doc (and MR) splits each document into instances the model can take (the training
split's rule on source lengths), translates them and splits each output back into sentences with
the recovery rules of docs/methods/baselines.md. Every source sentence gets exactly one output
line; sentences whose translation came back empty or merged are counted in the coverage report.
How the documents are walked (one round of instances, sliding windows, two passes) is the
decoding walk :func:`docnmt.methods.decode_walk` picks; start tokens and search constraints are
the extensions' hooks (:mod:`docnmt.methods`). Decoding settings are a full
:class:`~docnmt.config.DecodeConfig` (core and extension settings); a bare
:class:`~docnmt.search.SearchConfig` given to :meth:`Translator.translate` is completed from the
model's own ``decode:`` section.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import engines, fallback, methods
from .attention import AttentionSettings
from .checkpoint import WEIGHTS, load_weights
from .config import DECODE_PRECISIONS, Config, DecodeConfig, section_class
from .data import Corpus, InstanceSet, model_inputs
from .document import Document
from .errors import DataError, DocnmtError
from .forced_context import ForcedContext
from .methods import build_model
from .model import Transformer
from .progress_log import progress_bar
from .search import NoRepeatNgram, SearchConfig, beam_search, with_processor
from .vocab import Vocab


@dataclass
class CoverageReport:
    documents: int = 0
    sentences: int = 0
    instances: int = 0
    malformed_instances: int = 0      # separator structure not as expected (repaired by the recovery rules)
    empty_sentences: int = 0          # source sentences whose translation came back empty
    documents_with_problems: list = field(default_factory=list)
    walk: dict = field(default_factory=dict)     # what the decoding walk reports (two-pass decoding: first_pass)
    walk_summary: str = ""                        # ... and says of itself in the summary line
    lost: set = field(default_factory=set)        # sentences an output lost (empty or merged: docnmt.fallback)
    repaired: set = field(default_factory=set)    # ... of them translated again alone, not empty now
    fallback: dict | None = None                  # what the fallback did (None: off)

    @property
    def repaired_sentences(self) -> int:
        return len(self.repaired)

    @property
    def documents_fully_recovered(self) -> int:
        return self.documents - len(self.documents_with_problems)

    def summary(self) -> str:
        text = (f"coverage: {self.documents_fully_recovered}/{self.documents} documents fully recovered, "
                f"{self.empty_sentences}/{self.sentences} sentences empty, "
                f"{self.malformed_instances}/{self.instances} instances with merged or missing sentences "
                "(repaired by the recovery rules)")
        if self.fallback is not None:
            text += (f"; fallback: {self.fallback['sentences']} lost sentences translated again alone, "
                     f"{self.repaired_sentences} repaired")
        return text + (f"; {self.walk_summary}" if self.walk_summary else "")

    def add(self, other: "CoverageReport", offset: int) -> None:
        """Add the report of more documents translated apart (a stream's next document, a
        journal's next chunk): its sentence numbers are taken as ``offset`` on."""
        for name in ("documents", "sentences", "instances", "malformed_instances", "empty_sentences"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.documents_with_problems += other.documents_with_problems
        self.lost |= {offset + i for i in other.lost}
        self.repaired |= {offset + i for i in other.repaired}
        if other.fallback is not None:
            self.fallback = {**other.fallback, "sentences": other.fallback["sentences"]
                             + (self.fallback or {}).get("sentences", 0)}
        self.walk.update(other.walk)
        self.walk_summary = other.walk_summary or self.walk_summary

    def as_dict(self) -> dict:
        """The report as ``docnmt translate --report`` writes it (JSON), with the paper's
        Table VII figure, documents fully recovered out of all, spelled out; then what the decoding
        walk reports (after two-pass decoding ``first_pass``: what translated pass 1, ``by``: model,
        i.e. this model itself, sentence_model or file; ``path``). ``repaired_sentences``: sentences
        the fallback translated again alone (docnmt.fallback); ``fallback``: what it did (``by``
        model or sentence_model, ``path``, ``sentences`` it translated again), null when off."""
        return {"documents": self.documents,
                "documents_fully_recovered": self.documents_fully_recovered,
                "sentences": self.sentences, "empty_sentences": self.empty_sentences,
                "instances": self.instances, "malformed_instances": self.malformed_instances,
                "documents_with_problems": list(self.documents_with_problems),
                "repaired_sentences": self.repaired_sentences, "fallback": self.fallback,
                **{k: dict(v) if isinstance(v, dict) else v for k, v in self.walk.items()}}


class Translator:
    """A loaded model plus its vocabulary and config; ``translate`` takes documents."""

    def __init__(self, model: Transformer, vocab: Vocab, cfg: Config, device: str | torch.device = "cpu"):
        self.model, self.vocab, self.cfg = model.eval().to(device), vocab, cfg
        self.device = torch.device(device)
        self.model.attention_settings = AttentionSettings.of(cfg.train)   # this model's own, not the process's
        self.joiner = methods.data_joiner(vocab, cfg.data)
        self.method = methods.get(cfg.method_name)

    @classmethod
    def load(cls, model_dir: str | Path, weights: str | Path | None = None, device: str | None = None) -> "Translator":
        model_dir = Path(model_dir)
        if not (model_dir / "config.yaml").exists():
            raise DocnmtError(f"{model_dir}: not a docnmt model directory (no config.yaml)")
        cfg = Config.load(model_dir / "config.yaml")
        vocab = Vocab.load(model_dir)
        model = build_model(cfg, vocab)
        weights = Path(weights) if weights else model_dir / WEIGHTS
        if weights.is_dir():
            weights = weights / WEIGHTS
        if not weights.exists():
            raise DocnmtError(f"{weights}: no weights (has training saved a model yet?)")
        load_weights(model, weights)
        out = cls(model, vocab, cfg, check_device(device))
        out.weights_path = weights          # what --engine ctranslate2 converts (its cache is keyed on it)
        return out

    def banned_ids(self, sentence_targets: bool) -> list[int]:
        """Special tokens the search never generates: all but the format's own (separators in
        document targets, ``<s>``/``</s>`` in G-Transformer's) and the end token."""
        v = self.vocab
        specials = {v.pad, v.bos, v.eos, *self.joiner.sep_ids,
                    *(v.id(s) for s in ("<mask>", "<eod>") if s in v.symbol_ids)}
        return sorted(specials - self.joiner.output_specials(sentence_targets) - {self.joiner.end})

    def start_token(self, search: DecodeConfig, first: int = 1) -> int:
        """The token decoding starts from: an extension's, or the format's (for an instance whose
        first target sentence is sentence ``first`` of its document)."""
        token = methods.start_token(self, search, first)
        return self.joiner.start_for(first) if token is None else token

    def decode_config(self, search: SearchConfig | None = None) -> DecodeConfig:
        """``search`` as a full decoding config: the model's ``decode:`` section when None; a bare
        :class:`SearchConfig` (or a core-only DecodeConfig) completed from that section."""
        full = section_class("decode")
        if search is None:
            return self.cfg.decode
        if isinstance(search, full):
            return search
        return full(**{**vars(self.cfg.decode), **vars(search)})

    def translate(self, docs: list[Document] | list[list[str]], search: SearchConfig | None = None,
                  progress: bool = False, origin: str = "input",
                  context: dict | None = None) -> tuple[list[Document], CoverageReport]:
        """Translate documents (``Document`` objects or lists of sentences). Returns documents
        with ``tgt`` filled (one string per source sentence; ``meta["nbest"]`` when nbest > 1;
        ``meta["repaired"]``: the sentences the fallback translated again) and a coverage report.
        ``context`` (``{"src": [...], "tgt": [...]}``; or a document's ``meta["context"]``):
        earlier sentences of the first document and their translations, forced as its context
        (:mod:`docnmt.forced_context`); only the new sentences come back."""
        docs = [d if isinstance(d, Document) else Document(str(i), list(d)) for i, d in enumerate(docs)]
        docs, plan = ForcedContext.of([Document(d.docid, d.src, None, dict(d.meta)) for d in docs], context)
        search = self.decode_config(search)
        max_pos = self.cfg.model.max_positions
        corpus = Corpus.encode(docs, self.vocab, max_sentence_tokens=max_pos - 2, origin=origin)
        walk = methods.decode_walk(self.cfg, search)
        rounds = walk.rounds(self, corpus, search)
        if not self.cfg.data.is_document_level:     # (document instances: as long as the budget asks, limits.py)
            check_lengths(InstanceSet(corpus, rounds[0][0], self.joiner), max_pos, origin)
        outputs: list[list[list[int]]] = [[] for _ in range(corpus.n_sents)]
        report = CoverageReport(documents=len(docs), sentences=corpus.n_sents,
                                instances=sum(len(rows) for rows, _ in rounds))
        bad_docs: set[int] = set()     # documents with an instance whose sentences came back merged
        bar = progress_bar(total=report.instances, desc="translate", unit="inst", disable=not progress, leave=False)

        def decode(rows, new_from, forced_from=None, outputs=outputs):
            lost = report.lost if outputs is main else set()      # a first pass loses nothing for good
            self._decode(corpus, rows, new_from, outputs, search, report, bad_docs, bar, forced_from, lost)
        main = outputs
        if plan:
            plan.start(self, corpus, outputs)
        walk.run(self, docs, corpus, rounds, search, plan.wrap(decode, corpus) if plan else decode)
        report.walk, report.walk_summary = dict(walk.report), walk.summary()
        if fallback.active(self.cfg, search):
            def alone(rows, out):      # the fallback's sentence instances: not in the report's counts
                self._decode(corpus, rows, rows[:, 2].copy(), out, search, CoverageReport(), set(), bar)
            fallback.repair(self, docs, corpus, outputs, report, bad_docs, search, alone, plan.context if plan else ())
        bar.close()
        docs = self._assemble(docs, corpus, outputs, report, bad_docs, plan.context if plan else ())
        fallback.mark(docs, corpus, report)
        return (plan.strip(docs, report) if plan else docs), report

    def _decode(self, corpus, rows, new_from, outputs, search, report, bad_docs, bar, forced_from=None,
                lost=None) -> None:
        """Decode instances ``rows``, forcing sentences [target start, ``new_from``) from
        ``forced_from`` (default: ``outputs`` of earlier rounds) and adding the translations of
        the others to ``outputs``; ``lost`` gets the sentences an output lost (:mod:`.fallback`)."""
        forced_from = outputs if forced_from is None else forced_from
        iset = InstanceSet(corpus, rows, self.joiner)
        sentence_targets = not self.cfg.data.is_document_level
        batches = iset.batches(search.max_tokens, with_target=False, shuffle=False, order=self.cfg.data.batch_order,
                               max_sentences=search.max_sentences)
        amp = autocast_dtype(search.precision, self.device)
        model, run = engines.model_for(self, search), engines.search_for(self, search) or beam_search
        for idx in batches:
            batch = iset.collate(idx)
            src = batch["src"].to(self.device)
            inputs = {k: v.to(self.device) for k, v in model_inputs(batch).items()}
            prefix = [self.joiner.prefix([forced_from[i][0] for i in range(int(rows[k, 2]), int(new_from[k]))],
                                         int(iset.tfirst[k])) for k in idx]
            start = torch.tensor([self.start_token(search, int(iset.tfirst[k])) for k in idx], device=self.device)
            extra = methods.search_args(self, search, rows[idx], src)
            if search.no_repeat_ngram_size:
                extra = with_processor(extra, NoRepeatNgram(search.no_repeat_ngram_size, self.vocab.word_ids))
            # the sentences each instance translates: the output limit allows max_len_b for each
            sentences = torch.tensor([int(rows[k, 1]) - int(new_from[k]) for k in idx]).clamp(min=1)
            with torch.autocast(self.device.type, dtype=amp or torch.float32, enabled=amp is not None):
                hyps = run(model, src, search, start, self.joiner.end,
                           banned=self.banned_ids(sentence_targets), prefix=prefix if any(prefix) else None,
                           inputs=inputs, sentences=sentences, **extra)
            for k, forced, nbest in zip(idx, prefix, hyps):
                _, end, tstart = (int(x) for x in rows[k])
                for rank, hyp in enumerate(nbest):
                    sents, ok = self.joiner.split(forced + hyp.tokens, end - tstart)
                    if rank == 0 and not ok:
                        report.malformed_instances += 1
                        bad_docs.add(int(corpus.doc_of(tstart)))
                        if lost is not None:
                            lost.update(tstart + j for j in fallback.lost_sentences(self.joiner, forced + hyp.tokens,
                                                                                    end - tstart)
                                        if j >= int(new_from[k]) - tstart)
                    for j in range(int(new_from[k]) - tstart, end - tstart):
                        outputs[tstart + j].append(Scored(sents[j], hyp.score))
            bar.update(len(idx))

    def _assemble(self, docs, corpus, outputs, report, bad_docs, context=()) -> list[Document]:
        """The documents with their translations; the report counts the empty sentences and the
        documents with problems, a context's sentences (decoded and dropped) left out."""
        for d, doc in enumerate(docs):
            texts = [[self.vocab.decode(t) for t in outputs[i]] for i in corpus.doc_range(d)]
            doc.tgt = [n[0] if n else "" for n in texts]
            if any(len(n) > 1 for n in texts):
                doc.meta["nbest"] = texts
                doc.meta["nbest_scores"] = [[getattr(t, "score", None) for t in outputs[i]]
                                            for i in corpus.doc_range(d)]
            empty = sum(1 for i, t in zip(corpus.doc_range(d), doc.tgt) if not t.strip() and i not in context)
            report.empty_sentences += empty
            if empty or d in bad_docs:
                report.documents_with_problems.append(doc.docid)
        return docs


class Scored(list):
    """The tokens of one output sentence, with ``score``: the length-normalised log-probability of
    the beam hypothesis it comes from (the sentence's own for sentence-level models, its instance's
    for document-level ones)."""

    def __init__(self, tokens, score: float):
        super().__init__(tokens)
        self.score = score


def check_device(device: str | None) -> torch.device:
    """``device`` (default: CUDA when there is one) as a torch device, or a clear error."""
    if not device:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise DocnmtError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DocnmtError(f"device {device!r} asked for, but this machine has no CUDA GPU (use --device cpu)")
    return dev


def autocast_dtype(precision: str, device: torch.device):
    """Autocast dtype for decoding: bf16 on CUDA by default; on CPU only when asked (bf16
    matrix products are several times faster on CPUs with AVX512-BF16 or AMX)."""
    if precision not in DECODE_PRECISIONS:
        raise DocnmtError(f"unknown decoding precision {precision!r}: use one of {', '.join(DECODE_PRECISIONS)}")
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def load(model_dir: str | Path, weights: str | Path | None = None, device: str | None = None) -> Translator:
    """``docnmt.load(model_dir).translate(documents)``."""
    return Translator.load(model_dir, weights, device)


def check_lengths(iset: InstanceSet, max_positions: int, origin: str) -> None:
    too_long = np.nonzero(iset.src_lens > max_positions)[0]
    if len(too_long):
        a = int(iset.rows[too_long[0], 0])
        raise DataError(f"an input of {int(iset.src_lens[too_long[0]])} tokens (from sentence {a + 1}) is longer "
                        f"than the model's {max_positions} positions", origin)
