"""The Tier M-fr queue's helpers. experiments/tier_mfr/tier_mfr_keep.py: what the queue keeps in the repository
is enough to go on after runs/ is lost (a fresh checkout): a scored run comes back with the files
later runs are tested against, a run not fully scored does not, and weights are kept in the dtype
asked for. experiments/tier_mfr/tier_mfr_table.py: the target verdict counts only significant improvements.
experiments/tier_mfr/tier_mfr_search.py and experiments/tier_mfr/tier_mfr_suites.py: the analyses' counting."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

HERE = Path(__file__).resolve().parent
KEEP = HERE / "tier_mfr_keep.py"
SUITES = ("anaphora", "lexical-choice", "scat_yin2021_enfr")


def keep(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(KEEP), *map(str, args)], capture_output=True, text=True, timeout=120)


def scored_run(d: Path, scored: bool = True) -> Path:
    d.mkdir()
    (d / "config.yaml").write_text("model: {}\n")
    (d / "train.log").write_text('2026-01-01 00:00:00,000 INFO {"updates": 50, "loss": 3.0}\n'
                                 '2026-01-01 00:01:40,000 INFO {"updates": 100, "loss": 2.0}\n')
    (d / "vocab.json").write_text("{}")
    save_file({"w": torch.tensor([1.0 + 2 ** -12, 2.0]), "step": torch.tensor([3])}, str(d / "model.safetensors"))
    (d / "valid.fr").write_text("une phrase\nune autre\n")
    names = ["valid.json", "valid.coverage.json"] + [f"{s}.json" for s in SUITES]
    names += [f"{s}.scores.jsonl" for s in SUITES] + (["valid.cxmi.json"] if scored else [])
    for n in names:
        (d / n).write_text(f'{{"name": "{n}"}}\n')
    return d


def stage1(tmp_path: Path, value: float = 0.5) -> Path:
    path = tmp_path / f"stage1_{value}.safetensors"
    save_file({"w": torch.tensor([value])}, str(path))
    return path


@pytest.mark.slow
def test_a_kept_scored_run_comes_back_with_what_later_runs_are_tested_against(tmp_path):
    run, kept, lost = scored_run(tmp_path / "run"), tmp_path / "kept", tmp_path / "lost"
    s1 = stage1(tmp_path)
    (run / "valid.count.fr").write_text("une phrase\n\n")            # decoded with the sentence count forced
    for n in ("valid.count.json", "valid.count.coverage.json", "valid.vs_context.json"):
        (run / n).write_text("{}")
    assert keep("--weights", "--started-from", s1, run, kept).returncode == 0
    assert (kept / "valid.vs_context.json").exists()          # a test against any second baseline
    assert gzip.open(kept / "valid.fr.gz", "rt").read() == "une phrase\nune autre\n"
    assert gzip.open(kept / "valid.count.fr.gz", "rt").read() == "une phrase\n\n"
    assert (kept / "valid.count.json").exists() and (kept / "valid.count.coverage.json").exists()
    assert load_file(str(kept / "model.safetensors"))["w"].dtype == torch.float16
    assert load_file(str(kept / "model.safetensors"))["step"].dtype == torch.int64
    assert '"seconds": 100.0' in (kept / "training_time.json").read_text()
    assert keep("--restore", "--started-from", stage1(tmp_path, 0.25), kept, lost).returncode == 3
    assert not lost.exists()                     # fine-tuned from another stage 1: trained again
    proc = keep("--restore", "--started-from", s1, kept, lost)
    assert proc.returncode == 0, proc.stderr
    assert (lost / "valid.fr").read_text() == "une phrase\nune autre\n"
    # older than any score: the runs tested against a restored control are not scored again
    assert (lost / "valid.fr").stat().st_mtime < (run / "valid.json").stat().st_mtime
    for s in SUITES:
        assert (lost / f"{s}.scores.jsonl").read_text() == (run / f"{s}.scores.jsonl").read_text()
    assert not (lost / "config.yaml").exists()            # not a run: the queue does not resume it
    assert "RETRAIN=" in keep("--weights", lost, tmp_path / "again").stdout


def test_a_run_not_fully_scored_is_not_restored_and_a_trained_run_is_never_overwritten(tmp_path):
    run, kept, s1 = scored_run(tmp_path / "run", scored=False), tmp_path / "kept", stage1(tmp_path)
    keep("--started-from", s1, run, kept)
    assert keep("--restore", "--started-from", s1, kept, tmp_path / "lost").returncode == 3
    assert not (tmp_path / "lost").exists()
    full = scored_run(tmp_path / "full")
    keep("--started-from", s1, full, tmp_path / "kept_full")
    before = (run / "valid.fr").read_bytes()
    assert keep("--restore", "--started-from", s1, tmp_path / "kept_full", run).returncode != 0
    assert (run / "valid.fr").read_bytes() == before


def trained_run(d: Path, last: int, max_update: int = 100) -> Path:
    """A run directory trained to update ``last`` of ``max_update``, nothing scored."""
    d.mkdir()
    (d / "config.yaml").write_text(f"model: {{}}\ntrain:\n  max_update: {max_update}\n")
    (d / "metrics.jsonl").write_text("".join(f'{{"updates": {u}, "loss": 2.0}}\n' for u in range(50, last + 1, 50)))
    (d / "train.log").write_text('2026-01-01 00:00:00,000 INFO {"updates": 50, "loss": 3.0}\n'
                                 '2026-01-01 00:01:40,000 INFO {"updates": 100, "loss": 2.0}\n')
    (d / "vocab.json").write_text("{}")
    (d / "spm.model").write_bytes(b"spm")
    save_file({"w": torch.tensor([1.0 + 2 ** -12, 2.0])}, str(d / "model.safetensors"))
    return d


@pytest.mark.slow
def test_a_run_trained_but_not_scored_comes_back_from_its_kept_weights(tmp_path):
    """The queue keeps every run's weights when its training ends; when runs/ is lost before the
    run is scored, --restore-trained puts it back as a model directory (marked as restored from
    fp16 weights) instead of it being trained again, but only a run trained to its last update
    from the same stage 1, and never over a run."""
    s1, kept, lost = stage1(tmp_path), tmp_path / "kept", tmp_path / "lost"
    assert keep("--weights", "--started-from", s1, trained_run(tmp_path / "run", 100), kept).returncode == 0
    assert keep("--restore", "--started-from", s1, kept, lost).returncode == 3        # not scored
    assert keep("--restore-trained", "--started-from", stage1(tmp_path, 0.25), kept, lost).returncode == 3
    assert not lost.exists()
    proc = keep("--restore-trained", "--started-from", s1, kept, lost)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in lost.iterdir()} >= {"config.yaml", "metrics.jsonl", "model.safetensors", "vocab.json",
                                                "spm.model", "weights_restored.json"}
    assert load_file(str(lost / "model.safetensors"))["w"][0].item() == 1.0             # the fp16 copy
    assert not (lost / "valid.fr").exists()
    part, part_kept = tmp_path / "part", tmp_path / "part_kept"   # kept halfway through its scoring: that comes back
    trained_run(part, 100)
    (part / "valid.fr").write_text("une phrase\n")
    (part / "valid.json").write_text("{}")
    keep("--weights", "--started-from", s1, part, part_kept)
    assert keep("--restore-trained", "--started-from", s1, part_kept, tmp_path / "part_lost").returncode == 0
    assert (tmp_path / "part_lost/valid.fr").read_text() == "une phrase\n"
    assert (tmp_path / "part_lost/valid.fr").stat().st_mtime < (tmp_path / "part_lost/valid.json").stat().st_mtime
    assert keep("--restore-trained", "--started-from", s1, kept, lost).returncode != 0   # a run is there now
    (lost / "valid.json").write_text("{}")                    # scored, kept again as the queue does
    assert keep("--started-from", s1, lost, kept).returncode == 0
    assert (kept / "weights_restored.json").exists() and '"seconds": 100.0' in (kept / "training_time.json").read_text()
    assert "fp16" in script().system_name(tmp_path, "kept")           # its table rows say so
    keep("--weights", "--started-from", s1, trained_run(tmp_path / "again", 100), kept)   # RETRAIN: as trained
    assert not (kept / "weights_restored.json").exists() and "fp16" not in script().system_name(tmp_path, "kept")
    half = tmp_path / "kept_half"                            # kept at update 50 of 100: trained again
    keep("--weights", "--started-from", s1, trained_run(tmp_path / "half", 50), half)
    assert keep("--restore-trained", "--started-from", s1, half, tmp_path / "lost_half").returncode == 3
    assert not (tmp_path / "lost_half").exists()
    with open(half / "metrics.jsonl", "a") as f:              # a damaged file is an error, not "nothing kept":
        f.write('{"updates": 1')                               # the queue stops instead of training again
    assert keep("--restore-trained", "--started-from", s1, half, tmp_path / "lost_half").returncode not in (0, 3)


@pytest.mark.slow
def test_stage_one_weights_are_kept_as_trained(tmp_path):
    run = scored_run(tmp_path / "run")
    keep("--weights", "--fp32", run, tmp_path / "kept")
    w = load_file(str(tmp_path / "kept/model.safetensors"))["w"]
    assert w.dtype == torch.float32 and w[0].item() == 1.0 + 2 ** -12    # fp16 would round it to 1.0


def script(name: str = "tier_mfr_table"):
    """experiments/tier_mfr/NAME.py, imported from its file."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_target_verdict_needs_d_bleu_and_a_suite_better_with_every_sentence_recovered(tmp_path):
    """experiments/tier_mfr/tier_mfr_table.py's last table: better means a difference > 0 with p < 0.05 (evaluate's
    bootstrap delta is control − system, a suite's is system − control)."""
    tbl = script()

    def system(name, d_bleu_delta, d_p, scat_delta, scat_p, empty=0):
        d = tmp_path / name
        d.mkdir()
        score = {"score": 40.0}
        (d / "valid.json").write_text(json.dumps({
            "s_bleu": score, "d_bleu": score, "s_chrf": score, "d_chrf": score,
            "bootstrap": {"s": {"delta": 0.1, "p_value": 0.2}, "d": {"delta": -d_bleu_delta, "p_value": d_p}},
            "bootstrap_chrf": {"s": {"delta": 0.0, "p_value": 1.0}, "d": {"delta": 0.0, "p_value": 1.0}}}))
        (d / "scat_yin2021_enfr.json").write_text(json.dumps({"accuracy": 0.6, "against": {
            "delta": scat_delta, "p_value": scat_p}}))
        (d / "valid.coverage.json").write_text(json.dumps({"documents": 6, "documents_fully_recovered": 6,
                                                           "empty_sentences": empty}))

    system("gt", 0.5, 0.01, 0.05, 0.02)              # meets it
    system("doc2doc", 0.5, 0.01, -0.05, 0.02)        # a suite significantly worse does not count
    system("pt", 0.5, 0.2, 0.05, 0.02)               # d-BLEU not significant
    system("context", 0.5, 0.01, 0.05, 0.02, empty=1)   # a sentence lost
    rows = {r[0]: r for r in tbl.verdict_rows(tmp_path)}
    meets = {name: rows[tbl.NAMES[name]][-1] for name in ("gt", "doc2doc", "pt", "context")}
    assert meets == {"gt": "yes", "doc2doc": "no", "pt": "no", "context": "no"}
    assert rows[tbl.NAMES["gt"]][1] == "d-BLEU (+0.50, p=0.010); SCAT valid (+5.00, p=0.020)"
    assert "SCAT valid (-5.00, p=0.020)" in rows[tbl.NAMES["doc2doc"]][2]
    assert rows[tbl.NAMES["context"]][3] == "no"
    # decoded again with the source's sentence count forced: a row of its own, with its own scores and
    # coverage and the run's suites (the same model)
    pt = tmp_path / "pt"
    significant = (pt / "valid.json").read_text().replace('"p_value": 0.2}}', '"p_value": 0.01}}')
    (pt / "valid.count.json").write_text(significant)
    (pt / "valid.count.coverage.json").write_text(json.dumps({"documents": 6, "documents_fully_recovered": 6,
                                                              "empty_sentences": 0}))
    (pt / "valid.coverage.json").write_text(json.dumps({"documents": 6, "documents_fully_recovered": 2,
                                                        "empty_sentences": 40}))
    rows = {r[0]: r for r in tbl.verdict_rows(tmp_path)}
    counted = f"{tbl.NAMES['pt']}, {tbl.COUNTED}"
    assert rows[tbl.NAMES["pt"]][3:] == ["no", "no"] and rows[counted][3:] == ["yes", "yes"]
    scores = {r[0]: r for r in tbl.rows(tmp_path)}
    assert scores[counted][-1] == "6/6 (0 empty)" and scores[tbl.NAMES["pt"]][-1] == "2/6 (40 empty)"
    scat = tbl.HEADER.index("SCAT valid % (Δ, p)")
    assert scores[counted][scat] == scores[tbl.NAMES["pt"]][scat] == "60.0 (+5.0, p=0.020)"


def test_a_scored_but_untrained_model_keeps_only_its_scores_and_comes_back_without_cxmi(tmp_path):
    """Stage 1 is scored as a system (--scores-only): its score files, translation and suite
    decisions are kept, nothing of the training run, and they come back after runs/ is lost."""
    run, kept, s1 = scored_run(tmp_path / "stage1", scored=False), tmp_path / "kept", stage1(tmp_path)
    (run / "config.yaml").unlink()                  # runs/ was lost: scored from the kept weights
    assert keep("--scores-only", "--started-from", s1, run, kept).returncode == 0
    assert (kept / "valid.json").exists() and (kept / "valid.fr.gz").exists()
    assert not (kept / "config.yaml").exists() and not (kept / "training_time.json").exists()
    assert not (kept / "model.safetensors").exists()
    assert keep("--restore", "--started-from", s1, kept, tmp_path / "a").returncode == 3     # needs CXMI
    assert keep("--restore", "--scores-only", "--started-from", s1, kept, tmp_path / "b").returncode == 0
    assert (tmp_path / "b/valid.fr").read_text() == "une phrase\nune autre\n"
    assert keep("--scores-only", "--weights", "--started-from", s1, run, kept).returncode != 0


def test_second_baselines_get_their_own_verdict_rows(tmp_path):
    """The context encoder's sentence weights are stage 1's and DLS + LAA's claim is about
    G-Transformer: a second verdict row tests each against that baseline, with McNemar tests
    recomputed from both runs' kept per-example decisions."""
    tbl = script()
    s1, ctx = tmp_path / "stage1", tmp_path / "context"
    s1.mkdir(), ctx.mkdir()
    rows = lambda right: "".join(json.dumps({"right": r}) + "\n" for r in right)  # noqa: E731
    (s1 / "anaphora.scores.jsonl").write_text(rows([False] * 20 + [True] * 20))
    (ctx / "anaphora.scores.jsonl").write_text(rows([True] * 40))       # 20 more right: p = 2^-19
    score = {"score": 40.0}
    both = {"s_bleu": score, "d_bleu": score, "s_chrf": score, "d_chrf": score}
    (ctx / "valid.json").write_text(json.dumps({**both, "bootstrap": {"d": {"delta": 0.3, "p_value": 0.04}}}))
    (ctx / "valid.vs_stage1.json").write_text(json.dumps({**both, "bootstrap": {"d": {"delta": -0.6,
                                                                                       "p_value": 0.001}}}))
    (ctx / "valid.coverage.json").write_text(json.dumps({"documents": 6, "documents_fully_recovered": 6,
                                                         "empty_sentences": 0}))
    base = tbl.ALSO["gt_dls_laa"]                                # and DLS + LAA against its G-Transformer
    gt, dls = tmp_path / base, tmp_path / "gt_dls_laa"
    gt.mkdir(), dls.mkdir()
    (gt / "anaphora.scores.jsonl").write_text(rows([True] * 40))
    (dls / "anaphora.scores.jsonl").write_text(rows([True] * 39 + [False]))
    (dls / "valid.json").write_text(json.dumps({**both, "bootstrap": {"d": {"delta": -0.5, "p_value": 0.01}}}))
    (dls / f"valid.vs_{base}.json").write_text(json.dumps({**both, "bootstrap": {"d": {"delta": 0.2, "p_value": 0.1}}}))
    out = {r[0]: r for r in tbl.verdict_rows(tmp_path)}
    assert out[tbl.NAMES["context"]][1] == "nothing"          # worse than the control on d-BLEU
    vs = out[tbl.NAMES["context"] + ", against stage 1 instead"]
    assert vs[1] == "d-BLEU (+0.60, p=0.001); Bawden anaphora (+50.00, p=0.000)" and vs[-1] == "yes"
    vs = out[tbl.NAMES["gt_dls_laa"] + f", against the {tbl.NAMES[base]} instead"]
    assert vs[1] == "nothing" and vs[2] == "d-BLEU (-0.20, p=0.100); Bawden anaphora (-2.50, p=1.000)"


def test_the_figure_shows_system_minus_baseline_with_the_bootstrap_interval(tmp_path):
    """experiments/tier_mfr/tier_mfr_table.py --plot: evaluate's bootstrap is baseline − system, so the figure's
    difference and interval are negated and swapped; suites keep their place in the legend."""
    tbl = script()
    gt = tmp_path / "gt"
    gt.mkdir()
    score = {"score": 40.0}
    (gt / "valid.json").write_text(json.dumps({"s_bleu": score, "d_bleu": score, "bootstrap": {
        "d": {"delta": -0.5, "p_value": 0.01, "ci95_b_minus_a": [-0.9, -0.1]}}}))
    (gt / "scat_yin2021_enfr.json").write_text(json.dumps({"accuracy": 0.6, "against": {"delta": 0.05,
                                                                                          "p_value": 0.02}}))
    assert tbl.deltas(tmp_path) == [(tbl.NAMES["gt"], (0.5, 0.1, 0.9, 0.01), [(2, 5.0, 0.02)])]
    tbl.plot(tmp_path, tmp_path / "deltas.png")
    assert (tmp_path / "deltas.png").read_bytes()[:4] == b"\x89PNG"


def test_lengths_include_the_sentence_count_decoding_as_its_own_row(tmp_path):
    """experiments/tier_mfr/tier_mfr_lengths.py: a run's translation and its --sentence-count decoding are two
    rows (RUN, RUN.count), each against the references; a file of another length is skipped; a
    sentence that loops on a 4-gram is counted."""
    ref = tmp_path / "ref.fr"
    ref.write_text("<d>\nle chat dort\nil fait beau aujourd'hui\n")
    results = tmp_path / "results"
    loop = "oui oui oui oui oui oui"   # the 4-gram "oui oui oui oui" three times
    for run, text, count_text in (("a", "le chat dort\nil fait beau\n", "le chat dort\nil fait beau aujourd'hui\n"),
                                  ("b", "une ligne\n", None), ("c", f"le chat dort\n{loop}\n", None)):
        (results / run).mkdir(parents=True)
        with gzip.open(results / run / "valid.fr.gz", "wt") as f:
            f.write("<d>\n" + text)
        if count_text:
            with gzip.open(results / run / "valid.count.fr.gz", "wt") as f:
                f.write("<d>\n" + count_text)
    out = tmp_path / "lengths.json"
    r = subprocess.run([sys.executable, str(HERE / "tier_mfr_lengths.py"), str(results), str(ref), "--out",
                        str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["systems"]
    assert set(rows) == {"a", "a.count", "c"}
    assert rows["a.count"]["length_ratio"] == 1.0 and rows["a"]["length_ratio"] < 1.0
    assert (rows["a"]["repeating_sentences"], rows["c"]["repeating_sentences"]) == (0, 1)
    assert "control_context_copies" not in rows["a"]      # no control among the results


def test_a_context_sentence_translated_instead_of_the_current_one_is_counted():
    """experiments/tier_mfr/tier_mfr_lengths.py: a sentence that is the control's translation of a sentence before
    it in its document (not of its own) is a context copy, counted at its distance; never across
    documents, never when the control translated both sentences alike."""
    mod = script("tier_mfr_lengths")
    control = [["a", "b", "c", "d", "e"], ["f", "g"]]
    hyp = [["a", "a", "a", "b", "b"], ["e", "g"]]   # copies 1, 2, 2 and 3 back; "e" is the other document's
    zero = {"following": 0, "documents_left_out": 0}
    assert mod.context_copies(hyp, control) == {"1": 1, "2": 2, "3": 1, **zero}
    same = [["a", "a"]]                              # the control itself repeats: not a copy
    assert mod.context_copies(same, same) == {"1": 0, "2": 0, "3": 0, **zero}
    # the nearest distance counts; 4 back is beyond reach; a later sentence's is "following"
    assert mod.context_copies([["x", "x", "x"]], [["x", "x", "y"]]) == {"1": 1, "2": 0, "3": 0, **zero}
    nothing = {"1": 0, "2": 0, "3": 0, **zero}
    assert mod.context_copies([["a", "b", "c", "d", "a"]], [["a", "b", "c", "d", "x"]]) == nothing   # 4 back
    assert mod.context_copies([["", ""]], [["", "m"]]) == nothing             # an empty line is no copy
    assert mod.context_copies([["q", "q", "r"]], [["p", "q", "r"]]) == {"1": 0, "2": 0, "3": 0, "following": 1,
                                                                       "documents_left_out": 0}
    # a document of another sentence count is left out, not compared line by line
    assert mod.context_copies([["a", "a"], ["f", "f"]], [["a", "b", "c"], ["f", "g"]]) == {
        "1": 1, "2": 0, "3": 0, "following": 0, "documents_left_out": 1}


def test_the_queue_and_the_table_test_each_run_against_the_same_second_baseline():
    """experiments/tier_mfr/tier_mfr.sh's ALSO (what the queue bootstraps each run against) is the table's ALSO."""
    import re
    tbl = script()
    text = (HERE / "tier_mfr.sh").read_text()
    block = text[text.index("declare -A ALSO=("):]
    block = block[:block.index(")\n")]
    assert dict(re.findall(r"\[(\w+)\]=(\w+)", block)) == tbl.ALSO


@pytest.mark.slow
def test_a_context_input_counted_against_max_tokens_leaves_fewer_target_tokens_per_batch(tiny_dir, tmp_path):
    """experiments/tier_mfr/tier_mfr_batches.py: with docnmt's batching, a context model's batch at the same
    --max-tokens holds fewer target tokens than a sentence model's, and a larger budget restores them."""
    out = tmp_path / "batches.json"
    r = subprocess.run([sys.executable, str(HERE / "tier_mfr_batches.py"), str(tiny_dir / "data"),
                        "sent2sent_small", "context_transformer_small", "context_transformer_small:2048",
                        "--max-tokens", "512", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())
    sent, ctx, more = (rows[k]["target_tokens_per_batch"] for k in
                       ("sent2sent_small", "context_transformer_small", "context_transformer_small:2048"))
    assert ctx < 0.9 * sent and more > sent
    assert rows["context_transformer_small:2048"]["max_tokens"] == 2048



def test_rerank_takes_each_instance_from_the_translation_its_model_scores_higher(monkeypatch):
    """experiments/tier_mfr/tier_mfr_search.py: per decoding instance, the translation with the higher
    length-normalised score (the beam's objective), all of that instance's sentences together;
    each instance counted in its cell of (scored higher) x (better by chrF); NLL per word piece
    apart from NLL per label; the other translation flagged where the beam could not produce it."""
    import math
    from types import SimpleNamespace

    import numpy as np

    from docnmt.document import Document
    mod = script("tier_mfr_search")
    src = [Document("a", ["s1", "s2", "s3"]), Document("b", ["s4", "s5"])]
    rows = np.array([[0, 2, 0], [2, 3, 2], [3, 5, 3]])        # instances: s1-s2, s3, s4-s5
    ref = [["le chat noir dort", "il pleut", "une maison"], ["le jardin", "la porte verte"]]
    systems = {"hyp": [["le chien", "il neige", "un bateau"], ["le jardin", "la porte rouge"]],
               "other": [["le chat noir dort", "il pleut fort", "une maison"], ["le jardin", "la porte rouge"]],
               "ref": ref}
    # per instance: other wins the first; its second has the lower sum but the higher score per
    # token (-0.9 against -1.0); the reference beats hyp on the third only. By chrF other is
    # better on the first two, the same on the third.
    sums = {"le chien": ([-10.0, -10.0, -10.0], [10, 10, 10], [-6.0, -6.0, -6.0], [8, 8, 8], [30, 30, 30]),
            "other": ([-8.0, -18.0, -30.0], [10, 20, 10], [-4.0, -4.0, -4.0], [8, 8, 8], [8, 30, 30]),
            "ref": ([-50.0, -50.0, -5.0], [10, 10, 10], [-1.0, -1.0, -1.0], [8, 8, 8], [30, 30, 30])}
    keys = ("total", "labels", "words", "pieces", "limit")
    name = {id(ref[0]): "ref", id(systems["other"][0]): "other", id(systems["hyp"][0]): "le chien"}
    monkeypatch.setattr(mod, "decode_rows", lambda tr, docs: rows)
    monkeypatch.setattr(mod, "instance_scores", lambda tr, docs, r: dict(zip(keys, map(np.array, sums[
        name[id(docs[0].tgt)]]))))
    scored = []
    monkeypatch.setattr(mod, "evaluate_documents", lambda hyp, ref, **kw: scored.append(hyp) or {
        "s_bleu": {"score": 0.0}, "d_bleu": {"score": 0.0}})
    tr = SimpleNamespace(cfg=SimpleNamespace(decode=SimpleNamespace(
        beam=5, lenpen=1.0, lenpen_style="fairseq", max_len_a=1.2, max_len_b=10)))
    report = mod.search_report(tr, src, systems, draws=3)
    assert len(scored) == 3 + 3                     # 3 random picks, then hyp, other, rerank
    assert scored[5] == [["le chat noir dort", "il pleut fort", "une maison"], ["le jardin", "la porte rouge"]]
    other = [s for d in systems["other"] for s in d]
    for random_pick in scored[:3]:                  # whole instances, two of them from the other
        taken = [s == o for s, o in zip([s for d in random_pick for s in d], other)]
        assert taken[0] == taken[1] and taken[0] + taken[2] + 1 >= 2   # the third is the same either way
    assert report["other_scored_higher"] == 2 / 3 and report["ref_scored_higher"] == 1 / 3
    assert report["mean_score"]["other"] == (-0.8 - 0.9 - 3.0) / 3
    bits = report["bits"]["other"]
    assert report["labels"]["other"] == 40 and abs(bits["per_label"] * 40 * math.log(2) - 56) < 1e-9
    assert abs(bits["per_word_piece"] * 24 * math.log(2) - 12) < 1e-9
    cells = report["cells_by_instance_chrf"]
    assert cells["other_scored_higher_other_better"] == 2 / 3        # search errors that cost quality
    assert cells["other_scored_higher_hyp_better"] == 0
    assert cells["hyp_scored_higher_neither_better"] == 1 / 3
    assert report["other_scored_higher_beyond_limit"] == 1 / 3       # 10 labels > 8 + 1
    assert report["decode"]["max_len_b"] == 10


def test_search_report_refuses_rows_that_do_not_own_every_sentence_once(monkeypatch):
    from types import SimpleNamespace

    import numpy as np
    import pytest

    from docnmt.document import Document
    mod = script("tier_mfr_search")
    src = [Document("a", ["s1", "s2", "s3"])]
    systems = {k: [["x", "y", "z"]] for k in ("hyp", "other", "ref")}
    one = dict(total=np.array([-1.0, -1.0]), labels=np.array([2, 2]), words=np.array([-1.0, -1.0]),
               pieces=np.array([1, 1]), limit=np.array([9, 9]))
    monkeypatch.setattr(mod, "instance_scores", lambda tr, docs, r: one)
    tr = SimpleNamespace(cfg=SimpleNamespace(decode=SimpleNamespace(lenpen=1.0, lenpen_style="fairseq")))
    for rows, message in (([[0, 2, 0], [1, 3, 1]], "another instance"), ([[0, 1, 0], [2, 3, 2]], "no instance")):
        monkeypatch.setattr(mod, "decode_rows", lambda tr, docs, rows=rows: np.array(rows))
        with pytest.raises(SystemExit, match=message):
            mod.search_report(tr, src, systems)


@pytest.mark.slow
def test_search_decodes_the_instances_translate_decodes_whatever_the_references(tiny_model, chat_docs):
    """The split into instances comes from the source alone: references much longer than their
    sources (which would split a document differently when training) change nothing."""
    import numpy as np

    from docnmt import methods
    from docnmt.data import Corpus
    from docnmt.document import Document
    from docnmt.translate import Translator
    mod = script("tier_mfr_search")
    tr = Translator.load(tiny_model("doc2doc"), None, "cpu")
    beam = tr.cfg.decode.beam
    long_refs = [Document(d.docid, d.src, [" ".join([t] * 8) for t in d.tgt]) for d in chat_docs]
    corpus = Corpus.encode([Document(d.docid, d.src) for d in chat_docs], tr.vocab)
    rounds = methods.decode_walk(tr.cfg, tr.cfg.decode).rounds(tr, corpus, tr.cfg.decode)
    assert len(rounds[0][0]) > len(chat_docs)                  # documents are split at all
    assert np.array_equal(mod.decode_rows(tr, long_refs), rounds[0][0])
    # the decode flags given replace the model's own settings, the others stay
    import argparse
    assert (tr.cfg.decode.max_len_a, tr.cfg.decode.max_len_b) != (1.7, 4)
    mod.with_decode(tr, argparse.Namespace(beam=None, lenpen=None, lenpen_style=None, max_len_a=1.7, max_len_b=4))
    assert (tr.cfg.decode.max_len_a, tr.cfg.decode.max_len_b, tr.cfg.decode.beam) == (1.7, 4, beam)
    # the flags the queue passes (its DECODE) parse, and are what its translations were decoded with
    import re
    decode = re.search(r"^DECODE=\((.*)\)", (HERE / "tier_mfr.sh").read_text(), re.M).group(1).split()
    args = mod.parser().parse_args(["RUN", "--src", "s", "--ref", "r", "--hyp", "h", "--other", "o", *decode])
    mod.with_decode(tr, args)
    want = dict(zip(decode[0:-1:2], decode[1::2]))
    assert (tr.cfg.decode.beam, tr.cfg.decode.max_len_b) == (int(want["--beam"]), int(want["--max-len-b"]))
    assert (tr.cfg.decode.max_len_a, tr.cfg.decode.lenpen) == (float(want["--max-len-a"]), float(want["--lenpen"]))
    assert tr.cfg.decode.lenpen_style == want["--lenpen-style"]


def test_suite_groups_count_a_choice_that_changes_with_the_context():
    """experiments/tier_mfr/tier_mfr_suites.py: examples asking the same question in contexts that call for
    different answers form a group; a context-blind scorer never changes its choice in one."""
    import pytest

    from docnmt.suites import Candidate, ContrastiveExample
    mod = script("tier_mfr_suites")

    def ex(ctx: str, good: str, bad: str) -> ContrastiveExample:
        return ContrastiveExample("They are here.", [ctx], [Candidate(good, ["c"]), Candidate(bad, ["c"])])

    ils, elles = "Ils sont là.", "Elles sont là."
    examples = [ex("the boys", ils, elles), ex("the girls", elles, ils), ex("the men", ils, elles),
                ContrastiveExample("Alone.", [], [Candidate("Seul."), Candidate("Seule.")])]   # no group
    blind = [{"scores": s, "correct": 0} for s in ([-1.0, -3.0], [-3.0, -1.0], [-1.0, -3.0], [-1.0, -2.0])]
    report = mod.context_groups(examples, blind)
    assert report == {"groups": 1, "examples": 3, "context_sensitive": 0, "all_right": 0,
                      "median_half_range_nats": 0.0, "median_bias_nats": 2.0,
                      "median_effect_nats": 0.0, "effect_positive": 0, "effect_negative": 0,
                      "sign_test_p": 1.0}
    reads = [{"scores": s, "correct": 0} for s in ([-1.0, -3.0], [-1.5, -2.0], [-1.0, -2.5], [-1.0, -2.0])]
    report = mod.context_groups(examples, reads)     # "Elles" preferred after the girls only
    assert (report["context_sensitive"], report["all_right"]) == (1, 1)
    # differences (Elles - Ils) -2, +0.5, -1.5: half-range 1.25 > bias 0.75 (the choice flips);
    # effect +0.5 - (-1.75): the context moves the choice the right way
    assert report["median_half_range_nats"] == 1.25 and report["median_bias_nats"] == 0.75
    assert report["median_effect_nats"] == 2.25 and report["effect_positive"] == 1
    assert report["sign_test_p"] == 1.0                         # one group of one: no evidence
    assert mod.sign_test([1.0] * 9 + [-1.0])["sign_test_p"] == 22 / 1024   # 2 * (1 + 10) / 2^10
    assert mod.sign_test([1.0, 1e-4, -1e-4])["effect_negative"] == 0      # float noise is no effect
    # another suite's (or a stale) scores file: each line must carry its example's answer and description
    described = [ContrastiveExample(e.src, e.src_context, e.candidates, e.correct, {"block": str(i)})
                 for i, e in enumerate(examples)]
    lines = [dict(r, correct=0, block=str(i)) for i, r in enumerate(reads)]
    assert mod.context_groups(described, lines)["groups"] == 1
    with pytest.raises(ValueError, match="example 2 is not.*block"):
        mod.context_groups(described, lines[:1] + [dict(lines[1], block="7")] + lines[2:])
    with pytest.raises(ValueError, match="example 2 is not.*correct"):
        mod.context_groups(described, lines[:1] + [dict(lines[1], correct=1)] + lines[2:])
    with pytest.raises(ValueError, match="example 1 is not"):      # a line without them
        mod.context_groups(described, [{"scores": r["scores"]} for r in reads])
    with pytest.raises(ValueError, match="3 scored examples"):
        mod.context_groups(examples, reads[:3])


def test_every_named_run_is_in_every_table():
    """A run missing from ORDER got a scores row (rows() lists every folder) but no context-usage or
    verdict row: the training aids' runs were."""
    tbl = script()
    assert set(tbl.NAMES) - {"stage1"} == set(tbl.ORDER)
    assert set(tbl.ALSO) <= set(tbl.ORDER)
    import re
    text = (HERE / "tier_mfr.sh").read_text()
    block = text[text.index("declare -A ARCH=("):]
    block = block[:block.index("\n)\n")]
    assert set(re.findall(r"^  \[(\w+)\]=", block, re.M)) == set(tbl.ORDER)     # every run the queue can train


def test_the_best_pair_is_the_two_aids_with_the_most_cxmi_gained_pronouns_breaking_ties(tmp_path):
    tbl = script()

    def scored(name: str, cxmi: float, accuracy: float = 0.8) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "valid.cxmi.json").write_text(json.dumps({"cxmi_bits_per_token": cxmi}))
        (tmp_path / name / "hansard_all.json").write_text(json.dumps({"accuracy": accuracy}))

    scored("doc2doc", -0.337)
    scored("doc2doc_coword", -0.30)
    scored("doc2doc_split", -0.20)
    with pytest.raises(SystemExit, match="doc2doc_margin: not scored"):
        tbl.best_pair(tmp_path, "doc2doc")                       # not before all three are scored
    scored("doc2doc_margin", -0.34)
    assert tbl.best_pair(tmp_path, "doc2doc") == "doc2doc_coword_split"
    # the G-Transformer: split and margin gain the same at 4 decimals, margin's pronouns are better
    scored("gt_sentpos_lr1_nowd", 0.0045)
    scored("gt_coword", 0.0100, 0.80)
    scored("gt_split", 0.00601, 0.84)
    scored("gt_margin", 0.00599, 0.86)
    assert tbl.best_pair(tmp_path, "gt") == "gt_coword_margin"
    assert tbl.best_pair(tmp_path, "gt") in tbl.ORDER
    (tmp_path / "gt_margin" / "hansard_all.json").write_text(json.dumps({"accuracy": 0.83}))
    assert tbl.best_pair(tmp_path, "gt") == "gt_coword_split"


def test_the_aids_claim_needs_pronouns_five_fold_cxmi_and_at_most_0_3_d_bleu_lost(tmp_path):
    tbl = script()

    def run(name: str, cxmi: float, pron: tuple | None = None, loss: float | None = None, base: str = "") -> None:
        d = tmp_path / name
        d.mkdir()
        (d / "valid.json").write_text(json.dumps({"d_bleu": {"score": 45.0}}))
        (d / "valid.cxmi.json").write_text(json.dumps({"cxmi_bits_per_token": cxmi}))
        if pron:
            (d / "hansard_all.json").write_text(json.dumps({"accuracy": 0.86, "against": {"delta": pron[0],
                                                                                           "p_value": pron[1]}}))
        if loss is not None:   # evaluate --hyp RUN --compare BASE: delta = base - run
            (d / f"valid.vs_{base}.json").write_text(json.dumps({"bootstrap": {"d": {"delta": loss, "p_value": 0.2}}}))

    run("gt_sentpos_lr1_nowd", 0.004)
    run("doc2doc", -0.3)
    run("gt_coword", 0.019, (0.02, 0.01), 0.2, "gt_sentpos_lr1_nowd")        # 0.019 < 5 x 0.004
    run("gt_split", 0.030, (0.02, 0.01), 0.2, "gt_sentpos_lr1_nowd")         # meets it
    run("gt_margin", 0.030, (0.02, 0.01), 0.4, "gt_sentpos_lr1_nowd")        # loses 0.4 d-BLEU
    run("gt_coword_split", 0.030, (0.02, 0.06), -0.5, "gt_sentpos_lr1_nowd")  # p = 0.06; a gain is fine
    run("doc2doc_coword", 0.019, (0.03, 0.001), 0.0, "doc2doc")               # Doc2Doc's bar: 5 x G-T's
    run("doc2doc_split", 0.021, (-0.03, 0.001), 0.0, "doc2doc")               # significantly worse
    verdicts = {r[0]: r[-1] for r in tbl.aid_claim_rows(tmp_path)}
    names = tbl.NAMES
    assert verdicts == {names["gt_coword"]: "no (CXMI)", names["gt_split"]: "yes", names["gt_margin"]: "no (d-BLEU)",
                        names["gt_coword_split"]: "no (pronouns)", names["doc2doc_coword"]: "no (CXMI)",
                        names["doc2doc_split"]: "no (pronouns)"}
    # the preset's recipe: the run meeting the claim; none meeting it, the most CXMI gained at <= 0.3 lost
    assert tbl.best_recipe(tmp_path) == "gt_split"
    (tmp_path / "gt_split" / "hansard_all.json").unlink()
    assert tbl.best_recipe(tmp_path) == "doc2doc_split"        # -0.3 -> 0.021: the most gained
    (tmp_path / "doc2doc_split" / "valid.vs_doc2doc.json").write_text(
        json.dumps({"bootstrap": {"d": {"delta": 0.31, "p_value": 0.01}}}))
    assert tbl.best_recipe(tmp_path) == "doc2doc_coword"       # doc2doc_split now loses 0.31
    tbl.plot_aids(tmp_path, tmp_path / "aids.png")            # the same runs as a figure
    assert (tmp_path / "aids.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lengths_count_the_sittings_a_system_is_above_the_control_on(tmp_path):
    """experiments/tier_mfr/tier_mfr_lengths.py: each document's own d-BLEU (the unit the d-level
    bootstrap resamples) and how many documents a system is above the control on."""
    import sacrebleu
    ref = tmp_path / "ref.fr"
    ref.write_text("<d>\nle chat dort sur le tapis\nil fait beau\n<d>\nla maison est grande et belle\nmerci\n")
    results = tmp_path / "results"
    for run, text in (("control", "<d>\nle chat dort sur un lit\nil fait beau\n<d>\nla maison est petite\nmerci\n"),
                      ("a", "<d>\nle chat dort sur le tapis\nil fait beau\n<d>\nune maison\nmerci\n")):
        (results / run).mkdir(parents=True)
        with gzip.open(results / run / "valid.fr.gz", "wt") as f:
            f.write(text)
    out = tmp_path / "lengths.json"
    r = subprocess.run([sys.executable, str(HERE / "tier_mfr_lengths.py"), str(results), str(ref), "--out",
                        str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["systems"]
    joined = "le chat dort sur le tapis il fait beau"       # the first document, its two lines joined
    assert rows["a"]["d_bleu_by_document"][0] == sacrebleu.corpus_bleu([joined], [[joined]]).score
    assert rows["a"]["d_bleu_by_document"][0] == pytest.approx(100.0)
    assert rows["a"]["d_bleu_by_document"][1] < rows["control"]["d_bleu_by_document"][1]
    assert (rows["a"]["documents_above_control"], rows["control"]["documents_above_control"]) == (1, 0)


def test_the_queue_runs_the_best_pair_once_the_single_aids_are_scored(tmp_path):
    """tier_mfr.sh's pick_pair: ONLY="... gt_best_pair" runs the pair --best-pair names, and nothing
    (one line) while a single-aid run is not scored; other names pass through."""
    import re
    text = (HERE / "tier_mfr.sh").read_text()
    func = re.search(r"^pick_pair\(\) \{.*?^\}", text, re.M | re.S).group(0)
    root = HERE.parents[1]

    def pick(name: str) -> subprocess.CompletedProcess:
        import os
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        return subprocess.run(["bash", "-c", f'{func}\nKEEP="{tmp_path}"\npick_pair "{name}"'], cwd=root,
                              capture_output=True, text=True, timeout=60, env=env)

    for run, cxmi in (("gt_sentpos_lr1_nowd", 0.004), ("gt_coword", 0.004), ("gt_split", 0.009)):
        (tmp_path / run).mkdir()
        (tmp_path / run / "valid.cxmi.json").write_text(json.dumps({"cxmi_bits_per_token": cxmi}))
        (tmp_path / run / "hansard_all.json").write_text(json.dumps({"accuracy": 0.85}))
    r = pick("gt_best_pair")
    assert r.stdout == "" and "not chosen yet" in r.stderr
    (tmp_path / "gt_margin").mkdir()
    (tmp_path / "gt_margin" / "valid.cxmi.json").write_text(json.dumps({"cxmi_bits_per_token": 0.006}))
    (tmp_path / "gt_margin" / "hansard_all.json").write_text(json.dumps({"accuracy": 0.85}))
    assert pick("gt_best_pair").stdout.strip() == "gt_split_margin"
    assert pick("gt_margin").stdout.strip() == "gt_margin"


@pytest.mark.parametrize("preset,run", [("g_transformer_finetune_docnmt_split_small", "gt_split"),
                                        ("g_transformer_finetune_docnmt_split_margin_small", "gt_split_margin")])
def test_a_preset_shipped_from_an_aid_run_trains_what_the_run_trained(preset, run):
    """The aids' presets are the kept runs' recipes: every model, data and method setting and every
    training setting but where the queue logs and saves (the vocabulary's size comes from the data)."""
    from docnmt.config import Config
    kept = yaml.safe_load((HERE / "results" / run / "config.yaml").read_text())
    mine = Config.load(preset).to_dict()
    queue_only = {"validate_interval_updates", "save_interval_updates"}
    for section in ("model", "data", "method", "train"):
        theirs = {k: v for k, v in kept[section].items() if k not in {"vocab_size", "pad_id", *queue_only}}
        ours = {k: mine[section][k] for k in theirs if k in mine[section]}
        assert ours == theirs, f"{preset} {section}"
