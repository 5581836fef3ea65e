"""``docnmt import-hf``: a Hugging Face model directory read, checked to give transformers' logits,
and written as an ordinary docnmt model directory (docs/pretrained.md)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import MODEL_DIR_FILES, WEIGHTS, atomic_write, save_weights
from ..config import Config
from ..errors import DocnmtError
from ..model import ModelConfig, Transformer
from ..vocab import PretrainedVocab
from .common import ACTIVATIONS, FAMILIES, MAX_DIFF, NOISE, RECORD, TOKENIZER_DIR, load_transformers, read_hf_config
from .tokenizer import load_tokenizer, tokenizer_files, vocab_layout
from .weights import new_rows, to_docnmt

# the files of a Hugging Face directory that are weights, not copied into the vocabulary
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".h5", ".msgpack", ".index.json")


def model_config(family: str, config: dict) -> ModelConfig:
    """The :class:`ModelConfig` of a Hugging Face config (vocabulary size and pad id are the
    vocabulary's, set when the model is built)."""
    if config["encoder_attention_heads"] != config["decoder_attention_heads"] or \
            config["encoder_ffn_dim"] != config["decoder_ffn_dim"]:
        raise DocnmtError("encoder and decoder with different head counts or feed-forward sizes are not supported")
    act = config.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise DocnmtError(f"activation {act!r} is not supported ({', '.join(ACTIVATIONS)})")
    common = dict(d_model=config["d_model"], heads=config["encoder_attention_heads"], ffn_dim=config["encoder_ffn_dim"],
                  encoder_layers=config["encoder_layers"], decoder_layers=config["decoder_layers"],
                  dropout=float(config.get("dropout", 0.1)),
                  attention_dropout=float(config.get("attention_dropout", 0.0)),
                  activation_dropout=float(config.get("activation_dropout", 0.0)),
                  max_positions=config["max_position_embeddings"], activation=ACTIVATIONS[act],
                  scale_embeddings=bool(config.get("scale_embedding", False)))
    if family == "marian":
        return ModelConfig(**common, pre_norm=False, positions="sinusoidal_halves",
                           share_embeddings=config.get("share_encoder_decoder_embeddings", True))
    if family == "mbart":
        return ModelConfig(**common, pre_norm=True, positions="learned", position_offset=2, embed_norm=True)
    return ModelConfig(**common, pre_norm=True, positions="sinusoidal_fairseq",
                       position_offset=config.get("pad_token_id", 1) + 1)


def import_hf(directory: str | Path, save_dir: str | Path, src_lang: str | None = None, tgt_lang: str | None = None,
              force: bool = False, log=print) -> dict:
    """Import the Hugging Face model in ``directory`` into the docnmt model directory ``save_dir``
    (see the package docstring); returns the record written to ``save_dir/pretrained.json``."""
    directory, save_dir = Path(directory), Path(save_dir)
    config = read_hf_config(directory)
    family = config["model_type"]
    _check_save_dir(save_dir, force)
    tok = load_tokenizer(directory, src_lang, tgt_lang)
    hf = _load_model(directory)
    sd = hf.state_dict()
    rows = sd["model.decoder.embed_tokens.weight"].size(0)
    vocab, langs, start = _vocabulary(tok, directory, config, rows, src_lang, tgt_lang)
    cfg = _imported_config(family, config, langs, sd, rows)
    model, weights, n_new = _imported_model(cfg, vocab, sd, rows, start)
    diff = check_logits(hf, model, vocab, start)
    if not diff <= MAX_DIFF:
        raise DocnmtError(f"{directory}: docnmt's logits differ from transformers' by {diff:.3g} on two test "
                          "sentences: this model uses an option docnmt does not implement; nothing was written")
    log(f"docnmt's logits equal transformers' on two test sentences up to {diff:.2e}")
    record = {"family": family, "hf_class": FAMILIES[family], "source": str(directory.resolve()),
              "src_lang": src_lang, "tgt_lang": tgt_lang, "hf_rows": rows, "hf_decoder_start": start,
              "tokenizer": type(tok).__name__, "copied_tensors": len(weights),
              "new_rows": {"<start>": f"copy of row {start} (the decoder start)",
                           "<mask>": "mean of the pretrained rows + noise", "others": "copy of </s> + noise",
                           "noise_std": f"{NOISE} x per-dimension std of the pretrained rows", "seed": 0},
              "max_abs_logit_diff": diff}
    _write(save_dir, cfg, vocab, model, record)
    log(f"imported {FAMILIES[family]} ({sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{rows} pretrained tokens + {n_new} new symbols) into {save_dir}")
    return record


def _load_model(directory: Path):
    """The Hugging Face model, in float32, in eval mode."""
    T = load_transformers()
    try:
        hf = T.AutoModelForSeq2SeqLM.from_pretrained(str(directory), local_files_only=True, dtype=torch.float32)
    except Exception as e:
        raise DocnmtError(f"{directory}: cannot read the model ({type(e).__name__}: {e})") from None
    hf.eval()
    return hf


def _vocabulary(tok, directory: Path, config: dict, rows: int, src_lang: str | None,
                tgt_lang: str | None) -> tuple[PretrainedVocab, dict, int]:
    """The vocabulary of the imported model (the tokenizer's files and the original directory's
    tokenizer and configuration files, for export-hf), the model's language-token settings, and the
    pretrained decoder start."""
    try:
        layout = vocab_layout(tok, rows, tgt_lang)
    except DocnmtError as e:
        raise DocnmtError(f"{directory}: {e}") from None
    meta, files = tokenizer_files(tok, directory, layout["meta"])
    langs = layout["langs"]
    start = langs.pop("start")
    if start is None:
        start = config.get("decoder_start_token_id")
    start = tok.eos_token_id if start is None else start
    meta["hf"] = {"family": config["model_type"], "src_lang": src_lang, "tgt_lang": tgt_lang, "rows": rows,
                  "start": start}
    for f in sorted(directory.iterdir()):     # the original tokenizer and configuration, for export-hf
        if f.is_file() and not f.name.endswith(WEIGHT_FILES):
            files[f"{TOKENIZER_DIR}/{f.name}"] = f.read_bytes()
    return PretrainedVocab({"backend": PretrainedVocab.backend, **meta}, files), langs, start


def _imported_config(family: str, config: dict, langs: dict, sd: dict, rows: int) -> Config:
    """The docnmt config of the imported model: its architecture, language tokens, output rows."""
    cfg = Config()
    cfg.model = model_config(family, config)
    for key, value in langs.items():
        setattr(cfg.model, key, value)
    cfg.model.output_tokens = rows       # the new symbols are not predicted until a training run uses them
    lm_head, embed = sd["lm_head.weight"], sd["model.decoder.embed_tokens.weight"]
    cfg.model.tie_output = lm_head.data_ptr() == embed.data_ptr() or torch.equal(lm_head, embed)
    cfg.model.output_bias = "final_logits_bias" in sd and bool(sd["final_logits_bias"].abs().max() > 0)
    return cfg


def _imported_model(cfg: Config, vocab, sd: dict, rows: int, start: int) -> tuple[Transformer, dict, int]:
    """The docnmt model with the pretrained weights and docnmt's symbols as new rows
    (docs/pretrained.md#what-is-copied-and-what-is-new); its weights and the number of new rows."""
    weights = to_docnmt(sd, cfg.model)
    sources = []
    for name in vocab.extra[rows - vocab.n_pieces:]:
        sources.append(-start - 1 if name == "<start>" else None if name == "<mask>" else vocab.eos)
    for key, w in weights.items():
        if key.endswith("embed.table.weight") or key == "output.weight":
            weights[key] = new_rows(w, len(sources), sources)
        elif key == "final_logits_bias":
            weights[key] = new_rows(w[:, None], len(sources), sources)[:, 0]
    model = Transformer(_sized(cfg, vocab).model)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or [k for k in missing if k != "decoder.embed.table.weight"]:
        raise DocnmtError(f"internal: weights do not map ({missing[:3]}, {unexpected[:3]})")
    return model, weights, len(sources)


def _sized(cfg: Config, vocab) -> Config:
    cfg.model.vocab_size, cfg.model.pad_id = len(vocab), vocab.pad
    return cfg


def _check_save_dir(save_dir: Path, force: bool) -> None:
    if save_dir.exists() and any(save_dir.iterdir()):
        if not force:
            raise DocnmtError(f"{save_dir} exists and is not empty; choose another --save-dir or pass --force")
        if not (save_dir / "config.yaml").exists():
            raise DocnmtError(f"{save_dir} is not a docnmt model directory (no config.yaml), and --force only "
                              "replaces those: remove it yourself or choose another --save-dir")


def _write(save_dir: Path, cfg: Config, vocab, model: Transformer, record: dict) -> None:
    if save_dir.exists():           # (--force over a docnmt model directory) only docnmt's names: a user's file stays
        for child in save_dir.iterdir():
            if child.name in MODEL_DIR_FILES:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    save_dir.mkdir(parents=True, exist_ok=True)
    cfg.dump(save_dir / "config.yaml")
    vocab.save(save_dir)
    save_weights(model, save_dir / WEIGHTS)
    atomic_write(save_dir / RECORD, lambda t: Path(t).write_text(json.dumps(record, indent=1)))


def hf_batch(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, hf_start: int) -> dict:
    """The Hugging Face model's inputs equal to docnmt's batch (``src``, ``tgt_in``): the source
    with its language token, and the decoder input with the pretrained decoder start instead of
    ``<start>`` and the forced language token after it."""
    cfg = model.cfg
    ids = model.with_source_language(src)
    dec = tgt_in.clone()
    dec[:, 0] = hf_start
    if cfg.tgt_lang_token >= 0:
        dec = torch.cat([dec[:, :1], dec.new_full((dec.size(0), 1), cfg.tgt_lang_token), dec[:, 1:]], 1)
    return {"input_ids": ids, "attention_mask": ids.ne(cfg.pad_id), "decoder_input_ids": dec}


def hf_logits(hf, model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, hf_start: int) -> torch.Tensor:
    """transformers' logits for docnmt's batch, at docnmt's decoder positions (the forced
    language token's position dropped): (B, T, rows of the Hugging Face model)."""
    logits = hf(**hf_batch(model, src, tgt_in, hf_start)).logits
    return logits[:, 1:] if model.cfg.tgt_lang_token >= 0 else logits


@torch.no_grad()
def check_logits(hf, model: Transformer, vocab, hf_start: int) -> float:
    """Max |Δ| between transformers' and docnmt's teacher-forced logits (over the pretrained
    rows) on two short sentence pairs."""
    from ..data import pad_batch
    pairs = [("This is a short test.", "Das ist ein kurzer Test."), ("A second, longer sentence.", "Noch ein Satz.")]
    src = pad_batch([np.asarray(vocab.encode(s, "src") + [vocab.eos]) for s, _ in pairs], vocab.pad)
    tgt = pad_batch([np.asarray([vocab.bos] + vocab.encode(t, "tgt")) for _, t in pairs], vocab.pad)
    ref = hf_logits(hf, model, src, tgt, hf_start)
    ours = model.eval()(src, tgt)[..., : ref.size(-1)]
    real = tgt.ne(vocab.pad)
    return float((ref[real] - ours[real]).abs().max())


