"""CTranslate2 and int8 (docs/performance.md#ctranslate2, #int8): ``docnmt export-ct2`` converts
tiny native models whose greedy and beam outputs under CTranslate2 are docnmt's token for token;
``--engine ctranslate2`` translates as docnmt does (documents, recovery, formats around it) and
refuses the architectures CTranslate2 has no equivalent of; ``--precision int8`` runs and stays
close to fp32 in translate and score."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

DOCS = [["Hello.", "Hi there, how can I help today?", "I need a mechanic."],
        ["Okay, thanks.", "hello. how can i help you?"],
        ["Ok what part of town?", "enjoy!", "sure. where should i look for tickets?", "Okay. Sounds good."]]


def _marker(docs) -> str:
    return "\n<d>\n".join("\n".join(d) for d in docs) + "\n"


def _instances(tr, name):
    """Source instances as docnmt builds them: sentences, or Doc2Doc's joined documents."""
    from docnmt.data import Corpus, InstanceSet
    from docnmt.document import Document
    from docnmt.methods import decode_walk
    corpus = Corpus.encode([Document(str(i), d) for i, d in enumerate(DOCS)], tr.vocab, max_sentence_tokens=1000)
    rows = decode_walk(tr.cfg, tr.cfg.decode).rounds(tr, corpus, tr.cfg.decode)[0][0]
    iset = InstanceSet(corpus, rows, tr.joiner)
    return [iset.collate([k])["src"][0].tolist() for k in range(len(rows))]


@pytest.mark.parametrize("name", ["sent2sent", "doc2doc"])
def test_export_ct2_searches_equal_docnmts(name, tiny_model, tmp_path, run_cli):
    """The exported model, run by CTranslate2 with the settings docnmt_ct2.json records, gives
    docnmt's greedy and beam-5 tokens for every instance. (Nothing banned on either side here:
    CTranslate2 renormalises over the tokens it may generate, docnmt does not, so with banned
    tokens an undertrained model's beams can rank apart; see the engine test below.)"""
    from docnmt.search import SearchConfig, beam_search
    from docnmt.translate import Translator
    status, _, err = run_cli("export-ct2", tiny_model(name), tmp_path / "ct2")
    assert status == 0, err
    info = json.loads((tmp_path / "ct2" / "docnmt_ct2.json").read_text())
    tr = Translator.load(tiny_model(name))
    ct = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    vocab = json.loads((tmp_path / "ct2" / "shared_vocabulary.json").read_text())
    ids = {t: i for i, t in enumerate(vocab)}
    assert len(vocab) == len(tr.vocab) and info["decoder_start_token"] == vocab[tr.start_token(tr.cfg.decode)]
    sources = _instances(tr, name)
    limit, compared = 30, 0
    for beam in (1, 5):
        cfg = SearchConfig(beam=beam, max_len_a=0, max_len_b=limit)
        for src in sources:
            ours = beam_search(tr.model, torch.tensor([src]), cfg, tr.start_token(tr.cfg.decode), tr.joiner.end)[0][0]
            res = ct.translate_batch([[vocab[i] for i in src]], beam_size=beam, patience=1,
                                     max_decoding_length=limit, end_token=info["end_token"])[0]
            if beam == 1 or len(ours.tokens) < limit:   # at the limit docnmt forces </s>, CTranslate2 stops
                assert [ids[t] for t in res.hypotheses[0]] == ours.tokens, (beam, src)
                compared += beam > 1
    assert compared or name == "doc2doc"        # the tiny Doc2Doc model never ends an instance before the limit


def test_export_ct2_refuses_what_has_no_equivalent(tiny_model, tmp_path, cli_error, run_cli):
    line = cli_error("export-ct2", tiny_model("gtransformer"), tmp_path / "a")
    assert "gtransformer" in line and not (tmp_path / "a").exists()
    assert run_cli("export-ct2", tiny_model("sent2sent"), tmp_path / "b")[0] == 0
    assert "pass --force" in cli_error("export-ct2", tiny_model("sent2sent"), tmp_path / "b")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert "--force only" in cli_error("export-ct2", tiny_model("sent2sent"), tmp_path / "mine", "--force")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def _translate(run_cli, model, tmp_path, *flags) -> str:
    src = tmp_path / "src.txt"
    src.write_text(_marker(DOCS))
    status, out, err = run_cli("translate", model, "-i", src, "-q", *flags)
    assert status == 0, err
    return out


@pytest.mark.parametrize("name,beam", [("sent2sent", "1"), ("doc2doc", "1")])
def test_engine_ctranslate2_translates_as_docnmt(name, beam, tiny_model, tmp_path, run_cli):
    """translate --engine ctranslate2 writes docnmt's output (documents, Doc2Doc's recovery, the
    marker format); the converted model is cached beside the weights and reused. Greedy: beams
    may rank apart where an instance reaches the length limit (docnmt forces </s> there) or, for an
    undertrained model, because CTranslate2 renormalises over the tokens it may generate
    (docs/performance.md#ctranslate2)."""
    model = tmp_path / name                  # a copy: the cache is written beside the weights
    shutil.copytree(tiny_model(name), model)
    ours = _translate(run_cli, model, tmp_path, "--beam", beam)
    theirs = _translate(run_cli, model, tmp_path, "--beam", beam, "--engine", "ctranslate2")
    assert theirs == ours and ours.count("<d>") == 2
    cache = model / "ctranslate2" / "model" / "model.bin"
    assert cache.exists()
    before = cache.stat().st_mtime_ns
    assert _translate(run_cli, model, tmp_path, "--beam", beam, "--engine", "ctranslate2") == ours
    assert cache.stat().st_mtime_ns == before
    weights = model / "model.safetensors"                  # new weights: converted again
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert _translate(run_cli, model, tmp_path, "--beam", beam, "--engine", "ctranslate2") == ours
    assert cache.stat().st_mtime_ns != before


def test_engine_cache_never_replaces_a_users_directory(tiny_model, tmp_path, cli_error):
    model = tmp_path / "s2s"
    shutil.copytree(tiny_model("sent2sent"), model)
    (model / "ctranslate2" / "model").mkdir(parents=True)
    (model / "ctranslate2" / "model" / "notes.txt").write_text("mine")
    src = tmp_path / "src.txt"
    src.write_text(_marker(DOCS))
    assert "not docnmt's CTranslate2 cache" in cli_error("translate", model, "-i", src, "--engine", "ctranslate2")
    assert (model / "ctranslate2" / "model" / "notes.txt").read_text() == "mine"


def test_engine_ctranslate2_refuses_other_architectures(tiny_model, tmp_path, cli_error):
    src = tmp_path / "src.txt"
    src.write_text(_marker(DOCS))
    line = cli_error("translate", tiny_model("gtransformer"), "-i", src, "--engine", "ctranslate2")
    assert "--engine ctranslate2" in line and "gtransformer" in line
    line = cli_error("translate", tiny_model("sent2sent"), "-i", src, "--engine", "ctranslate2",
                     "--no-repeat-ngram-size", "2")
    assert "no-repeat-ngram-size" in line
    line = cli_error("translate", tiny_model("doc2doc"), "-i", src, "--engine", "ctranslate2", "--sliding")
    assert "--sliding" in line and "--engine docnmt" in line


def test_int8_is_close_to_fp32(tiny_model):
    """The int8 copy's log-probabilities are a few hundredths from fp32's, the fp32 model is
    left as it was, and most of its greedy translations agree."""
    from docnmt.config import section_class
    from docnmt.engines.int8 import Int8Linear, quantize
    from docnmt.translate import Translator
    tr = Translator.load(tiny_model("doc2doc"))
    q = quantize(tr.model)
    assert isinstance(q.decoder.layers[0].sublayers[0].attn.in_proj, Int8Linear)
    assert not any(isinstance(m, Int8Linear) for m in tr.model.modules())
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, 300, (2, 9), generator=g), torch.randint(4, 300, (2, 7), generator=g)
    with torch.no_grad():
        diff = (tr.model(src, tgt).log_softmax(-1) - q(src, tgt).log_softmax(-1)).abs()
    assert 0 < diff.mean() < 0.03 and diff.max() < 0.3
    out = {}
    for precision in ("fp32", "int8"):
        cfg = section_class("decode")(**{**vars(tr.cfg.decode), "beam": 1, "precision": precision})
        out[precision] = [s for d in tr.translate(DOCS, cfg)[0] for s in d.tgt]
    assert sum(x == y for x, y in zip(out["fp32"], out["int8"])) >= 0.5 * len(out["fp32"])


def test_int8_in_translate_and_score(tiny_model, tmp_path, run_cli):
    """--precision int8 runs in translate and score (CLI) and scores near fp32's."""
    model = tiny_model("sent2sent")
    assert _translate(run_cli, model, tmp_path, "--precision", "int8").count("<d>") == 2
    src, ref = tmp_path / "s.txt", tmp_path / "r.txt"
    src.write_text(_marker(DOCS))
    ref.write_text(_marker(DOCS))
    scores = {}
    for precision in ("fp32", "int8"):
        status, out, err = run_cli("score", model, "--src", src, "--ref", ref, "-q", "--precision", precision)
        assert status == 0, err
        scores[precision] = [float(line.split("\t")[2]) for line in out.splitlines()[1:]]
    assert scores["fp32"] != scores["int8"]
    assert max(abs(x - y) / max(abs(x), 1) for x, y in zip(scores["fp32"], scores["int8"])) < 0.05


def test_serve_loads_models_for_the_engine_and_int8(tiny_model, tmp_path):
    """docnmt serve's --engine / --precision: every worker's translator decodes with them (the
    model converted at start), and a model the engine cannot run is refused at start."""
    from docnmt.errors import DocnmtError
    from docnmt.serve.launcher import load_models
    from docnmt.translate import Translator
    model = tmp_path / "s2s"
    shutil.copytree(tiny_model("sent2sent"), model)
    served = load_models([str(model)], 2, "cpu", decode={"decode.engine": "ctranslate2", "decode.beam": 1})["s2s"]
    assert served.cfg.decode.engine == "ctranslate2" and (model / "ctranslate2" / "model" / "model.bin").exists()
    ref = Translator.load(model)
    greedy = ref.decode_config().__class__(**{**vars(ref.cfg.decode), "beam": 1})
    want = [d.tgt for d in ref.translate(DOCS, greedy)[0]]
    assert all([d.tgt for d in tr.translate(DOCS, tr.cfg.decode)[0]] == want for tr in served.translators)
    int8 = load_models([str(model)], 1, "cpu", decode={"decode.precision": "int8"})["s2s"].translators[0]
    assert "_int8" in vars(int8)
    with pytest.raises(DocnmtError, match="ctranslate2"):
        load_models([str(tiny_model("gtransformer"))], 1, "cpu", decode={"decode.engine": "ctranslate2"})
