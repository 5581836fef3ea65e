"""The classic Moses + BPE pipeline (docnmt[moses]): docnmt.subword.MosesBPEVocab and its wiring."""
import json
import sys

import pytest

pytest.importorskip("sacremoses")
pytest.importorskip("subword_nmt")

from sacremoses import MosesDetokenizer, MosesTokenizer  # noqa: E402

from _tiny import tiny_config, tiny_corpus_files  # noqa: E402
from docnmt.data import Corpus  # noqa: E402
from docnmt.document import Document  # noqa: E402
from docnmt.errors import ConfigError  # noqa: E402
from docnmt.methods import build_model  # noqa: E402
from docnmt.prepare import prepare  # noqa: E402
from docnmt.subword import MosesBPEVocab  # noqa: E402
from docnmt.translate import Translator  # noqa: E402
from docnmt.vocab import DEFAULT_MAX_SEP, Vocab  # noqa: E402

N_PAIRS, MERGES = 800, 2000       # 800 chat turns: about the words of 300 TED sentences
SIDES = (("src", "en"), ("tgt", "de"))


@pytest.fixture(scope="module")
def pairs(chat_valid):
    """The first 800 turn pairs of the bundled dev chats: {"src": [...], "tgt": [...]}."""
    return {side: [s for d in chat_valid for s in getattr(d, side)][:N_PAIRS] for side, _ in SIDES}


@pytest.fixture(scope="module")
def bpe(pairs) -> MosesBPEVocab:
    return MosesBPEVocab.train(pairs["src"], pairs["tgt"], "en", "de", merges=MERGES)


def normalised(text: str, lang: str) -> str:
    """What Moses tokenisation followed by detokenisation makes of ``text``."""
    return MosesDetokenizer(lang).detokenize(MosesTokenizer(lang).tokenize(text, escape=False), unescape=False)


def test_layout_ids_and_frequency_order(bpe):
    v = bpe
    assert (v.pad, v.unk, v.bos, v.eos) == (0, 1, 2, 3)
    assert [v.piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert v.n_pieces == 4 + len(v.pieces) and 1000 < len(v.pieces) < 2500
    freqs = list(v.pieces.items())
    assert freqs == sorted(freqs, key=lambda pc: (-pc[1], pc[0]))
    assert [v.piece(i) for i in range(4, 8)] == [p for p, _ in freqs[:4]]
    assert v.id("<mask>") == v.n_pieces and len(v) == v.n_pieces + 3 + DEFAULT_MAX_SEP
    assert v.max_sep == DEFAULT_MAX_SEP and v.sep(600) == v.id(f"<sep{DEFAULT_MAX_SEP}>")
    assert v.sep(None) == v.id("<sep>") and v.piece(v.sep(7)) == "<sep7>"


def test_training_is_deterministic(pairs):
    src, tgt = pairs["src"][:60], pairs["tgt"][:60]
    a = MosesBPEVocab.train(src, tgt, "en", "de", merges=200)
    b = MosesBPEVocab.train(src[::-1], tgt[::-1], "en", "de", merges=200)
    assert a.codes == b.codes and list(a.pieces.items()) == list(b.pieces.items())


@pytest.mark.parametrize("side,lang", SIDES)
def test_round_trip_reproduces_moses_normalisation(bpe, pairs, chat_valid, side, lang):
    seen = pairs[side]
    ids = bpe.encode_batch(seen, side)
    assert all(4 <= i < bpe.n_pieces for sent in ids for i in sent), "training text has no unknown subwords"
    decoded = [bpe.decode(i, side) for i in ids]
    assert decoded == [normalised(s, lang) for s in seen]
    identity = [k for k, s in enumerate(seen) if normalised(s, lang) == s]
    assert len(identity) > 0.9 * len(seen)
    assert all(decoded[k] == seen[k] for k in identity)
    # unseen text: characters never seen in training become <unk> (dropped on decoding); the rest round-trips
    held_out = [s for d in chat_valid for s in getattr(d, side)][N_PAIRS:N_PAIRS + 200]
    ids = bpe.encode_batch(held_out, side)
    assert sum(i.count(bpe.unk) for i in ids) < 0.02 * sum(map(len, ids))
    known = [k for k, i in enumerate(ids) if bpe.unk not in i]
    assert len(known) > 0.6 * len(held_out)
    assert all(bpe.decode(ids[k], side) == normalised(held_out[k], lang) for k in known)


def test_sides_use_their_language(bpe):
    # English Moses keeps "'s" as one token and re-attaches it; German splits and detokenises differently
    en, de = bpe.encode("It's", "src"), bpe.encode("It's", "tgt")
    assert en != de and bpe.encode("It's") == en
    assert bpe.decode(en, side="src") == "It's"
    assert bpe.decode(en) == bpe.decode(en, side="tgt") == "It 's"  # decoding defaults to the target language


def test_continuation_markers(bpe, pairs):
    ids = bpe.encode("Autowerkstatt", "tgt")
    pieces = [bpe.piece(i) for i in ids]
    assert len(pieces) > 1 and all(p.endswith("@@") for p in pieces[:-1]) and not pieces[-1].endswith("@@")
    assert bpe.decode(ids) == "Autowerkstatt"
    assert bpe.decode(ids[:-1]) == "".join(p[:-2] for p in pieces[:-1])  # a dangling continuation
    split = [i for s in pairs["tgt"] for i in bpe.encode(s, "tgt") if bpe.piece(i).endswith("@@")]
    assert split and not any("@@" in bpe.decode(bpe.encode(s, "tgt")) for s in pairs["tgt"])


def test_unknown_and_special_symbols(bpe):
    v = bpe
    ids = v.encode("Schnee ☃ fällt", "tgt")
    assert v.unk in ids and v.decode(ids) == "Schnee fällt"
    typed = v.encode("<sep1> <mask> <eod> <s> </s> <pad> <unk>")
    assert all(i == v.unk or 4 <= i < v.n_pieces for i in typed), "text never yields docnmt's symbols"
    ids = v.encode("Das ist meine Autowerkstatt.", "tgt")
    noisy = [v.bos, *ids[:2], v.id("<sep1>"), v.id("<mask>"), *ids[2:], v.id("<eod>"), v.eos, v.pad]
    assert v.decode(noisy) == v.decode(ids) == "Das ist meine Autowerkstatt."
    assert v.decode([]) == ""


def test_save_and_load_through_vocab_load(bpe, pairs, tmp_path):
    bpe.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"bpe.codes", "bpe.vocab.json", "vocab.json"}
    meta = json.loads((tmp_path / "vocab.json").read_text())
    assert (meta["backend"], meta["src_lang"], meta["tgt_lang"]) == ("moses-bpe", "en", "de")
    loaded = Vocab.load(tmp_path)
    assert isinstance(loaded, MosesBPEVocab)
    assert len(loaded) == len(bpe) and loaded.extra == bpe.extra and loaded.pieces == bpe.pieces
    for side, _ in SIDES:
        assert loaded.encode_batch(pairs[side], side) == bpe.encode_batch(pairs[side], side)
    assert loaded.id("<sep3>") == bpe.id("<sep3>")


def test_missing_extra_is_a_config_error(bpe, tmp_path, monkeypatch):
    bpe.save(tmp_path)
    monkeypatch.delitem(sys.modules, "docnmt.subword")
    monkeypatch.setitem(sys.modules, "sacremoses", None)
    with pytest.raises(ConfigError, match=r"pip install docnmt\[moses\]"):
        Vocab.load(tmp_path)


def test_spm_vocab_json_names_its_backend_and_loads_without_it(tiny_vocab, chat_docs, tmp_path):
    tiny_vocab.save(tmp_path)
    meta = json.loads((tmp_path / "vocab.json").read_text())
    assert meta.pop("backend") == "spm"
    (tmp_path / "vocab.json").write_text(json.dumps(meta))  # written before the key existed
    loaded = Vocab.load(tmp_path)
    texts = chat_docs[0].tgt
    assert type(loaded) is Vocab and loaded.encode_batch(texts, "tgt") == tiny_vocab.encode_batch(texts)


def test_translation_detokenises_as_the_target_language(bpe, monkeypatch):
    """An untrained model's output goes through ``decode`` with the target language."""
    cfg = tiny_config("sent2sent")
    cfg.decode.beam, cfg.decode.max_len_a, cfg.decode.max_len_b = 1, 0, 6
    sides, detokenize = [], bpe._detokenize
    monkeypatch.setattr(bpe, "_detokenize", lambda ids, side: sides.append(side) or detokenize(ids, side))
    docs, _ = Translator(build_model(cfg, bpe), bpe, cfg).translate([["It's late.", "Go home."]])
    assert len(docs[0].tgt) == 2 and not any("@@" in t for t in docs[0].tgt)
    assert sides and set(sides) == {"tgt"}


def test_prepare_with_moses_bpe(tmp_path):
    prefix = tiny_corpus_files(tmp_path / "raw")                          # 12 chats, 260 turns
    dest = tmp_path / "data-bin"
    stats = prepare(dest, "en", "de", [str(prefix)], [str(prefix)], log=lambda m: None,
                    subword="moses-bpe", bpe_merges=500)
    assert {"bpe.codes", "bpe.vocab.json", "vocab.json", "prepare.json"} <= {p.name for p in dest.iterdir()}
    assert not (dest / "spm.model").exists() and stats["subword"] == "moses-bpe"
    vocab = Vocab.load(dest)
    assert isinstance(vocab, MosesBPEVocab) and len(vocab) == stats["vocab"]
    corpus = Corpus.load(dest, "valid")
    assert corpus.n_sents == stats["splits"]["valid"]["sentences"] > 200
    docs = [Document("d", ["It's a house."], ["Das ist ein Haus."])]
    again = Corpus.encode(docs, vocab)
    assert vocab.decode(again.src[0], "src") == "It's a house." and vocab.decode(again.tgt[0]) == "Das ist ein Haus."
    first = open(f"{prefix}.de", encoding="utf-8").read().splitlines()[1]
    assert vocab.decode(corpus.tgt[0]) == normalised(first, "de")


def test_cli_switches_subword_model_with_force(tmp_path, run_cli, capsys):
    prefix = tiny_corpus_files(tmp_path / "raw", n_docs=1, max_sents=60)
    dest = tmp_path / "data-bin"
    base = ("prepare", "-s", "en", "-t", "de", "--trainpref", prefix, "--destdir", dest, "--force")
    status, _, err = run_cli(*base, "--subword", "moses-bpe", "--bpe-merges", "200")
    assert status == 0 and "200 joint BPE merges" in err
    assert isinstance(Vocab.load(dest), MosesBPEVocab)
    status, _, err = run_cli(*base, "--vocab-size", "200")
    assert status == 0 and "gave only" not in err
    assert type(Vocab.load(dest)) is Vocab and not (dest / "bpe.codes").exists()
    status, _, err = run_cli(*base, "--vocab-size", "100000")           # more than 60 sentences can give
    n = Vocab.load(dest).n_pieces
    assert status == 0 and n < 100000 and f"the training text gave only {n} pieces" in err
    status, out, _ = run_cli("prepare", "--help")
    assert status == 0 and "--subword {spm,moses-bpe}" in out
