"""docnmt.metrics against SacreBLEU on real chat turns (the bundled BConTrasT dev chats)
 (docs/methods/discourse.md#s-bleu-and-d-bleu)."""
import string

import pytest

sacrebleu = pytest.importorskip("sacrebleu")

from _tiny import chat_documents  # noqa: E402
from docnmt.errors import DataError  # noqa: E402
from docnmt.metrics import evaluate_documents, format_table, paired_bootstrap, strip_special  # noqa: E402


@pytest.fixture(scope="module")
def refs():
    # the German turns of at least 6 words of the first 3 dev chats (bad_system keeps 3 words of each)
    docs = [[s for s in d.tgt if len(s.split()) >= 6] for d in chat_documents("valid")[:3]]
    assert len(docs) == 3 and all(docs)
    return docs


def perturb(sent: str, i: int) -> str:
    """Deterministic damage: drop every third word, swap the first two on odd sentences."""
    words = [w for j, w in enumerate(sent.split()) if j % 3 != 2] or sent.split()
    if i % 2 and len(words) > 1:
        words[0], words[1] = words[1], words[0]
    return " ".join(words)


def bad_system(docs):
    """Much worse than perturb(): keeps only the first three words of each sentence."""
    return [[" ".join(s.split()[:3]) for s in d] for d in docs]


@pytest.fixture(scope="module")
def hyps(refs):
    return [[perturb(s, i) for i, s in enumerate(d)] for d in refs]


def flat(docs):
    return [s for d in docs for s in d]


def joined(docs):
    return [" ".join(d) for d in docs]


def test_scores_match_sacrebleu(hyps, refs):
    r = evaluate_documents(hyps, refs)
    assert r["s_bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(flat(hyps), [flat(refs)]).score)
    assert r["d_bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(joined(hyps), [joined(refs)]).score)
    assert r["s_chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(flat(hyps), [flat(refs)]).score)
    assert r["d_chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(joined(hyps), [joined(refs)]).score)
    assert r["d_bleu_lc"]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(joined(hyps), [joined(refs)], lowercase=True).score)
    assert 0 < r["s_bleu"]["score"] < 100 and r["s_bleu"]["score"] != r["d_bleu"]["score"]
    assert r["n_docs"] == 3 and r["n_sents"] == len(flat(refs)) == r["n_sents_scored"]
    assert r["n_mismatched_docs"] == 0 and r["mismatched_docs"] == []
    assert "case:mixed" in r["s_bleu"]["signature"] and "tok:13a" in r["s_bleu"]["signature"]
    assert "case:lc" in r["s_bleu_lc"]["signature"]
    assert f"version:{sacrebleu.__version__}" in r["d_chrf"]["signature"]


def test_identity_and_options(refs):
    r = evaluate_documents(refs, refs, lowercase_too=False, metrics=("bleu",))
    assert r["s_bleu"]["score"] == pytest.approx(100) and r["d_bleu"]["score"] == pytest.approx(100)
    assert "s_bleu_lc" not in r and "s_chrf" not in r


def test_lowercase_differs_when_case_differs(refs):
    ascii_up = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)  # keeps lower() exact
    upper = [[s.translate(ascii_up) for s in d] for d in refs]
    r = evaluate_documents(upper, refs)
    assert r["s_bleu_lc"]["score"] == pytest.approx(100) and r["d_chrf_lc"]["score"] == pytest.approx(100)
    assert r["s_bleu"]["score"] < 50 and r["d_chrf"]["score"] < r["d_chrf_lc"]["score"]


def test_mismatched_docs_excluded_from_s_level(hyps, refs):
    broken = [hyps[0], hyps[1][:-1], hyps[2]]  # document 1 lost its last sentence
    r = evaluate_documents(broken, refs)
    assert r["mismatched_docs"] == [1] and r["n_mismatched_docs"] == 1
    kept_h, kept_r = flat([hyps[0], hyps[2]]), flat([refs[0], refs[2]])
    assert r["n_sents_scored"] == len(kept_r)
    assert r["s_bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(kept_h, [kept_r]).score)
    assert r["d_bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(joined(broken), [joined(refs)]).score)
    none = evaluate_documents([d[:-1] for d in hyps], refs)
    assert none["s_bleu"] is None and none["s_chrf_lc"] is None and none["d_bleu"] is not None
    assert "-" in format_table(none).splitlines()[1]
    with pytest.raises(DataError):
        evaluate_documents(hyps[:2], refs)


def test_strip_special_and_d_level_joining(refs):
    assert strip_special("<s> Hallo Welt </s> <s> ja </s>") == "Hallo Welt ja"
    assert strip_special("<sos> eins <sep1> zwei<sep12>drei <sep> vier <eos>") == "eins zwei drei vier"
    assert strip_special("<idx_3> a  b <eod>") == "a b"
    tagged = [[f"<s> {s} </s>" for s in d] for d in refs]
    tagged[0][0] = "<sep3>"  # a sentence that is empty once tokens are gone: no double space
    tagged[1][1] = " " + tagged[1][1] + "  "
    r = evaluate_documents(tagged, refs)
    assert r["s_bleu"]["score"] == pytest.approx(
        sacrebleu.corpus_bleu([""] + flat(refs)[1:], [flat(refs)]).score)
    expected = joined([refs[0][1:]] + refs[1:])
    assert r["d_bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(expected, [joined(refs)]).score)


@pytest.mark.parametrize("level", ["d", "s"])
def test_bootstrap(hyps, refs, level):
    same = paired_bootstrap(hyps, hyps, refs, level=level, n_samples=200)
    assert same["delta"] == 0 and same["p_value"] >= 0.5 and same["ci95_b_minus_a"] == [0.0, 0.0]
    res = paired_bootstrap(bad_system(refs), hyps, refs, level=level, n_samples=300, seed=7)
    joiner = joined if level == "d" else flat
    assert res["b"] == pytest.approx(sacrebleu.corpus_bleu(joiner(hyps), [joiner(refs)]).score)
    assert res["a"] == pytest.approx(sacrebleu.corpus_bleu(joiner(bad_system(refs)), [joiner(refs)]).score)
    assert res["delta"] == pytest.approx(res["b"] - res["a"]) and res["delta"] > 10
    assert res["p_value"] < 0.05 and res["ci95_b_minus_a"][0] > 0 and res["n_samples"] == 300
    # the reverse comparison is just as significant; a fixed seed gives identical results
    rev = paired_bootstrap(hyps, bad_system(refs), refs, level=level, n_samples=300, seed=7)
    assert rev["p_value"] < 0.05 and rev["delta"] == pytest.approx(-res["delta"])
    assert paired_bootstrap(bad_system(refs), hyps, refs, level=level, n_samples=300, seed=7) == res


def test_bootstrap_chrf_and_errors(hyps, refs):
    res = paired_bootstrap(bad_system(refs), hyps, refs, metric="chrf", n_samples=100)
    assert res["b"] == pytest.approx(sacrebleu.corpus_chrf(joined(hyps), [joined(refs)]).score)
    with pytest.raises(ValueError):
        paired_bootstrap(hyps, hyps, refs, level="x")
    with pytest.raises(DataError):
        paired_bootstrap([d[:-1] for d in hyps], hyps, refs, level="s")


def test_format_table(hyps, refs):
    r = evaluate_documents(hyps, refs)
    table = format_table(r)
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "cased", "lowercased"]
    assert [line.split()[0] for line in lines[1:5]] == ["s-BLEU", "d-BLEU", "s-chrF", "d-chrF"]
    assert f"{r['d_bleu']['score']:.2f}" in lines[2] and f"{r['d_bleu_lc']['score']:.2f}" in lines[2]
    for key in ("s_bleu", "s_bleu_lc", "s_chrf", "s_chrf_lc"):
        assert r[key]["signature"] in table


# ---- d-BLEU by document length (length-bias evaluation, docs/methods/length_bias.md) ----------

def test_bleu_by_length_buckets_documents_and_scores_each_bucket(chat_valid):
    from docnmt.metrics import bleu_by_length
    docs = chat_valid[:6]
    refs = [d.tgt for d in docs]
    hyps = [list(d.tgt) for d in docs]
    for k in (0, 5):                              # the first bucket's documents cased differently (chat turns
        hyps[k] = [s.upper() for s in hyps[k]]    # have much punctuation: one of two keeps the bucket above 50)
    lengths = [10, 70, 70, 300, 5000, 20]
    rows = bleu_by_length(hyps, refs, lengths)
    assert [r["bucket"] for r in rows] == ["[0, 64)", "[64, 128)", "[256, 512)", "[4096, inf)"]
    assert [r["n_docs"] for r in rows] == [2, 2, 1, 1]
    assert rows[1]["d_bleu"] == pytest.approx(100.0) and rows[3]["d_bleu"] == pytest.approx(100.0)
    assert rows[0]["d_bleu"] < 50 < rows[0]["d_bleu_lc"]           # only the cased score drops much
    assert rows[0]["mean_length"] == pytest.approx(15.0)


def test_evaluate_by_length_cli_writes_table_json_and_plot(tmp_path, chat_docs, run_cli):
    import json

    from docnmt.readers import write_marker
    write_marker(chat_docs, tmp_path / "src.en", "src")
    write_marker(chat_docs, tmp_path / "ref.de", "tgt")
    status, out, _ = run_cli("evaluate", "--hyp", tmp_path / "ref.de", "--ref", tmp_path / "ref.de", "--by-length",
                             "--src", tmp_path / "src.en", "--plot", tmp_path / "len.png",
                             "--json", tmp_path / "r.json")
    assert status == 0 and "d-BLEU by document length (source words)" in out
    rows = json.loads((tmp_path / "r.json").read_text())["by_length"]
    assert sum(r["n_docs"] for r in rows) == len(chat_docs)
    assert (tmp_path / "len.png").stat().st_size > 0
