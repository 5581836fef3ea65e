"""Hugging Face models in and out of docnmt (docs/pretrained.md).

Fast tests check the architecture options of the one Transformer and the weight mappings without
``transformers``. The slow ones build tiny randomly initialised models of every family with
``transformers`` (Marian with its source/target SentencePiece models, mBART-25 and mBART-50 with
language codes, NLLB and M2M-100 with forced target-language tokens), tokenizers made from
SentencePiece models trained here on the bundled BConTrasT chats, ``save_pretrained`` them and import them:
docnmt's logits, tokenisation and searches must equal transformers'.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from _tiny import assert_incremental_equals_full, chat_documents
from docnmt.data import pad_batch
from docnmt.errors import DocnmtError
from docnmt.hf import interleaved_to_halves, permute_hidden, to_docnmt, to_hf
from docnmt.model import ModelConfig, Transformer, position_table, sinusoidal_table

FAMILIES = ["marian", "mbart", "mbart50", "nllb", "m2m100"]
LANGS = {"marian": (None, None), "mbart": ("en_XX", "de_DE"), "mbart50": ("en_XX", "de_DE"),
         "nllb": ("eng_Latn", "deu_Latn"), "m2m100": ("en", "de")}
SMALL = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=1024, dropout=0.0)


def tiny(**over) -> ModelConfig:
    base = dict(vocab_size=40, d_model=16, heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=2, dropout=0.0)
    return ModelConfig(**{**base, **over})


def batch(seed: int = 0, vocab: int = 40, pad: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (3, 9), generator=g)
    src[1, 6:] = pad
    tgt = torch.randint(4, vocab, (3, 7), generator=g)
    tgt[:, 0] = 2
    return src, tgt


# --------------------------------------------------------------------------------------------
# The architecture options (no transformers needed)
# --------------------------------------------------------------------------------------------

def test_halves_table_is_docnmts_table_with_its_columns_regrouped():
    d = 12
    regrouped = sinusoidal_table(30, d)[:, interleaved_to_halves(d)]
    assert torch.allclose(position_table("sinusoidal_halves", 30, d), regrouped, atol=1e-5)


def test_fairseq_table_follows_its_formula():
    d, pos, i = 8, 5, 1
    t = position_table("sinusoidal_fairseq", 10, d)
    w = 10000 ** (-i / (d // 2 - 1))
    assert t[pos, i].item() == pytest.approx(np.sin(pos * w), abs=1e-6)
    assert t[pos, d // 2 + i].item() == pytest.approx(np.cos(pos * w), abs=1e-6)


def test_position_offset_and_learned_positions_beyond_the_table():
    m = Transformer(tiny(positions="sinusoidal_fairseq", position_offset=2))
    assert torch.equal(m.encoder.embed.positions(3, 1), position_table("sinusoidal_fairseq", 6, 16)[3:6])
    learned = Transformer(tiny(positions="learned", position_offset=2, max_positions=8))
    table = learned.encoder.embed.positions.weight
    assert table.shape == (10, 16)
    out = learned.encoder.embed.positions(4, 6)            # positions 6..9 read rows 8, 9, 9, 9
    assert torch.equal(out, table[[8, 9, 9, 9]])


def test_unknown_architecture_options_are_config_errors():
    from docnmt.config import Config
    with pytest.raises(DocnmtError, match="unknown activation 'tanh'"):
        Config.from_dict({"model": {"activation": "tanh"}})
    with pytest.raises(DocnmtError, match="unknown positions"):
        Config.from_dict({"model": {"positions": "rotary"}})


def test_output_tokens_bias_and_untied_output_in_logits_and_loss():
    """Logits of ids >= output_tokens are -inf, the fixed bias and an untied output matrix are
    used, and the fused training loss equals the label-smoothed loss of the logits."""
    torch.manual_seed(0)
    m = Transformer(tiny(output_tokens=30, output_bias=True, tie_output=False)).eval()
    with torch.no_grad():
        m.final_logits_bias.normal_()
    src, tgt = batch()
    labels = torch.randint(4, 30, tgt.shape)
    logits = m(src, tgt)
    assert torch.isinf(logits[..., 30:]).all() and torch.isfinite(logits[..., :30]).all()
    hidden = m.decode(tgt, m.encode(src))
    expected = hidden @ m.output.weight[:30].t() + m.final_logits_bias[:30]
    torch.testing.assert_close(logits[..., :30], expected, rtol=1e-5, atol=1e-5)
    loss, nll, n = m(src, tgt, labels, 0.1)
    lp = torch.log_softmax(logits[..., :30], -1)
    ref_nll = -lp.gather(-1, labels[..., None]).sum()
    ref = 0.9 * ref_nll - 0.1 * lp.mean(-1).sum()
    torch.testing.assert_close(loss, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(nll, ref_nll, rtol=1e-4, atol=1e-4)


def test_source_language_token_first_or_after_the_last_token():
    src = torch.tensor([[5, 6, 3], [7, 3, 0]])
    first = Transformer(tiny(src_lang_token=9)).with_source_language(src)
    assert first.tolist() == [[9, 5, 6, 3], [9, 7, 3, 0]]
    last = Transformer(tiny(src_lang_token=9, src_lang_last=True)).with_source_language(src)
    assert last.tolist() == [[5, 6, 3, 9], [7, 3, 9, 0]]


def test_target_language_token_is_one_more_decoder_position():
    """A model with tgt_lang_token L gives for [s, y…] the states a plain model gives for
    [s, L, y…] after its first position, whole or step by step."""
    torch.manual_seed(0)
    m = Transformer(tiny(tgt_lang_token=11, positions="learned", pre_norm=True)).eval()
    plain = Transformer(tiny(positions="learned", pre_norm=True)).eval()
    plain.load_state_dict(m.state_dict())
    src, tgt = batch()
    with torch.no_grad():
        ours = m.decode(tgt, m.encode(src))
        full = torch.cat([tgt[:, :1], torch.full((3, 1), 11), tgt[:, 1:]], 1)
        ref = plain.decode(full, plain.encode(src))[:, 1:]
    torch.testing.assert_close(ours, ref)
    assert_incremental_equals_full(m, src, tgt)


def test_weight_names_round_trip():
    """docnmt -> Hugging Face -> docnmt names give the same tensors, for every layout."""
    for over in ({}, {"pre_norm": True, "embed_norm": True, "positions": "learned", "position_offset": 2},
                 {"share_embeddings": False, "tie_output": False, "output_bias": True}):
        cfg = tiny(**over)
        sd = Transformer(cfg).state_dict()
        hf = to_hf(sd, cfg)
        assert all(k.startswith(("model.", "lm_head", "final_logits_bias")) for k in hf)
        back = to_docnmt(hf, cfg)
        assert back.keys() == {k for k in sd if k != "decoder.embed.table.weight" or not cfg.share_embeddings}
        assert all(torch.equal(back[k], sd[k]) for k in back)


def test_reordering_hidden_dimensions_keeps_the_function():
    """A native model with its hidden dimensions reordered (export to Marian) and Marian's
    position table computes the same logits."""
    torch.manual_seed(0)
    cfg = tiny()
    m = Transformer(cfg).eval()
    with torch.no_grad():           # biases and LayerNorms too (their fresh values are 0 and 1)
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    halves = Transformer(tiny(positions="sinusoidal_halves")).eval()
    halves.load_state_dict(permute_hidden(m.state_dict(), interleaved_to_halves(16)))
    src, tgt = batch()
    with torch.no_grad():
        torch.testing.assert_close(halves(src, tgt), m(src, tgt), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# User errors of import-hf / export-hf / --init-from (no transformers needed)
# --------------------------------------------------------------------------------------------

def test_import_hf_user_errors(tmp_path, cli_error, write_files):
    assert "not a Hugging Face model directory" in cli_error("import-hf", tmp_path, "--save-dir", tmp_path / "m")
    write_files(tmp_path / "t5", {"config.json": json.dumps({"model_type": "t5"})})
    err = cli_error("import-hf", tmp_path / "t5", "--save-dir", tmp_path / "m")
    assert "model_type 't5' is not supported" in err and "MarianMTModel" in err


def test_init_from_a_hugging_face_directory_is_an_error(tmp_path, write_files):
    from docnmt.hf import init_from_overrides
    write_files(tmp_path / "hf", {"config.json": "{}"})
    with pytest.raises(DocnmtError, match="import it first"):
        init_from_overrides(tmp_path / "hf", tmp_path)
    assert init_from_overrides(tmp_path / "nothing", tmp_path) == {}


# --------------------------------------------------------------------------------------------
# Tiny Hugging Face models (slow: transformers, SentencePiece training, imports)
# --------------------------------------------------------------------------------------------

def real_pairs() -> list[tuple[str, str]]:
    """The 1,902 turn pairs of the bundled BConTrasT dev chats (en-de)."""
    return [pair for d in chat_documents("valid") for pair in zip(d.src, d.tgt)]


def train_spm(texts: list[str], size: int, model_type: str) -> bytes:
    import sentencepiece as spm
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=buf, vocab_size=size,
                                   model_type=model_type, character_coverage=1.0, minloglevel=2,
                                   hard_vocab_limit=False, num_threads=1)
    return buf.getvalue()


def build_hf(family: str, out: Path, seed: int = 0) -> Path:
    """A tiny ``family`` model with its tokenizer, saved with ``save_pretrained`` in ``out``:
    every parameter random (LayerNorms and biases too)."""
    import sentencepiece as spm
    import transformers as T
    T.logging.set_verbosity_error()
    out.mkdir(parents=True, exist_ok=True)
    pairs = real_pairs()
    en, de = [p[0] for p in pairs], [p[1] for p in pairs]
    torch.manual_seed(seed)
    if family == "marian":               # source and target SentencePiece models, one vocabulary
        blobs = train_spm(en, 300, "unigram"), train_spm(de, 300, "unigram")
        vocab = {"</s>": 0, "<unk>": 1}
        for name, blob in zip(("source.spm", "target.spm"), blobs):
            (out / name).write_bytes(blob)
            sp = spm.SentencePieceProcessor(model_proto=blob)
            for i in range(sp.get_piece_size()):
                if not (sp.is_control(i) or sp.is_unknown(i)):
                    vocab.setdefault(sp.id_to_piece(i), len(vocab))
        vocab["<pad>"] = len(vocab)
        (out / "vocab.json").write_text(json.dumps(vocab))
        tok = T.MarianTokenizer(str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"),
                                source_lang="en", target_lang="de")
        model = T.MarianMTModel(T.MarianConfig(
            vocab_size=len(vocab), pad_token_id=vocab["<pad>"], decoder_start_token_id=vocab["<pad>"], eos_token_id=0,
            forced_eos_token_id=0, activation_function="swish", scale_embedding=True, **SMALL))
    elif family in ("mbart", "mbart50", "nllb"):        # tokenizers made from one SentencePiece model
        (out / "spm").mkdir(exist_ok=True)
        (out / "spm/sentencepiece.bpe.model").write_bytes(train_spm(en + de, 500, "bpe" if family == "nllb" else
                                                                    "unigram"))
        if family == "nllb":
            tok = T.NllbTokenizer.from_pretrained(str(out / "spm"), extra_special_tokens=["eng_Latn", "deu_Latn",
                                                                                           "fra_Latn"])
        else:
            tok = getattr(T, "MBartTokenizer" if family == "mbart" else "MBart50Tokenizer").from_pretrained(
                str(out / "spm"))
        if family == "nllb":
            model = T.M2M100ForConditionalGeneration(T.M2M100Config(
                vocab_size=len(tok), activation_function="relu", scale_embedding=True, **SMALL))
        else:
            model = T.MBartForConditionalGeneration(T.MBartConfig(
                vocab_size=len(tok), activation_function="gelu", scale_embedding=family == "mbart50",
                decoder_start_token_id=None if family == "mbart" else 2, **SMALL))
    else:                                # M2M-100: SentencePiece + vocab.json, language tokens after it
        blob = train_spm(en + de, 500, "bpe")
        (out / "sentencepiece.bpe.model").write_bytes(blob)
        sp = spm.SentencePieceProcessor(model_proto=blob)
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
        (out / "vocab.json").write_text(json.dumps(vocab))
        tok = T.M2M100Tokenizer(str(out / "vocab.json"), str(out / "sentencepiece.bpe.model"), language_codes="wmt21")
        model = T.M2M100ForConditionalGeneration(T.M2M100Config(     # 8 rows more than the tokenizer knows
            vocab_size=len(tok) + 8 + 8, activation_function="relu", scale_embedding=True, **SMALL))
    src, tgt = LANGS[family]
    if src:
        tok.src_lang, tok.tgt_lang = src, tgt
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():         # sharp enough that outputs depend on the source
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
            elif "embed_positions" in name and p.requires_grad:
                p.normal_(0, 0.3, generator=g)
            elif "embed_positions" not in name:
                p.mul_(15)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_(0, 0.3, generator=g)
    tok.save_pretrained(str(out))
    model.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def hf_model(tmp_path_factory):
    """``hf_model(family)`` -> (Hugging Face directory, docnmt directory it was imported into),
    built on first use."""
    pytest.importorskip("transformers")
    from docnmt.hf import import_hf
    root, made = tmp_path_factory.mktemp("hf"), {}

    def get(family: str) -> tuple[Path, Path]:
        if family not in made:
            hf = build_hf(family, root / family)
            import_hf(hf, root / f"{family}-docnmt", *LANGS[family], log=lambda m: None)
            made[family] = hf, root / f"{family}-docnmt"
        return made[family]
    return get


def load_hf(directory: Path):
    import transformers as T
    model = T.AutoModelForSeq2SeqLM.from_pretrained(str(directory)).eval()
    tok = T.AutoTokenizer.from_pretrained(str(directory))
    return model, tok


def docnmt_batch(vocab, pairs):
    src = pad_batch([np.asarray(vocab.encode(s, "src") + [vocab.eos]) for s, _ in pairs], vocab.pad)
    tgt = pad_batch([np.asarray([vocab.bos] + vocab.encode(t, "tgt")) for _, t in pairs], vocab.pad)
    return src, tgt


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_transformers(family, hf_model):
    """Teacher-forced logits on real sentence pairs (padded batches): max |Δ| <= 1e-4 in fp32."""
    from docnmt.hf import hf_logits
    from docnmt.translate import Translator
    hf_dir, ours = hf_model(family)
    record = json.loads((ours / "pretrained.json").read_text())
    assert record["max_abs_logit_diff"] <= 1e-4
    hf, _ = load_hf(hf_dir)
    tr = Translator.load(ours)
    pairs = real_pairs()[200:232]
    src, tgt = docnmt_batch(tr.vocab, pairs)
    with torch.no_grad():
        ref = hf_logits(hf, tr.model, src, tgt, record["hf_decoder_start"])
        got = tr.model(src, tgt)
    real = tgt.ne(tr.vocab.pad)
    assert (ref[real] - got[..., : ref.size(-1)][real]).abs().max() <= 1e-4
    assert torch.isinf(got[..., record["hf_rows"]:]).all()     # docnmt's new symbols: not predicted yet


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_tokenisation_equals_the_tokenizer(family, hf_model):
    """1,000 real sentences per side: the ids the docnmt model reads equal the tokenizer's
    input_ids and labels; detokenised ids equal batch_decode."""
    from docnmt.vocab import Vocab
    hf_dir, ours = hf_model(family)
    _, tok = load_hf(hf_dir)
    vocab = Vocab.load(ours)
    m = Transformer(_model_cfg(ours))
    pairs = real_pairs()[:1000]
    src, tgt = [p[0] for p in pairs], [p[1] for p in pairs]
    ref_src, ref_tgt = tok(src).input_ids, tok(text_target=tgt).input_ids
    our_src = [m.with_source_language(torch.tensor([ids + [vocab.eos]]))[0].tolist()
               for ids in vocab.encode_batch(src, "src")]
    assert our_src == ref_src
    lang = [m.cfg.tgt_lang_token] if m.cfg.tgt_lang_token >= 0 else []
    last = [ref_tgt[0][-1]] if ref_tgt[0][-2] == vocab.eos else []        # mBART-25: the language code after </s>
    our_tgt = [lang + ids + [vocab.eos] + last for ids in vocab.encode_batch(tgt, "tgt")]
    assert our_tgt == ref_tgt
    outputs = [ids + [vocab.eos] for ids in vocab.encode_batch(tgt, "tgt")]      # what a search returns
    assert [vocab.decode(ids) for ids in outputs] == tok.batch_decode(outputs, skip_special_tokens=True)


def _model_cfg(model_dir: Path) -> ModelConfig:
    from docnmt.config import Config
    from docnmt.vocab import Vocab
    cfg = Config.load(model_dir / "config.yaml").model
    cfg.vocab_size, cfg.pad_id = len(Vocab.load(model_dir)), Vocab.load(model_dir).pad
    return cfg


def generate(hf, tr, record: dict, sentences: list[str], search) -> list[list[int]]:
    """transformers' generate with docnmt's search settings: the decoder prompt is the
    pretrained start token (and the language code), the same banned tokens, at least one token,
    and at docnmt's length limit only </s> with its own log-probability (fairseq's rule, a
    logits processor here)."""
    import transformers as T

    from docnmt.hf import hf_batch
    v = tr.vocab

    class EndAtLimit(T.LogitsProcessor):
        def __init__(self, prompt: int, limit: int):
            self.prompt, self.limit = prompt, limit

        def __call__(self, input_ids, scores):
            if input_ids.size(1) - self.prompt >= self.limit:
                keep = scores[:, v.eos].clone()
                scores[:] = float("-inf")
                scores[:, v.eos] = keep
            return scores

    out = []
    banned = [i for i in tr.banned_ids(True) if i < record["hf_rows"]]
    hf.generation_config.forced_eos_token_id = None         # else merged into ours: </s> for free at the limit
    for s in sentences:
        b = hf_batch(tr.model, torch.tensor([v.encode(s, "src") + [v.eos]]), torch.tensor([[v.bos]]),
                     record["hf_decoder_start"])
        prompt = b["decoder_input_ids"].size(1)
        limit = int((torch.tensor(search.max_len_a) * b["input_ids"].size(1) + search.max_len_b).long())
        gc = T.GenerationConfig(num_beams=search.beam, do_sample=False, early_stopping=True,
                                length_penalty=search.lenpen, max_new_tokens=limit + 1, min_new_tokens=search.min_len,
                                suppress_tokens=banned or None, eos_token_id=v.eos, pad_token_id=v.pad,
                                forced_eos_token_id=None, forced_bos_token_id=None,
                                decoder_start_token_id=record["hf_decoder_start"])
        ids = hf.generate(**b, generation_config=gc,
                          logits_processor=T.LogitsProcessorList([EndAtLimit(prompt, limit)]))[0, prompt:].tolist()
        out.append([i for i in ids if i not in (v.eos, v.pad)])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("family", ["marian", "mbart", "mbart50", "nllb"])
def test_greedy_and_beam_equal_generate(family, hf_model):
    """docnmt translate (greedy and beam 5, batched) gives generate's outputs on real sentences,
    token for token and after detokenisation (batch_decode). The random models end a
    hypothesis at any step now and then; the length limit (12 tokens) ends the others.
    (M2M-100 is NLLB's model class; its random model here repeats one output for every source.)"""
    from docnmt.search import SearchConfig
    from docnmt.translate import Translator
    hf_dir, ours = hf_model(family)
    hf, tok = load_hf(hf_dir)
    tr = Translator.load(ours)
    record = json.loads((ours / "pretrained.json").read_text())
    sentences = [s for s, _ in real_pairs()[300:360]][:24]
    for beam in (1, 5):
        search = SearchConfig(beam=beam, max_len_a=0.0, max_len_b=12)
        ref = generate(hf, tr, record, sentences, search)
        docs, _ = tr.translate([[s] for s in sentences], search)
        assert [d.tgt[0] for d in docs] == tok.batch_decode(ref, skip_special_tokens=True)
        assert [d.tgt[0] for d in docs] == [tr.vocab.decode(ids) for ids in ref]
        assert len({tuple(r) for r in ref}) > 2            # outputs depend on the source


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_export_round_trip(family, hf_model, tmp_path):
    """import -> export: transformers reads the export and computes the original model's logits
    over the original tokens; its tokenizer gives the original ids."""
    from docnmt.hf import export_hf
    hf_dir, ours = hf_model(family)
    export_hf(ours, tmp_path / "out", log=lambda m: None)
    orig, tok = load_hf(hf_dir)
    back, tok2 = load_hf(tmp_path / "out")
    pairs = real_pairs()[500:516]
    enc = tok([p[0] for p in pairs], text_target=[p[1] for p in pairs], return_tensors="pt", padding=True)
    enc2 = tok2([p[0] for p in pairs], text_target=[p[1] for p in pairs], return_tensors="pt", padding=True)
    assert torch.equal(enc["input_ids"], enc2["input_ids"]) and torch.equal(enc["labels"], enc2["labels"])
    start = json.loads((ours / "pretrained.json").read_text())["hf_decoder_start"]
    dec = torch.cat([torch.full((len(pairs), 1), start), enc["labels"][:, :-1]], 1)
    dec2 = dec.clone()
    dec2[:, 0] = back.config.decoder_start_token_id         # docnmt's <start>: a copy of the pretrained start
    with torch.no_grad():
        a = orig(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=dec).logits
        b = back(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=dec2).logits
    assert (a - b[..., : a.size(-1)]).abs().max() <= 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sent2sent", "doc2doc"])
def test_export_of_a_native_model(name, tiny_model, tmp_path, run_cli):
    """A docnmt model trained here, exported as MarianMTModel: transformers computes its logits,
    its tokenizer gives docnmt's ids (a Doc2Doc model's separators included), and generate
    with the exported generation settings gives docnmt's greedy translation."""
    from docnmt.translate import Translator
    status, _, err = run_cli("export-hf", tiny_model(name), tmp_path / "hf")
    assert status == 0, err
    hf, tok = load_hf(tmp_path / "hf")
    tr = Translator.load(tiny_model(name))
    v = tr.vocab
    pairs = real_pairs()[:8]
    if name == "doc2doc":       # instances of two sentences joined by docnmt's separator
        pairs = [(f"{a} <sep1> {b}", f"{c} <sep1> {d}") for (a, c), (b, d) in zip(pairs[::2], pairs[1::2])]
    enc = tok([s for s, _ in pairs], text_target=[t for _, t in pairs], return_tensors="pt", padding=True)
    src, tgt = _joined(v, pairs) if name == "doc2doc" else docnmt_batch(v, pairs)
    assert enc["input_ids"].tolist() == src.tolist()
    with torch.no_grad():
        got = hf(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=tgt).logits
        ref = tr.model(src, tgt)
    real = tgt.ne(v.pad)
    assert (got[real] - ref[real]).abs().max() <= 1e-4
    info = json.loads((tmp_path / "hf" / "docnmt.json").read_text())
    assert info["decoder_start_token_id"] == v.bos and (name == "sent2sent" or info["symbols_in_tokenizer"])
    from docnmt.search import SearchConfig, beam_search
    search = SearchConfig(beam=1, max_len_a=0.0, max_len_b=20)
    ours = beam_search(tr.model, src[:1, : int(src[0].ne(v.pad).sum())], search, v.bos, v.eos,
                       banned=tr.banned_ids(name == "sent2sent"))[0][0].tokens
    out = hf.generate(input_ids=src[:1, : int(src[0].ne(v.pad).sum())], num_beams=1, max_new_tokens=21,
                      forced_eos_token_id=None)[0, 1:].tolist()
    assert out[: len(ours)] == ours


@pytest.mark.slow
def test_a_native_export_imports_back_and_translates_as_before(tiny_model, tmp_path, run_cli):
    """docnmt -> export-hf -> import-hf: the imported model (its tokenizer's eos sits among the
    pieces, after docnmt's "<s>") gives the original model's greedy and beam translations."""
    from docnmt.search import SearchConfig
    from docnmt.translate import Translator
    status, _, err = run_cli("export-hf", tiny_model("sent2sent"), tmp_path / "hf")
    assert status == 0, err
    status, _, err = run_cli("import-hf", tmp_path / "hf", "--save-dir", tmp_path / "back")
    assert status == 0, err
    sentences = [[s] for s, _ in real_pairs()[:12]]
    a, b = Translator.load(tiny_model("sent2sent")), Translator.load(tmp_path / "back")
    for beam in (1, 4):
        search = SearchConfig(beam=beam, max_len_a=0.0, max_len_b=15)
        assert [d.tgt for d in a.translate(sentences, search)[0]] == [d.tgt for d in b.translate(sentences, search)[0]]


def test_export_force_replaces_only_an_earlier_export(tiny_model, tmp_path, run_cli):
    """--force swaps an earlier export for the new one; a directory export-hf did not write, or an
    export holding a file it did not write, is refused with and without it, and stays as it was.
    The files are readable by the group."""
    pytest.importorskip("transformers")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("mine")
    for force in ([], ["--force"]):
        status, _, err = run_cli("export-hf", tiny_model("sent2sent"), mine, *force)
        assert status == 2 and len(err.strip().splitlines()) == 1
        assert [p.name for p in mine.iterdir()] == ["config.json"] and (mine / "config.json").read_text() == "mine"
    out = tmp_path / "hf"
    assert run_cli("export-hf", tiny_model("sent2sent"), out)[0] == 0
    (out / "notes.txt").write_text("mine")                 # a file of the user's in an earlier export
    assert run_cli("export-hf", tiny_model("sent2sent"), out)[0] == 2
    status, _, err = run_cli("export-hf", tiny_model("sent2sent"), out, "--force")
    assert status == 2 and "holds notes.txt, which export-hf did not write" in err
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    (out / "config.json").write_text("{}")                 # the earlier export's own files are replaced
    assert run_cli("export-hf", tiny_model("sent2sent"), out, "--force")[0] == 0
    assert (out / "docnmt.json").exists() and json.loads((out / "config.json").read_text())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in out.iterdir())


def _joined(v, pairs):
    """docnmt's Doc2Doc instances of sentence pairs written as 'a <sep1> b'."""
    src = [sum(([*v.encode(x, "src"), v.sep(1)] for x in s.split(" <sep1> ")), [])[:-1] + [v.eos] for s, _ in pairs]
    tgt = [[v.bos] + sum(([*v.encode(x, "tgt"), v.sep(1)] for x in t.split(" <sep1> ")), [])[:-1] for _, t in pairs]
    return pad_batch([np.asarray(x) for x in src], v.pad), pad_batch([np.asarray(x) for x in tgt], v.pad)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["marian", "nllb"])
def test_ctranslate2_converts_the_export(family, hf_model, tmp_path):
    """CTranslate2 converts an exported model and its greedy translations are docnmt's (both
    stopped at 12 tokens: the random models do not end sentences)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    from docnmt.hf import export_hf
    from docnmt.search import SearchConfig
    from docnmt.translate import Translator
    _, ours = hf_model(family)
    export_hf(ours, tmp_path / "hf", log=lambda m: None)
    TransformersConverter(str(tmp_path / "hf")).convert(str(tmp_path / "ct2"))
    _, tok = load_hf(tmp_path / "hf")
    tr = Translator.load(ours)
    ct = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    lang = LANGS[family][1]
    sentences = [s for s, _ in real_pairs()[300:312]]
    docs, _ = tr.translate([[s] for s in sentences], SearchConfig(beam=1, max_len_a=0.0, max_len_b=12))
    res = ct.translate_batch([tok.convert_ids_to_tokens(tok(s).input_ids) for s in sentences],
                             target_prefix=[[lang]] * len(sentences) if lang else None, beam_size=1,
                             max_decoding_length=12 + bool(lang), min_decoding_length=1 + bool(lang))
    out = [tok.decode(tok.convert_tokens_to_ids(r.hypotheses[0][bool(lang):]), skip_special_tokens=True)
           for r in res]
    assert [d.tgt[0] for d in docs] == out
    assert len(set(out)) > 2


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_export_ct2_of_imported_models(family, hf_model, tmp_path):
    """docnmt export-ct2 converts every imported family (Marian's sinusoids, mBART's learned
    positions and embedding LayerNorm, NLLB's pre-LN and fairseq sinusoids, language codes, the
    output bias, the rows not predicted yet): CTranslate2's greedy tokens are docnmt's, with the
    language code docnmt_ct2.json records as target prefix (stopped at 12 tokens)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from docnmt.engines.export import export_ct2
    from docnmt.search import SearchConfig, beam_search
    from docnmt.translate import Translator
    _, ours = hf_model(family)
    info = export_ct2(ours, tmp_path / "ct2", log=lambda m: None)
    tr = Translator.load(ours)
    v = tr.vocab
    ct = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    tokens = json.loads((tmp_path / "ct2" / "shared_vocabulary.json").read_text())
    ids, pre = {t: i for i, t in enumerate(tokens)}, info["target_prefix"]
    outputs = set()
    for s, _ in real_pairs()[300:310]:
        src = torch.tensor([v.encode(s, "src") + [v.eos]])
        want = beam_search(tr.model, src, SearchConfig(beam=1, max_len_a=0, max_len_b=12),
                           tr.start_token(tr.cfg.decode), v.eos)[0][0].tokens
        res = ct.translate_batch([[tokens[i] for i in tr.model.with_source_language(src)[0].tolist()]],
                                 target_prefix=[pre] if pre else None, beam_size=1,
                                 max_decoding_length=12 + len(pre), end_token=info["end_token"])[0]
        assert [ids[t] for t in res.hypotheses[0][len(pre):]] == want
        outputs.add(tuple(want))
        # and the log-probabilities of that output (its </s> included) are docnmt's: the same softmax
        with torch.no_grad():
            logp = tr.model(src, torch.tensor([[tr.start_token(tr.cfg.decode), *want]])).log_softmax(-1)[0]
        ref = logp.gather(1, torch.tensor([*want, v.eos])[:, None])[:, 0]
        got = ct.score_batch([[tokens[i] for i in tr.model.with_source_language(src)[0].tolist()]],
                             [pre + [tokens[i] for i in want]])[0].log_probs[len(pre):]
        assert torch.allclose(torch.tensor(got), ref, atol=1e-3)
    assert len(outputs) > 1 or family == "m2m100"      # (M2M-100's random model repeats one output)
    # translate --engine ctranslate2 (greedy): the same sentences, with the language code handled
    import shutil

    from docnmt.config import section_class
    shutil.copytree(ours, tmp_path / "model")                  # the engine caches its conversion beside the weights
    tr = Translator.load(tmp_path / "model")
    sentences = [[s] for s, _ in real_pairs()[300:320]]
    got = {}
    for engine in ("docnmt", "ctranslate2"):
        search = section_class("decode")(**{**vars(tr.cfg.decode), "beam": 1, "engine": engine, "max_len_a": 0.0,
                                            "max_len_b": 12})
        got[engine] = [d.tgt for d in tr.translate(sentences, search)[0]]
    assert got["ctranslate2"] == got["docnmt"]


@pytest.mark.slow
def test_import_refuses_what_it_cannot_reproduce(hf_model, tmp_path, cli_error, monkeypatch):
    """A multilingual model without languages, an unknown language code, and a model whose
    logits docnmt would not reproduce (here: an activation read wrongly) are one-line errors
    that write nothing."""
    import docnmt.hf as hf
    mbart, _ = hf_model("mbart")
    assert "give --src-lang and --tgt-lang" in cli_error("import-hf", mbart, "--save-dir", tmp_path / "a")
    err = cli_error("import-hf", mbart, "--save-dir", tmp_path / "a", "--src-lang", "en_XX", "--tgt-lang", "xx_YY")
    assert "--tgt-lang xx_YY: not a language code" in err
    marian, _ = hf_model("marian")
    monkeypatch.setitem(hf.ACTIVATIONS, "swish", "relu")
    assert "logits differ from transformers'" in cli_error("import-hf", marian, "--save-dir", tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
