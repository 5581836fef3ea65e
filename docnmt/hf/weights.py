"""Weight names and tensors, Hugging Face <-> docnmt: the name mapping, docnmt's new embedding
rows for its symbols, and the reordering of hidden dimensions a Marian export needs."""
from __future__ import annotations

import torch

from ..model import ModelConfig
from .common import NOISE


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

