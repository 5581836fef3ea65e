"""``docnmt export-hf``: a docnmt model (imported, or a native post-LN Transformer with a
SentencePiece vocabulary) written as a Hugging Face directory: model, generation settings and
tokenizer (docs/pretrained.md#export)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from ..checkpoint import WEIGHTS, current_umask, swap_into_place, work_dir_beside
from ..config import Config
from ..errors import DocnmtError
from ..export_dir import check_replaceable
from ..vocab import PretrainedVocab
from .common import FAMILIES, TOKENIZER_DIR, load_transformers
from .tokenizer import export_tokenizer
from .weights import interleaved_to_halves, permute_hidden, to_hf

HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}
EXPORT_RECORD = "docnmt.json"       # what marks a directory export-hf wrote (and --force may replace)


def _exportable(cfg: Config, vocab, native: bool) -> None:
    """A clear error for models with no Hugging Face equivalent."""
    m, why = cfg.model, []
    if cfg.method_name != "transformer":
        why.append(f"method {cfg.method_name}")
    if cfg.data.context_input:
        why.append("a context input")
    if m.length_aware or getattr(m, "alibi", False):
        why.append("length-aware attention" if m.length_aware else "ALiBi")
    if getattr(m, "sentence_positions", False):
        why.append("sentence positions")
    if native and (m.pre_norm or m.positions != "sinusoidal" or m.position_offset or m.embed_norm):
        why.append("a native pre-LN model (MarianMTModel, the one equivalent, is post-LN)")
    if why:
        raise DocnmtError("export-hf writes Transformer models (sentence-level, Doc2Sent, Doc2Doc) that have a "
                          f"Hugging Face equivalent; this one has {', '.join(why)}")
    if native and getattr(vocab, "backend", "") != "spm":
        raise DocnmtError("export-hf needs a SentencePiece vocabulary (the Moses+BPE pipeline has no "
                          "Hugging Face tokenizer)")



def export_hf(model_dir: str | Path, out_dir: str | Path, weights: str | Path | None = None,
              force: bool = False, log=print) -> dict:
    """Write the docnmt model in ``model_dir`` as a Hugging Face directory ``out_dir`` (model,
    generation settings, tokenizer) and return what ``out_dir/docnmt.json`` records
    (docs/pretrained.md#export).

    An imported model whose new symbols are not predicted yet (``output_tokens``) is written back
    as the original model: its own rows and decoder start. Any other model is written with all of
    docnmt's rows and ``<start>`` as decoder start; the tokenizer gets docnmt's symbols as special
    tokens when their ids can be docnmt's (``symbols_in_tokenizer``)."""
    from ..vocab import Vocab
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not (model_dir / "config.yaml").exists():
        raise DocnmtError(f"{model_dir}: not a docnmt model directory (no config.yaml)")
    if out_dir.resolve() == model_dir.resolve():
        raise DocnmtError(f"{out_dir}: the export would overwrite the model; write it to another directory")
    check_replaceable(out_dir, force, "export-hf", EXPORT_RECORD, _exported_names(out_dir))
    cfg = Config.load(model_dir / "config.yaml")
    vocab = Vocab.load(model_dir)
    native = not isinstance(vocab, PretrainedVocab)
    record = None if native else vocab.meta["hf"]
    _exportable(cfg, vocab, native)
    T = load_transformers()
    sd, rows, start = _state_dict(cfg, vocab, model_dir, weights, record)
    banned = _banned(cfg, vocab, rows)
    family, hf = _hf_model(T, cfg, vocab, model_dir, sd, rows, start, record)
    m = cfg.model
    hf.generation_config = T.GenerationConfig(
        decoder_start_token_id=start, eos_token_id=vocab.eos, pad_token_id=vocab.pad,
        forced_bos_token_id=m.tgt_lang_token if m.tgt_lang_token >= 0 else None, num_beams=cfg.decode.beam,
        length_penalty=cfg.decode.lenpen, max_length=m.max_positions, suppress_tokens=banned)
    final, out_dir = out_dir, work_dir_beside(out_dir)      # written beside it, renamed into place when complete
    try:
        hf.save_pretrained(str(out_dir))
        symbols = export_tokenizer(vocab, model_dir, out_dir, record, rows)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    info = {"family": FAMILIES[family], "docnmt_model": str(model_dir.resolve()), "mode": cfg.data.mode,
            "separator": cfg.data.separator if cfg.data.is_document_level else None,
            "tokens": rows, "decoder_start_token_id": start, "suppressed_tokens": banned,
            "symbols": {s: vocab.symbol_ids[s] for s in vocab.extra if vocab.symbol_ids[s] < rows and s in symbols},
            "symbols_in_tokenizer": all(symbols.values())}
    info["files"] = sorted([f.name for f in out_dir.iterdir()] + [EXPORT_RECORD])     # what --force may replace
    (out_dir / EXPORT_RECORD).write_text(json.dumps(info, indent=1))
    _put_in_place(out_dir, final)
    log(f"wrote {FAMILIES[family]} ({rows} tokens) to {final}" + (
        "" if info["symbols_in_tokenizer"] else "; docnmt's symbols are not in its tokenizer (ids in docnmt.json)"))
    return info


def _state_dict(cfg: Config, vocab, model_dir: Path, weights, record) -> tuple[dict, int, int]:
    """The model's weights (float32), its output rows and decoder start: an imported model whose
    new symbols are not predicted yet is cut back to the original model's rows and start."""
    from ..checkpoint import load_weights
    from ..methods import build_model
    model = build_model(cfg, vocab)
    load_weights(model, Path(weights) if weights else model_dir / WEIGHTS)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    rows, start = len(vocab), vocab.bos
    if record and cfg.model.output_tokens:           # the original model: its rows, its decoder start
        rows, start = cfg.model.output_tokens, record["start"]
        for k in [k for k in sd if k.endswith(("table.weight", "output.weight", "final_logits_bias"))]:
            sd[k] = sd[k][:rows]
    return sd, rows, start


def _banned(cfg: Config, vocab, rows: int) -> list[int]:
    """Tokens generation never outputs: padding, ``<start>``, ``<mask>``, ``<eod>``, and for a
    sentence-level model the separators."""
    banned = sorted({vocab.pad, vocab.bos, *(vocab.id(s) for s in ("<mask>", "<eod>") if s in vocab.symbol_ids)}
                    | (set() if cfg.data.is_document_level else {vocab.symbol_ids[s] for s in vocab.extra
                                                                 if s.startswith("<sep")}))
    return [i for i in banned if i < rows]


def _hf_model(T, cfg: Config, vocab, model_dir: Path, sd: dict, rows: int, start: int, record) -> tuple[str, object]:
    """The family and the Hugging Face model holding ``sd``: a native model as MarianMTModel (its
    hidden dimensions reordered for Marian's sinusoids), an imported one as its own class with its
    original config's other settings."""
    m = cfg.model
    common = dict(vocab_size=rows, d_model=m.d_model, encoder_layers=m.encoder_layers,
                  decoder_layers=m.decoder_layers, encoder_attention_heads=m.heads, decoder_attention_heads=m.heads,
                  encoder_ffn_dim=m.ffn_dim, decoder_ffn_dim=m.ffn_dim, dropout=m.dropout,
                  attention_dropout=m.attention_dropout, activation_dropout=m.activation_dropout,
                  activation_function=HF_ACTIVATION[m.activation], max_position_embeddings=m.max_positions,
                  scale_embedding=m.scale_embeddings, pad_token_id=vocab.pad, eos_token_id=vocab.eos,
                  decoder_start_token_id=start, forced_eos_token_id=vocab.eos, tie_word_embeddings=m.tie_output)
    if record is None:
        family = "marian"
        sd = permute_hidden(sd, interleaved_to_halves(m.d_model))
        hf_cfg = T.MarianConfig(**common, share_encoder_decoder_embeddings=m.share_embeddings)
    else:
        family = record["family"]
        original = json.loads((model_dir / TOKENIZER_DIR / "config.json").read_text())
        keep = {k: v for k, v in original.items()
                if k not in common and not k.startswith(("_", "architectures", "transformers_version"))}
        klass = {"marian": T.MarianConfig, "mbart": T.MBartConfig, "m2m_100": T.M2M100Config}[family]
        hf_cfg = klass(**{**keep, **common})
    hf_sd = to_hf(sd, m)
    if "final_logits_bias" not in hf_sd and family != "m2m_100":
        hf_sd["final_logits_bias"] = torch.zeros(1, rows)
    hf = getattr(T, FAMILIES[family])(hf_cfg)
    missing, unexpected = hf.load_state_dict(hf_sd, strict=False)
    missing = [k for k in missing if "embed_positions" not in k and not _tied(k)]
    if missing or unexpected:
        raise DocnmtError(f"internal: the exported weights do not fit {FAMILIES[family]} "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    return family, hf


def _exported_names(out_dir: Path) -> set[str]:
    """The files an earlier export lists in its docnmt.json (one written before that list: the
    names a Hugging Face model and tokenizer directory holds)."""
    try:
        files = json.loads((out_dir / EXPORT_RECORD).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        files = None
    if isinstance(files, list):
        return {str(f) for f in files}
    return {EXPORT_RECORD, "config.json", "generation_config.json", WEIGHTS, "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "added_tokens.json", "vocab.json", "source.spm", "target.spm",
            "sentencepiece.bpe.model", "spm.model"}


def _put_in_place(work: Path, out_dir: Path) -> None:
    """Move the finished export ``work`` to ``out_dir`` (an earlier export there, or an empty or
    absent directory: checked by check_replaceable), its files readable as plain writes' would be."""
    for f in work.iterdir():            # safetensors and tempfile write 0600
        os.chmod(f, 0o666 & ~current_umask())
    swap_into_place(work, out_dir)


def _tied(key: str) -> bool:
    return key == "lm_head.weight" or key.endswith("embed_tokens.weight")
