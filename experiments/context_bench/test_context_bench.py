"""The context-dependence benchmark (experiments/context_bench/README.md).

Fast: the generator is seeded, balanced, and its dependency is recoverable from sentence n-k only
(the two variants of a pair share the current source sentence and every sentence but n-k); the
suites are read by docnmt's Voita reader with the right distances.

Slow (tiny models trained with the docnmt CLI, about two CPU minutes in all): Doc2Doc from
scratch solves both dependencies at k = 1 (>= 90%) and is at chance when its context is cut
(``--max-context 0``); the sentence model, Doc2Sent and the context encoder are exactly at
chance on the target side (they never see the target context).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import generate as gen  # noqa: E402


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cb")
    gen.generate(out, seed=3, train_docs=40, valid_docs=5, distances=[1, 3, 10], examples=40)
    return out


def test_generation_is_seeded(tmp_path, small):
    gen.generate(tmp_path, seed=3, train_docs=40, valid_docs=5, distances=[1, 3, 10], examples=40)
    for name in ("raw/train.en", "raw/train.xx", "suites/target_k3.json", "suites/source_k10.json"):
        assert (tmp_path / name).read_bytes() == (small / name).read_bytes()
    other = tmp_path / "other"
    gen.generate(other, seed=4, train_docs=40, valid_docs=5, distances=[1, 3, 10], examples=40)
    assert (other / "raw/train.en").read_bytes() != (small / "raw/train.en").read_bytes()


def test_the_variants_differ_only_in_sentence_n_minus_k(small):
    for dep in gen.DEPENDENCIES:
        for k in (1, 3, 10):
            exs = json.loads((small / f"suites/{dep}_k{k}.json").read_text())
            assert len(exs) == 40 and all(ex["ctx_dist"] == k for ex in exs)
            for a, b in zip(exs[::2], exs[1::2]):
                src_a, src_b = a["src"].split(" _eos "), b["src"].split(" _eos ")
                tgt_a, tgt_b = a["dst"][0].split(" _eos "), b["dst"][0].split(" _eos ")
                n, ante = len(src_a) - 1, a["antecedent"]
                assert n - ante == k and b["antecedent"] == ante
                assert src_a[-1] == src_b[-1]                       # the current source is the same
                assert a["dst"][0].split(" _eos ")[-1] == b["dst"][1].split(" _eos ")[-1]   # right and wrong swap
                assert a["dst"][1].split(" _eos ")[-1] == b["dst"][0].split(" _eos ")[-1]
                differ = [i for i in range(n) if (src_a[i], tgt_a[i]) != (src_b[i], tgt_b[i])]
                assert differ == [ante]                             # only sentence n-k tells them apart
                assert (src_a[ante] == src_b[ante]) == (dep == "target")   # target-side: the source gives no clue
                # both candidates share the target context
                assert a["dst"][0].split(" _eos ")[:-1] == a["dst"][1].split(" _eos ")[:-1]


def test_genders_and_senses_are_balanced(small):
    src = (small / "raw/train.en").read_text().splitlines()
    tgt = (small / "raw/train.xx").read_text().splitlines()
    pronouns = Counter(t.split()[0] for s, t in zip(src, tgt) if s.startswith("It "))
    assert set(pronouns) == {"Il", "Elle"} and abs(pronouns["Il"] - pronouns["Elle"]) < 0.25 * sum(pronouns.values())
    for word, (sense_a, _), (sense_b, _) in gen.SENSES:
        counts = Counter(next((s[0] for s in (sense_a, sense_b) if f" {s[0]}" in t), None)
                         for e, t in zip(src, tgt) if f"the {word}" in e)
        assert None not in counts and len(counts) == 2, (word, counts)
    big = [gen.target_event(gen.random.Random(i), "mf"[i % 2]) for i in range(2000)]
    nouns = Counter(a[1].split()[-1].rstrip(".") for a, _, _ in big)
    assert len(nouns) >= 12            # every noun with both of its translations (some with an adjective after)


def test_fillers_hold_no_dependency_word():
    rng = gen.random.Random(0)
    banned = {w for n in gen.AMBIGUOUS_NOUNS for w in n} | {s[0] for s in gen.SENSES} | {"it", "il", "elle"}
    banned |= {c[0].split()[-1] for s in gen.SENSES for sense in s[1:] for c in sense[1]}
    for _ in range(3000):
        en, xx = gen.filler(rng)
        words = set(en.lower().rstrip(".").split()) | set(xx.lower().rstrip(".").split())
        assert not words & banned, (en, xx)
    assert len({gen.filler(rng) for _ in range(3000)}) > 2500    # varied


def test_docnmt_reads_the_suites(small):
    from docnmt.contrastive import source_only_ceiling
    from docnmt.suites import read_suite
    for dep in gen.DEPENDENCIES:
        exs = read_suite(small / f"suites/{dep}_k3.json", "auto", detokenize=True)
        assert len(exs) == 40 and {ex.meta["distance"] for ex in exs} == {3}
        assert len(exs[0].src_context) >= 3 and len(exs[0].candidates) == 2 and exs[0].correct == 0
        # sacremoses' detokeniser leaves the sentences as written (no space before a period)
        raw = json.loads((small / f"suites/{dep}_k3.json").read_text())
        assert exs[0].src == raw[0]["src"].split(" _eos ")[-1]
        if dep == "target":           # docnmt's own bound for a model without target context
            assert source_only_ceiling(exs) == 0.5


# ---- slow: tiny models ----------------------------------------------------------------------

TINY = ["--set", "model.d_model=64", "--set", "model.ffn_dim=256", "--set", "model.heads=4",
        "--set", "model.encoder_layers=2", "--set", "model.decoder_layers=2", "--set", "train.max_epoch=0",
        "--max-tokens", "2048", "--patience", "0", "--threads", "1", "--no-progress", "--lr", "2e-3",
        "--warmup-updates", "100", "--seed", "1"]


def docnmt(*argv) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "docnmt.cli", *map(str, argv)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    """A small corpus with events at distances 1-2 only, prepared."""
    out = tmp_path_factory.mktemp("bench")
    gen.generate(out, seed=1, train_docs=300, valid_docs=10, doc_sents=(8, 16), train_distances=[1, 2],
                 distances=[1], examples=200)
    docnmt("prepare", "-s", "en", "-t", "xx", "--trainpref", out / "raw/train", "--validpref", out / "raw/valid",
           "--destdir", out / "data", "--vocab-size", 600)
    return out


def accuracy(bench: Path, model: Path, suite: str, *extra) -> float:
    report = bench / f"{model.name}.{suite}{'.cut' if extra else ''}.json"
    docnmt("score-contrastive", model, bench / f"suites/{suite}.json", "--no-detokenize", "--json", report, "-q",
           "--force", *extra)
    return json.loads(report.read_text())["accuracy"]


def trained(bench: Path, name: str, arch: str, updates: int, *extra) -> Path:
    path = bench / name
    if not (path / "model.safetensors").exists():
        docnmt("train", bench / "data", "--arch", arch, "--save-dir", path, "--max-update", updates, *TINY, *extra)
    return path


@pytest.mark.slow
def test_doc2doc_reads_the_context_and_is_at_chance_without_it(bench):
    model = trained(bench, "doc2doc", "doc2doc_small", 1000)
    assert accuracy(bench, model, "target_k1") >= 0.9
    assert accuracy(bench, model, "source_k1") >= 0.9
    # the context path cut: the same model scored without context sentences
    assert accuracy(bench, model, "target_k1", "--max-context", "0") == 0.5
    assert accuracy(bench, model, "source_k1", "--max-context", "0") == 0.5


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sent2sent_small", "doc2sent_small", "context_transformer_small"])
def test_models_without_target_context_are_exactly_at_chance_on_the_target_side(bench, arch):
    """Both members of a pair give such a model the same input, so it scores exactly 50%, trained
    or not; any leak of the target context (a mask, a window) would make the members differ."""
    model = trained(bench, arch, arch, 20, "--no-freeze-pretrained")
    assert accuracy(bench, model, "target_k1") == 0.5
    if arch == "sent2sent_small":
        assert accuracy(bench, model, "source_k1") == 0.5
