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

Modules: :mod:`.common` (the families, file names, ``transformers``), :mod:`.weights` (weight
names and tensors), :mod:`.tokenizer` (the tokenizer adapter: every use of the tokenizer API,
language codes and tokens included), :mod:`.importer`, :mod:`.exporter`, :mod:`.init_from`
(``train --init-from``).

This is the only package that imports ``transformers``, and only inside the functions that need
it; nothing is ever downloaded (offline mode, local files only).
"""
from .common import ACTIVATIONS, FAMILIES, MAX_DIFF, NOISE, RECORD, TOKENIZER_DIR, load_transformers, read_hf_config
from .exporter import EXPORT_RECORD, HF_ACTIVATION, export_hf
from .exporter import _exportable as _exportable  # for tests
from .importer import check_logits, hf_batch, hf_logits, import_hf, model_config
from .init_from import OWN_SETTINGS, init_from_overrides
from .tokenizer import load_tokenizer, tokenizer_files, vocab_layout
from .weights import interleaved_to_halves, layer_names, name_pairs, new_rows, permute_hidden, to_docnmt, to_hf

__all__ = ["ACTIVATIONS", "EXPORT_RECORD", "FAMILIES", "HF_ACTIVATION", "MAX_DIFF", "NOISE", "OWN_SETTINGS", "RECORD",
           "TOKENIZER_DIR", "check_logits", "export_hf", "hf_batch", "hf_logits", "import_hf", "init_from_overrides",
           "interleaved_to_halves", "layer_names", "load_tokenizer", "load_transformers", "model_config",
           "name_pairs", "new_rows", "permute_hidden", "read_hf_config", "to_docnmt", "to_hf", "tokenizer_files",
           "vocab_layout"]
