"""A docnmt Transformer as a CTranslate2 model (``docnmt export-ct2``, ``--engine ctranslate2``):
the weights written straight into CTranslate2's ``TransformerSpec`` from docnmt's modules, with
no Hugging Face model in between, so that every Transformer export-hf accepts converts, native or
imported, pre-LN or post-LN, with its own position table, start token and every row of its
vocabulary (docs/performance.md#ctranslate2).

The vocabulary a converted model holds is docnmt's, id for id: token ``i`` is the piece of id
``i`` (made unique where two ids share a piece), so a caller maps ids to tokens and back with
:func:`ct2_tokens` and nothing else.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import DocnmtError

CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH"}
EPSILON = 1e-5                      # torch's LayerNorm default, which every docnmt LayerNorm uses
NEVER = -1e4                        # the logit bias of rows never predicted (exp underflows to 0; fits float16)


def load_ctranslate2():
    """The ``ctranslate2`` package, or a clear error."""
    try:
        import ctranslate2
    except ModuleNotFoundError:
        raise DocnmtError("the CTranslate2 engine needs ctranslate2: pip install docnmt[ct2]") from None
    return ctranslate2


def ct2_tokens(vocab) -> list[str]:
    """The converted model's vocabulary: the piece of each id, made unique (a repeated piece gets
    ``<ct2:ID>``), so ids and tokens map one to one."""
    seen, out = set(), []
    for i in range(len(vocab)):
        piece = vocab.piece(i)
        if not piece or piece in seen:
            piece = f"<ct2:{i}>"
        seen.add(piece)
        out.append(piece)
    return out


def build_spec(model, vocab, start: int):
    """The CTranslate2 ``TransformerSpec`` of docnmt ``model`` (a plain Transformer), decoding from
    token ``start``."""
    ct2 = load_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec
    m = model.cfg
    activation = getattr(common_spec.Activation, CT2_ACTIVATIONS[m.activation])
    spec = transformer_spec.TransformerSpec.from_config(
        (m.encoder_layers, m.decoder_layers), m.heads, pre_norm=m.pre_norm, activation=activation,
        layernorm_embedding=m.embed_norm)
    rows = len(vocab)
    for side, ours in (("encoder", model.encoder), ("decoder", model.decoder)):
        theirs = getattr(spec, side)
        table = ours.embed.table.weight[:rows]
        if side == "encoder":
            theirs.embeddings[0].weight = _np(table)
        else:
            theirs.embeddings.weight = _np(table)
        theirs.scale_embeddings = float(ours.embed.scale)
        theirs.position_encodings.encodings = _np(ours.embed.positions(m.max_positions, 0))
        if m.embed_norm:
            _norm(theirs.layernorm_embedding, ours.embed.norm)
        if m.pre_norm:
            _norm(theirs.layer_norm, ours.final_norm)
        for layer_spec, layer in zip(theirs.layer, ours.layers):
            _layer(layer_spec, layer, cross=side == "decoder")
    weight, bias = model.output_weight()[:rows], model.output_bias()
    spec.decoder.projection.weight = _np(F.pad(weight, (0, 0, 0, rows - weight.size(0))))
    if bias is not None or m.classes < rows:
        # rows the output layer does not predict (an imported model's new symbols): never generated,
        # and out of the softmax, as docnmt's -inf logits
        full = torch.zeros(rows)
        if bias is not None:
            full[: min(rows, bias.numel())] = bias.detach().float()[:rows]
        full[m.classes:] = NEVER
        spec.decoder.projection.bias = _np(full)
    tokens = ct2_tokens(vocab)
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.unk_token, spec.config.eos_token = tokens[vocab.unk], tokens[vocab.eos]
    spec.config.bos_token, spec.config.decoder_start_token = tokens[vocab.bos], tokens[start]
    spec.config.layer_norm_epsilon = EPSILON
    del ct2
    return spec


def _layer(spec, layer, cross: bool) -> None:
    """One encoder or decoder layer: self-attention, (cross-attention,) feed-forward."""
    subs = list(layer.sublayers)
    _attention(spec.self_attention, subs[0], fused=True)
    if cross:
        _attention(spec.attention, subs[1], fused=False)
    ffn = subs[-1]
    _linear(spec.ffn.linear_0, ffn.fc1)
    _linear(spec.ffn.linear_1, ffn.fc2)
    _norm(spec.ffn.layer_norm, ffn.norm)


def _attention(spec, sub, fused: bool) -> None:
    """Self-attention keeps q, k, v stacked in one matrix (as docnmt's ``in_proj``); cross-attention
    splits q from the stacked k, v."""
    attn = sub.attn
    w, b = attn.in_proj.weight, attn.in_proj.bias
    d = w.size(1)
    parts = [(w, b)] if fused else [(w[:d], b[:d]), (w[d:], b[d:])]
    for linear_spec, (weight, bias) in zip(spec.linear, parts):
        linear_spec.weight, linear_spec.bias = _np(weight), _np(bias)
    _linear(spec.linear[-1], attn.out_proj)
    _norm(spec.layer_norm, sub.norm)


def _linear(spec, module) -> None:
    spec.weight = _np(module.weight)
    if module.bias is not None:
        spec.bias = _np(module.bias)


def _norm(spec, module) -> None:
    spec.gamma, spec.beta = _np(module.weight), _np(module.bias)


def _np(t: torch.Tensor):
    return t.detach().float().cpu().contiguous().numpy()


def convert(model, vocab, start: int, out_dir: Path, quantization: str | None = None) -> Path:
    """Write the CTranslate2 model of docnmt ``model`` to ``out_dir`` (which must not exist)."""
    load_ctranslate2()
    from ctranslate2.converters.converter import Converter

    class _Spec(Converter):
        def _load(self):
            return build_spec(model, vocab, start)

    _Spec().convert(str(out_dir), quantization=quantization)
    return out_dir
