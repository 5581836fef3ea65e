"""The Hansard pronoun suite's heuristic (build.py) on hand-made sentences: what makes an example,
what is ruled out, the contrastive swap and the antecedent distance."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import build  # noqa: E402

LEXICON = {"loi": "f", "projet": "m", "motion": "f", "gouvernement": "m"}
TRANS = {"loi": {"act", "law"}, "motion": {"motion"}, "projet": {"bill"}}


def test_an_example_needs_one_pronoun_word_of_the_right_number():
    assert build.pronoun_pair("It suggests a strategy.", "Elle réclame un programme.")
    assert build.pronoun_pair("They suggest it.", "Ils le proposent.") is None           # it and they
    assert build.pronoun_pair("It is what he said.", "Elle est ce qu'il a dit.") is None   # he
    assert build.pronoun_pair("They agree.", "Elle est d'accord.") is None                 # number differs


def test_impersonal_uses_are_ruled_out():
    assert build.pronoun_pair("It is important to act.", "Il est important d'agir.") is None
    assert build.pronoun_pair("It is a matter of fairness.", "Il ne s'agit que d'équité.") is None
    assert build.pronoun_pair("There it is.", "Il y a cela.") is None


def test_the_antecedent_is_found_in_an_earlier_aligned_sentence_only():
    den = ["The motion calls for a strategy.", "We agree with that.", "It asks for a programme."]
    dfr = ["La motion réclame une stratégie.", "Nous sommes d'accord.", "Elle réclame un programme."]
    ex = build.examples([den], [dfr], LEXICON, TRANS)
    assert len(ex) == 1 and ex[0]["ante distance"] == 2 and ex[0]["antecedent"] == "motion"
    assert ex[0]["contrastive"] == "Il réclame un programme."
    assert ex[0]["context_fr"] == dfr[:2]
    # the same noun in the current sentence: distance 0, not an earlier antecedent
    dfr2 = dfr[:2] + ["La motion dit qu'elle réclame un programme."]
    den2 = den[:2] + ["The motion says it asks for a programme."]
    assert build.examples([den2], [dfr2], LEXICON, TRANS)[0]["ante distance"] == 0
    # no aligned English word in the earlier sentence: no antecedent found
    assert build.examples([["The text calls.", "It asks."]], [["La motion réclame.", "Elle réclame."]],
                          LEXICON, TRANS)[0]["ante distance"] is None


def test_the_suite_is_written_in_contrapros_layout(tmp_path):
    from docnmt.suites import read_suite
    den = ["The bill is late.", "It will pass."]
    dfr = ["Le projet est en retard.", "Il sera adopté."]
    build.write_suite(build.examples([den], [dfr], LEXICON, TRANS), tmp_path)
    data = json.loads((tmp_path / "contrapro.json").read_text())
    assert data[0]["ante distance"] == 1
    (ex,) = read_suite(tmp_path, "contrapro", lang=("en", "fr"))
    assert ex.src == "It will pass." and [c.tgt for c in ex.candidates] == ["Il sera adopté.", "Elle sera adopté."]
    assert ex.src_context == ["The bill is late."] and ex.candidates[1].tgt_context == ["Le projet est en retard."]
