"""Hugging Face translation models in and out of docnmt (``docnmt import-hf`` / ``export-hf``,
docs/pretrained.md).

Import reads a local Hugging Face directory of a ``MarianMTModel`` (OPUS-MT),
``MBartForConditionalGeneration`` (mBART-25, mBART-50) or ``M2M100ForConditionalGeneration``
(M2M-100, NLLB-200) with its tokenizer and writes an ordinary docnmt model directory: the one
Transformer configured as that architecture (:class:`~docnmt.model.ModelConfig`'s options), the
weights under docnmt's names, and the tokenizer with the model's own ids
(:class:`~docnmt.vocab.PretrainedVocab`). docnmt's symbols become new embedding rows
(:func:`new_rows`). Export writes such a model (imported, or a native post-LN one) back in the
Hugging Face layout.

This is the only module that imports ``transformers``, and only inside the functions that need
it; nothing is ever downloaded (offline mode, local files only).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from .checkpoint import WEIGHTS, atomic_write, current_umask, save_weights, swap_into_place, work_dir_beside
from .config import Config
from .errors import DocnmtError
from .model import ModelConfig, Transformer
from .vocab import PretrainedVocab, default_symbols

# the Hugging Face classes docnmt reads and writes, by ``model_type`` of config.json
FAMILIES = {"marian": "MarianMTModel", "mbart": "MBartForConditionalGeneration",
            "m2m_100": "M2M100ForConditionalGeneration"}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "swish": "silu", "silu": "silu"}
RECORD = "pretrained.json"       # what import-hf copied and added (a record for people; nothing reads it)
TOKENIZER_DIR = "hf_tokenizer"    # the original tokenizer and config files, part of the vocabulary, for export-hf
NOISE = 0.01                      # new rows: std of their noise, as a share of the pretrained rows' std
MAX_DIFF = 1e-3                   # import-hf refuses a model whose logits differ more from transformers'


def _transformers():
    """``transformers``, in offline mode (this module never downloads)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import transformers
    except ModuleNotFoundError:
        raise DocnmtError("importing and exporting Hugging Face models needs transformers: "
                          "pip install docnmt[hf]") from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def read_hf_config(directory: Path) -> dict:
    """config.json of a Hugging Face directory, checked to be a model family docnmt reads."""
    path = Path(directory) / "config.json"
    if not path.exists():
        raise DocnmtError(f"{directory}: not a Hugging Face model directory (no config.json)")
    config = json.loads(path.read_text(encoding="utf-8"))
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise DocnmtError(f"{directory}: model_type {kind!r} is not supported; docnmt imports "
                          f"{', '.join(FAMILIES.values())}")
    return config


# --------------------------------------------------------------------------------------------
# Weight names: Hugging Face <-> docnmt
# --------------------------------------------------------------------------------------------

def layer_names(side: str, i: int) -> list[tuple[str, str]]:
    """(docnmt prefix, Hugging Face prefix) of the modules of encoder or decoder layer ``i``;
    an attention maps to ``in_proj`` (q, k, v stacked) and ``out_proj``."""
    d, h = f"{side}.layers.{i}.sublayers", f"model.{side}.layers.{i}"
    attn = [("self_attn", "self_attn_layer_norm")] + ([("encoder_attn", "encoder_attn_layer_norm")]
                                                       if side == "decoder" else [])
    out = []
    for k, (a, norm) in enumerate(attn):
        out += [(f"{d}.{k}.attn", f"{h}.{a}"), (f"{d}.{k}.norm", f"{h}.{norm}")]
    k = len(attn)
    return out + [(f"{d}.{k}.fc1", f"{h}.fc1"), (f"{d}.{k}.fc2", f"{h}.fc2"),
                  (f"{d}.{k}.norm", f"{h}.final_layer_norm")]


def name_pairs(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(docnmt name, Hugging Face name) of every parameter but the embedding tables and the
    output layer. An attention's docnmt ``in_proj`` stacks three Hugging Face tensors: its
    Hugging Face name holds ``{}`` where ``q``, ``k`` and ``v`` go."""
    out = []
    for side, n in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        if cfg.positions == "learned":
            out.append((f"{side}.embed.positions.weight", f"model.{side}.embed_positions.weight"))
        names = []
        if cfg.embed_norm:
            names.append((f"{side}.embed.norm", f"model.{side}.layernorm_embedding"))
        if cfg.pre_norm:
            names.append((f"{side}.final_norm", f"model.{side}.layer_norm"))
        for i in range(n):
            for d, h in layer_names(side, i):
                names += [(f"{d}.in_proj", f"{h}.{{}}_proj"), (f"{d}.out_proj", f"{h}.out_proj")] \
                    if d.endswith(".attn") else [(d, h)]
        out += [(f"{d}.{p}", f"{h}.{p}") for d, h in names for p in ("weight", "bias")]
    return out


def to_docnmt(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """docnmt's state dict of the Hugging Face one ``hf`` (embeddings as they are in ``hf``,
    without docnmt's new rows)."""
    out = {}
    for side in ("encoder", "decoder"):
        out[f"{side}.embed.table.weight"] = hf.get(f"model.{side}.embed_tokens.weight", hf.get("model.shared.weight"))
    for d, h in name_pairs(cfg):
        out[d] = torch.cat([hf[h.format(x)] for x in "qkv"]) if "{}" in h else hf[h]
    if not cfg.tie_output:
        out["output.weight"] = hf["lm_head.weight"]
    if cfg.output_bias:
        out["final_logits_bias"] = hf["final_logits_bias"].reshape(-1)
    if cfg.share_embeddings:
        del out["decoder.embed.table.weight"]
    return out


def to_hf(sd: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The inverse of :func:`to_docnmt`: Hugging Face names (embeddings shared as
    ``model.shared.weight`` when they are)."""
    out = {}
    for side in ("encoder", "decoder"):
        table = sd.get(f"{side}.embed.table.weight", sd["encoder.embed.table.weight"])
        out["model.shared.weight" if cfg.share_embeddings else f"model.{side}.embed_tokens.weight"] = table
    for d, h in name_pairs(cfg):
        out.update(zip(map(h.format, "qkv"), sd[d].chunk(3)) if "{}" in h else [(h, sd[d])])
    out["lm_head.weight"] = sd["output.weight"] if not cfg.tie_output else out.get(
        "model.shared.weight", out.get("model.decoder.embed_tokens.weight"))
    if cfg.output_bias:
        out["final_logits_bias"] = sd["final_logits_bias"].reshape(1, -1)
    return {k: v.contiguous() for k, v in out.items()}


# --------------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------------

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


def _special_ids(tok, rows: int) -> set[int]:
    """Ids of the tokenizer's special and added tokens, its language tokens, and the rows it has
    no token for."""
    ids = set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}))
    ids |= set(getattr(tok, "lang_token_to_id", {}).values())
    return ids | set(range(len(tok), rows))


def _framing(tok, sample: str) -> tuple[list[int], list[int], list[int], list[int]]:
    """What the tokenizer puts around the pieces of a source and of a target sentence:
    (source prefix, source suffix, target prefix, target suffix)."""
    out = []
    for side in ({"text": sample}, {"text_target": sample}):
        ids, pieces = tok(**side).input_ids, tok(**side, add_special_tokens=False).input_ids
        k = next(i for i in range(len(ids)) if ids[i: i + len(pieces)] == pieces)
        out += [ids[:k], ids[k + len(pieces):]]
    return tuple(out)


def load_tokenizer(directory: Path, src_lang: str | None, tgt_lang: str | None):
    T = _transformers()
    try:
        tok = T.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as e:     # a missing or broken tokenizer file: transformers' own message
        raise DocnmtError(f"{directory}: cannot read the tokenizer ({type(e).__name__}: {e})") from None
    if getattr(tok, "separate_vocabs", False):
        raise DocnmtError(f"{directory}: Marian models with separate source and target vocabularies "
                          "(target_vocab.json) are not supported")
    if hasattr(tok, "src_lang"):
        for attr, lang, flag in (("src_lang", src_lang, "--src-lang"), ("tgt_lang", tgt_lang, "--tgt-lang")):
            if lang is None:
                raise DocnmtError(f"{directory}: this model translates between many languages: give --src-lang "
                                  f"and --tgt-lang (language codes of its tokenizer such as "
                                  f"{', '.join(_codes(tok)[:4])})")
            if tok.convert_tokens_to_ids(_code_token(tok, lang)) in (None, tok.unk_token_id):
                raise DocnmtError(f"{flag} {lang}: not a language code of this tokenizer "
                                  f"(e.g. {', '.join(_codes(tok)[:6])})")
            setattr(tok, attr, lang)
    return tok


def _codes(tok) -> list[str]:
    codes = getattr(tok, "lang_code_to_id", None) or getattr(tok, "lang_token_to_id", None)
    if codes:
        return [c.strip("_") for c in codes]
    return [t for t in tok.additional_special_tokens if not t.startswith("<")]


def _code_token(tok, lang: str) -> str:
    return tok.get_lang_token(lang) if hasattr(tok, "get_lang_token") else lang


def vocab_layout(tok, rows: int, tgt_lang: str | None) -> dict:
    """The :class:`PretrainedVocab` metadata of a Hugging Face tokenizer whose model has ``rows``
    embedding rows, and the language tokens the model needs (``src_lang_token`` …)."""
    special = _special_ids(tok, rows)
    ordinary = [i for i in range(rows) if i not in special]
    n_pieces = ordinary[-1] + 1
    first = next((i for i in range(n_pieces, 0, -1) if i - 1 in special), 0)   # the block of pieces before n_pieces
    below = [tok.convert_ids_to_tokens(i) for i in ordinary if i < first]
    if any(not (t.startswith("<") and t.endswith(">")) for t in below):
        raise DocnmtError("the tokenizer's ordinary tokens do not have consecutive ids (special tokens among "
                          f"them, e.g. id {first - 1}); docnmt cannot keep them")
    # control pieces among the specials (a docnmt export's "<s>", its decoder start): kept as specials
    names = [tok.convert_ids_to_tokens(i) for i in range(n_pieces, rows)]
    hf_extra = [n if n else f"<unused{n_pieces + k}>" for k, n in enumerate(names)]
    extra = hf_extra + ["<start>"] + [s for s in default_symbols() if s not in hf_extra]
    meta = {"pad": tok.pad_token_id, "unk": tok.unk_token_id, "eos": tok.eos_token_id, "first_piece": first,
            "n_pieces": n_pieces, "extra_symbols": extra,
            "clean_up_spaces": bool(getattr(tok, "clean_up_tokenization_spaces", False))}
    src_pre, src_post, tgt_pre, tgt_post = _framing(tok, "a")
    langs = {"src_lang_token": -1, "src_lang_last": False, "tgt_lang_token": -1, "start": None}
    if src_pre:
        langs["src_lang_token"] = src_pre[-1]
    elif len(src_post) > 1:
        langs.update(src_lang_token=src_post[-1], src_lang_last=True)
    if tgt_pre:
        langs["tgt_lang_token"] = tgt_pre[-1]
    elif len(tgt_post) > 1:     # mBART-25: the target's language code after </s> starts the decoder
        langs["start"] = tgt_post[-1]
    if tgt_lang and f">>{tgt_lang}<<" in tok.get_vocab():      # a multilingual Marian model
        langs["src_lang_token"] = tok.convert_tokens_to_ids(f">>{tgt_lang}<<")
    return {"meta": meta, "langs": langs}


def tokenizer_files(tok, directory: Path, meta: dict) -> tuple[dict, dict[str, bytes]]:
    """The :class:`PretrainedVocab` metadata and files of a Hugging Face tokenizer."""
    meta = dict(meta)
    if hasattr(tok, "backend_tokenizer"):
        meta["tokenizer"] = "tokenizers"
        return meta, {"tokenizer.json": tok.backend_tokenizer.to_str().encode("utf-8")}
    meta["tokenizer"] = "sentencepiece"
    if hasattr(tok, "spm_source"):             # Marian: source and target SentencePiece models
        files = {"source.spm": Path(tok.spm_files[0]).read_bytes(), "target.spm": Path(tok.spm_files[1]).read_bytes()}
        meta["detok"] = "marian"
    elif hasattr(tok, "sp_model"):             # M2M-100: one SentencePiece model
        blob = tok.sp_model.serialized_model_proto()
        files = {"source.spm": blob, "target.spm": blob}
        meta["detok"] = "sentencepiece"
    else:
        raise DocnmtError(f"{directory}: tokenizer {type(tok).__name__} is not supported")
    rows = meta["n_pieces"] + len(meta["extra_symbols"])
    pieces = [tok.convert_ids_to_tokens(i) for i in range(meta["n_pieces"])] + meta["extra_symbols"]
    files["pieces.json"] = json.dumps(pieces[:rows], ensure_ascii=False).encode("utf-8")
    return meta, files


def new_rows(table: torch.Tensor, n_new: int, sources: list[int | None], seed: int = 0) -> torch.Tensor:
    """``table`` (V, d) with ``n_new`` rows appended: row k copies row ``sources[k]`` (the mean of
    ``table`` where None) plus Gaussian noise of ``NOISE`` × the rows' per-dimension std, except a
    row whose source is negative, −s−1: an exact copy of row s (the decoder's start token)."""
    g = torch.Generator().manual_seed(seed)
    mean, std = table.float().mean(0), table.float().std(0)
    rows = []
    for src in sources:
        if src is not None and src < 0:
            rows.append(table[-src - 1].float())
        else:
            base = mean if src is None else table[src].float()
            rows.append(base + NOISE * std * torch.randn(table.size(1), generator=g))
    assert len(rows) == n_new
    return torch.cat([table, torch.stack(rows).to(table.dtype)]) if rows else table


def import_hf(directory: str | Path, save_dir: str | Path, src_lang: str | None = None, tgt_lang: str | None = None,
              force: bool = False, log=print) -> dict:
    """Import the Hugging Face model in ``directory`` into the docnmt model directory ``save_dir``
    (see the module docstring); returns the record written to ``save_dir/pretrained.json``."""
    directory, save_dir = Path(directory), Path(save_dir)
    config = read_hf_config(directory)
    family = config["model_type"]
    _check_save_dir(save_dir, force)
    tok = load_tokenizer(directory, src_lang, tgt_lang)
    T = _transformers()
    try:
        hf = T.AutoModelForSeq2SeqLM.from_pretrained(str(directory), local_files_only=True, dtype=torch.float32)
    except Exception as e:
        raise DocnmtError(f"{directory}: cannot read the model ({type(e).__name__}: {e})") from None
    hf.eval()
    sd = hf.state_dict()
    rows = sd["model.decoder.embed_tokens.weight"].size(0)
    layout = vocab_layout(tok, rows, tgt_lang)
    meta, files = tokenizer_files(tok, directory, layout["meta"])
    langs = layout["langs"]
    start = langs.pop("start")
    if start is None:
        start = config.get("decoder_start_token_id")
    start = tok.eos_token_id if start is None else start
    meta["hf"] = {"family": family, "src_lang": src_lang, "tgt_lang": tgt_lang, "rows": rows, "start": start}
    for f in sorted(directory.iterdir()):     # the original tokenizer and configuration, for export-hf
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".pt", ".h5", ".msgpack", ".index.json")):
            files[f"{TOKENIZER_DIR}/{f.name}"] = f.read_bytes()
    vocab = PretrainedVocab({"backend": PretrainedVocab.backend, **meta}, files)
    cfg = Config()
    cfg.model = model_config(family, config)
    for key, value in langs.items():
        setattr(cfg.model, key, value)
    cfg.model.output_tokens = rows       # the new symbols are not predicted until a training run uses them
    lm_head, embed = sd["lm_head.weight"], sd["model.decoder.embed_tokens.weight"]
    cfg.model.tie_output = lm_head.data_ptr() == embed.data_ptr() or torch.equal(lm_head, embed)
    cfg.model.output_bias = "final_logits_bias" in sd and bool(sd["final_logits_bias"].abs().max() > 0)
    weights = to_docnmt(sd, cfg.model)
    # docnmt's symbols as new rows (docs/pretrained.md#what-is-copied-and-what-is-new)
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
        f"{rows} pretrained tokens + {len(sources)} new symbols) into {save_dir}")
    return record


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
    if save_dir.exists():
        for child in save_dir.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
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
    from .data import pad_batch
    pairs = [("This is a short test.", "Das ist ein kurzer Test."), ("A second, longer sentence.", "Noch ein Satz.")]
    src = pad_batch([np.asarray(vocab.encode(s, "src") + [vocab.eos]) for s, _ in pairs], vocab.pad)
    tgt = pad_batch([np.asarray([vocab.bos] + vocab.encode(t, "tgt")) for _, t in pairs], vocab.pad)
    ref = hf_logits(hf, model, src, tgt, hf_start)
    ours = model.eval()(src, tgt)[..., : ref.size(-1)]
    real = tgt.ne(vocab.pad)
    return float((ref[real] - ours[real]).abs().max())


# --------------------------------------------------------------------------------------------
# train --init-from an imported model
# --------------------------------------------------------------------------------------------

# model settings a training run chooses itself; the others are the imported architecture
OWN_SETTINGS = ("dropout", "attention_dropout", "activation_dropout", "length_aware", "output_tokens", "vocab_size",
                "pad_id", "alibi", "sentence_positions")


def init_from_overrides(init_from: str | Path, data_dir: str | Path) -> dict:
    """Config overrides for ``train --init-from MODEL``: when MODEL has a pretrained tokenizer
    (imported with import-hf, or trained from such a model), its architecture (every
    ``model.*`` setting but dropouts, length-aware attention, sentence positions and ``output_tokens``), after
    checking that ``data_dir`` was prepared with its tokenizer. Nothing for other models."""
    path = Path(init_from)
    if path.is_dir() and (path / "config.json").exists() and not (path / "config.yaml").exists():
        raise DocnmtError(f"--init-from {path}: a Hugging Face directory; import it first: "
                          f"docnmt import-hf {path} --save-dir MODEL")
    if not (path.is_dir() and (path / "vocab.json").exists() and (path / "config.yaml").exists()):
        return {}
    meta = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
    if meta.get("backend") != PretrainedVocab.backend:
        return {}
    data = Path(data_dir)
    theirs = json.loads((data / "vocab.json").read_text(encoding="utf-8")) if (data / "vocab.json").exists() else {}
    same = theirs == meta and all((data / f).exists() and (data / f).read_bytes() == (path / f).read_bytes()
                                  for f in meta.get("files", []))
    if not same:
        raise DocnmtError(f"{data_dir} was not prepared with the tokenizer of {path}: prepare the data with "
                          f"docnmt prepare --spm-model {path} ...")
    model = Config.load(path / "config.yaml").model
    return {f"model.{k}": v for k, v in vars(model).items() if k not in OWN_SETTINGS}


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------

HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}


def interleaved_to_halves(d: int) -> torch.Tensor:
    """The order of hidden dimensions that turns docnmt's interleaved sinusoids (sin, cos, sin,
    …) into Marian's halves (all sines, then all cosines): ``new = old[perm]``."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def permute_hidden(sd: dict[str, torch.Tensor], perm: torch.Tensor) -> dict[str, torch.Tensor]:
    """``sd`` with its hidden (residual stream) dimensions reordered by ``perm``: the same
    function, since LayerNorm and attention do not depend on the order of those dimensions."""
    out = {}
    for k, v in sd.items():
        if k.endswith(("table.weight", "output.weight", "in_proj.weight", "fc1.weight")):
            v = v[:, perm]                                   # hidden dimensions are the inputs
        elif k.endswith(("out_proj.weight", "fc2.weight", "out_proj.bias", "fc2.bias", "norm.weight", "norm.bias")):
            v = v[perm]                                      # hidden dimensions are the outputs
        out[k] = v
    return out


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
    from .checkpoint import load_weights
    from .methods import build_model
    from .vocab import Vocab
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not (model_dir / "config.yaml").exists():
        raise DocnmtError(f"{model_dir}: not a docnmt model directory (no config.yaml)")
    if out_dir.resolve() == model_dir.resolve():
        raise DocnmtError(f"{out_dir}: the export would overwrite the model; write it to another directory")
    _check_export_dir(out_dir, force)
    cfg = Config.load(model_dir / "config.yaml")
    vocab = Vocab.load(model_dir)
    native = not isinstance(vocab, PretrainedVocab)
    record = None if native else vocab.meta["hf"]
    _exportable(cfg, vocab, native)
    T = _transformers()
    model = build_model(cfg, vocab)
    load_weights(model, Path(weights) if weights else model_dir / WEIGHTS)
    m = cfg.model
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    rows, start = len(vocab), vocab.bos
    if record and m.output_tokens:           # the original model: its rows, its decoder start
        rows, start = m.output_tokens, record["start"]
        for k in [k for k in sd if k.endswith(("table.weight", "output.weight", "final_logits_bias"))]:
            sd[k] = sd[k][:rows]
    banned = sorted({vocab.pad, vocab.bos, *(vocab.id(s) for s in ("<mask>", "<eod>") if s in vocab.symbol_ids)}
                    | (set() if cfg.data.is_document_level else {vocab.symbol_ids[s] for s in vocab.extra
                                                                 if s.startswith("<sep")}))
    banned = [i for i in banned if i < rows]
    common = dict(vocab_size=rows, d_model=m.d_model, encoder_layers=m.encoder_layers,
                  decoder_layers=m.decoder_layers, encoder_attention_heads=m.heads, decoder_attention_heads=m.heads,
                  encoder_ffn_dim=m.ffn_dim, decoder_ffn_dim=m.ffn_dim, dropout=m.dropout,
                  attention_dropout=m.attention_dropout, activation_dropout=m.activation_dropout,
                  activation_function=HF_ACTIVATION[m.activation], max_position_embeddings=m.max_positions,
                  scale_embedding=m.scale_embeddings, pad_token_id=vocab.pad, eos_token_id=vocab.eos,
                  decoder_start_token_id=start, forced_eos_token_id=vocab.eos, tie_word_embeddings=m.tie_output)
    if native:
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
    hf.generation_config = T.GenerationConfig(
        decoder_start_token_id=start, eos_token_id=vocab.eos, pad_token_id=vocab.pad,
        forced_bos_token_id=m.tgt_lang_token if m.tgt_lang_token >= 0 else None, num_beams=cfg.decode.beam,
        length_penalty=cfg.decode.lenpen, max_length=m.max_positions, suppress_tokens=banned)
    final, out_dir = out_dir, work_dir_beside(out_dir)      # written beside it, renamed into place when complete
    try:
        hf.save_pretrained(str(out_dir))
        symbols = _export_tokenizer(T, vocab, model_dir, out_dir, record, rows)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    info = {"family": FAMILIES[family], "docnmt_model": str(model_dir.resolve()), "mode": cfg.data.mode,
            "separator": cfg.data.separator if cfg.data.is_document_level else None,
            "tokens": rows, "decoder_start_token_id": start, "suppressed_tokens": banned,
            "symbols": {s: vocab.symbol_ids[s] for s in vocab.extra if vocab.symbol_ids[s] < rows and s in symbols},
            "symbols_in_tokenizer": all(symbols.values())}
    (out_dir / "docnmt.json").write_text(json.dumps(info, indent=1))
    _put_in_place(out_dir, final)
    log(f"wrote {FAMILIES[family]} ({rows} tokens) to {final}" + (
        "" if info["symbols_in_tokenizer"] else "; docnmt's symbols are not in its tokenizer (ids in docnmt.json)"))
    return info


EXPORT_RECORD = "docnmt.json"       # what marks a directory export-hf wrote (and --force may replace)


def _check_export_dir(out_dir: Path, force: bool) -> None:
    """An error for a file, for any non-empty directory without ``--force``, and for one export-hf
    did not write even with it (``--force`` replaces only an earlier export)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise DocnmtError(f"{out_dir} is a file; export-hf writes a directory")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    if not force:
        raise DocnmtError(f"{out_dir} exists and is not empty; choose another directory or pass --force")
    if not (out_dir / EXPORT_RECORD).exists():
        raise DocnmtError(f"{out_dir} is not a directory export-hf wrote (no {EXPORT_RECORD}), and --force only "
                          "replaces those: remove it yourself or choose another directory")


def _put_in_place(work: Path, out_dir: Path) -> None:
    """Move the finished export ``work`` to ``out_dir`` (an earlier export there, or an empty or
    absent directory: checked by _check_export_dir), its files readable as plain writes' would be."""
    for f in work.iterdir():            # safetensors and tempfile write 0600
        os.chmod(f, 0o666 & ~current_umask())
    swap_into_place(work, out_dir)


def _tied(key: str) -> bool:
    return key == "lm_head.weight" or key.endswith("embed_tokens.weight")


def _export_tokenizer(T, vocab, model_dir: Path, out_dir: Path, record, rows: int) -> dict:
    """Save the tokenizer next to the exported model: the original one of an imported model
    (a native model: a MarianTokenizer of its SentencePiece model and all its ids), with the
    rows it has no token for (docnmt's symbols) as its special tokens when they get docnmt's ids.
    Returns {symbol: whether the tokenizer maps it to docnmt's id}."""
    if record is None:
        pieces = {vocab.piece(i): i for i in range(len(vocab))}
        (out_dir / "spm.model").write_bytes(vocab.proto)
        (out_dir / "vocab.json").write_text(json.dumps(pieces, ensure_ascii=False))
        tok = T.MarianTokenizer(str(out_dir / "spm.model"), str(out_dir / "spm.model"), str(out_dir / "vocab.json"),
                                unk_token=vocab.piece(vocab.unk), eos_token=vocab.piece(vocab.eos),
                                pad_token=vocab.piece(vocab.pad))
        for f in ("spm.model", "vocab.json"):
            (out_dir / f).unlink()
        names = [s for s in vocab.extra if vocab.symbol_ids[s] < rows]
    else:
        tok = T.AutoTokenizer.from_pretrained(str(model_dir / TOKENIZER_DIR), local_files_only=True)
        for attr in ("src_lang", "tgt_lang"):
            if hasattr(tok, attr) and record.get(attr):
                setattr(tok, attr, record[attr])
        names = [vocab.piece(i) for i in range(min(len(tok), rows), rows)]
    found = {}
    if names:
        tok.add_special_tokens({"additional_special_tokens": names}, replace_extra_special_tokens=False)
        found = {s: tok.convert_tokens_to_ids(s) == vocab.symbol_ids[s] for s in names}
        if not all(found.values()):       # ids that are not docnmt's would mislead: keep the tokenizer as it was
            return _export_tokenizer_plain(T, model_dir, out_dir, record, found)
    tok.save_pretrained(str(out_dir))
    return found


def _export_tokenizer_plain(T, model_dir: Path, out_dir: Path, record, found: dict) -> dict:
    tok = T.AutoTokenizer.from_pretrained(str(model_dir / TOKENIZER_DIR), local_files_only=True)
    for attr in ("src_lang", "tgt_lang"):
        if hasattr(tok, attr) and record.get(attr):
            setattr(tok, attr, record[attr])
    tok.save_pretrained(str(out_dir))
    return {s: False for s in found}
