"""Synthetic documents for the context-dependence benchmark (issue 63 §1): English -> "xx", a
French-like toy language defined here, in which one marked word of sentence n can only be
translated right from sentence n-k.

* **target** (Bawden et al.'s anaphora shape): an antecedent sentence holds a source noun with two
  equally frequent translations of different gender (``bike`` -> ``velo`` m. / ``bicyclette`` f.,
  drawn by a fair coin the source gives no clue to); k sentences later ``it is small.`` must become
  ``il est petit.`` or ``elle est petite.``, following the gender the TARGET context used.
* **source** (lexical choice): ``the bank`` is ``la banque`` or ``la rive`` as a cue word k sentences
  earlier (``money`` / ``fishing``) says.

Between the two, filler sentences from a small grammar (subjects, verbs, fixed-gender nouns with
agreeing adjectives, adverbials; French-like word order), none holding an ambiguous noun, a cue or
``it``, so the dependency is recoverable only from sentence n-k; antecedents start anywhere in a
document, so position says nothing either.

Writes, under OUT: ``raw/{train,valid}.{en,xx}`` (``<d>`` marker format, for ``docnmt prepare``) and
``suites/{target,source}_k{K}.json`` (Voita et al.'s JSON, read by ``docnmt score-contrastive``:
context sentences and the current one joined by `` _eos ``, the right candidate first, ``ctx_dist``
= k) with ``suites/{name}.{en,xx}``, the right variant of every example as marker documents
(``docnmt score --cxmi``). Each suite holds its examples in pairs that share every source
sentence and differ only in the antecedent's gender or the cue's sense, so a model that cannot see
sentence n-k scores exactly 50%.

    python experiments/context_bench/generate.py OUT [--seed 1] [--train-docs 1200] [--distances 1 2 3 ...]
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

# ---- the toy lexicon ---------------------------------------------------------------------------
SUBJECTS = [("the doctor", "le docteur"), ("my sister", "ma soeur"), ("the teacher", "le maitre"),
            ("Paul", "Paul"), ("Marie", "Marie"), ("the farmer", "le fermier"), ("our neighbour", "notre voisin"),
            ("the girl", "la fille"), ("his brother", "son frere"), ("the cook", "la cuisiniere"),
            ("the old man", "le vieil homme"), ("Anna", "Anna")]
VERBS = [("sees", "voit"), ("likes", "aime"), ("buys", "achete"), ("paints", "peint"), ("finds", "trouve"),
         ("wants", "veut"), ("cleans", "nettoie"), ("sells", "vend"), ("carries", "emporte"), ("draws", "dessine")]
# fixed-gender nouns of the fillers: (English, target, gender)
NOUNS = [("table", "table", "f"), ("chair", "chaise", "f"), ("book", "livre", "m"), ("lamp", "lampe", "f"),
         ("box", "boite", "f"), ("key", "cle", "f"), ("cup", "tasse", "f"), ("hat", "chapeau", "m"),
         ("coat", "manteau", "m"), ("window", "fenetre", "f"), ("picture", "tableau", "m"), ("clock", "horloge", "f"),
         ("letter", "lettre", "f"), ("bottle", "bouteille", "f"), ("knife", "couteau", "m"), ("bed", "lit", "m"),
         ("plate", "assiette", "f"), ("shoe", "soulier", "m"), ("ball", "ballon", "m"), ("mirror", "miroir", "m")]
# adjectives: (English, masculine, feminine)
ADJECTIVES = [("small", "petit", "petite"), ("big", "grand", "grande"), ("green", "vert", "verte"),
              ("black", "noir", "noire"), ("heavy", "lourd", "lourde"), ("new", "neuf", "neuve"),
              ("old", "vieux", "vieille"), ("expensive", "cher", "chere"), ("round", "rond", "ronde"),
              ("broken", "casse", "cassee"), ("red", "rouge", "rouge"), ("clean", "propre", "propre")]
ADVERBIALS = [("today", "aujourdhui"), ("again", "encore"), ("every day", "chaque jour"), ("slowly", "lentement"),
              ("with care", "avec soin"), ("in the morning", "le matin"), ("yesterday", "hier"), ("at noon", "a midi")]
# the target-side dependency: a source noun with a masculine and a feminine translation
AMBIGUOUS_NOUNS = [("bike", "velo", "bicyclette"), ("car", "char", "voiture"), ("boat", "bateau", "barque"),
                   ("house", "logis", "maison"), ("bag", "sac", "valise"), ("cake", "gateau", "tarte")]
# the source-side dependency: (English word, (sense translation, article), cue words of that sense) x 2
SENSES = [("bank", (("banque", "la"), [("money", "argent"), ("a loan", "un pret"), ("cash", "liquide")]),
                   (("rive", "la"), [("fishing", "peche"), ("the river", "la riviere"), ("ducks", "canards")])),
          ("bat", (("batte", "la"), [("the match", "le match"), ("the team", "l equipe"), ("baseball", "baseball")]),
                  (("chauvesouris", "la"), [("caves", "grottes"), ("the night", "la nuit"), ("insects", "insectes")])),
          ("plant", (("usine", "l"), [("workers", "ouvriers"), ("machines", "machines"), ("wages", "salaires")]),
                    (("plante", "la"), [("flowers", "fleurs"), ("seeds", "graines"), ("the soil", "le sol")])),
          ("court", (("tribunal", "le"), [("the judge", "le juge"), ("a lawyer", "un avocat"),
                                                   ("the trial", "le proces")]),
                    (("terrain", "le"), [("tennis", "tennis"), ("a racket", "une raquette"), ("the net", "le filet")]))]
CUE_FRAMES = [("talks about", "parle de"), ("thinks about", "pense a"), ("dreams of", "reve de"),
              ("asks about", "demande")]
PRONOUN_FRAMES = [("it is {a}.", "{p} est {a}."), ("it is very {a}.", "{p} est tres {a}."),
                  ("it looks {a}.", "{p} semble {a}."), ("it was {a} {t}.", "{p} etait {a} {t}.")]
PRONOUNS = {"m": "il", "f": "elle"}
ARTICLES = {("the", "m"): "le", ("the", "f"): "la", ("a", "m"): "un", ("a", "f"): "une"}
DEPENDENCIES = ("target", "source")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _pair(en: str, xx: str) -> tuple[str, str]:
    """A sentence pair, capitalised, words joined with no space before the final period."""
    return tuple(_cap(" ".join(side.split()).replace(" .", ".")) for side in (en, xx))


def noun_phrase(rng: random.Random, en_noun: str, xx_noun: str, gender: str, adjective: bool = True):
    """``the red lamp`` -> ``la lampe rouge`` (article, noun, agreeing adjective after it)."""
    det = rng.choice(("the", "a"))
    en, xx = f"{det} {en_noun}", f"{ARTICLES[det, gender]} {xx_noun}"
    if adjective and rng.random() < 0.5:
        a = rng.choice(ADJECTIVES)
        en, xx = f"{det} {a[0]} {en_noun}", f"{xx} {a[1 if gender == 'm' else 2]}"
    return en, xx


def filler(rng: random.Random) -> tuple[str, str]:
    """One sentence of the filler grammar (no ambiguous noun, cue word or pronoun)."""
    s, v = rng.choice(SUBJECTS), rng.choice(VERBS)
    n1, n2 = rng.sample(NOUNS, 2)
    np1, np2 = noun_phrase(rng, *n1), noun_phrase(rng, *n2, adjective=False)
    adv = rng.choice(ADVERBIALS) if rng.random() < 0.4 else ("", "")
    shape = rng.randrange(5)
    if shape == 0:
        en, xx = f"{s[0]} {v[0]} {np1[0]} {adv[0]}", f"{s[1]} {v[1]} {np1[1]} {adv[1]}"
    elif shape == 1:
        en, xx = f"{s[0]} {v[0]} {np1[0]} and {np2[0]}", f"{s[1]} {v[1]} {np1[1]} et {np2[1]}"
    elif shape == 2:
        a = rng.choice(ADJECTIVES)
        en = f"the {n1[0]} is {a[0]} {adv[0]}"
        xx = f"{ARTICLES['the', n1[2]]} {n1[1]} est {a[1 if n1[2] == 'm' else 2]} {adv[1]}"
    elif shape == 3:
        s2 = rng.choice(SUBJECTS)
        en, xx = f"{s[0]} says that {s2[0]} {v[0]} {np1[0]}", f"{s[1]} dit que {s2[1]} {v[1]} {np1[1]}"
    else:
        en, xx = f"{np1[0]} is on {np2[0]}", f"{np1[1]} est sur {np2[1]}"
    return _pair(en + ".", xx + ".")


def target_event(rng: random.Random, gender: str, noun=None, frame=None):
    """(antecedent pair, current pair, wrong current target) of the target-side dependency: the
    antecedent translates an ambiguous noun with the ``gender`` translation, the current
    sentence's pronoun and adjective agree with it; the wrong target has the other gender."""
    noun = noun or rng.choice(AMBIGUOUS_NOUNS)
    s, v = rng.choice(SUBJECTS), rng.choice(VERBS)
    np = noun_phrase(rng, noun[0], noun[1 if gender == "m" else 2], gender)
    antecedent = _pair(f"{s[0]} {v[0]} {np[0]}.", f"{s[1]} {v[1]} {np[1]}.")
    frame = frame or rng.choice(PRONOUN_FRAMES)
    a, t = rng.choice([x for x in ADJECTIVES if x[1] != x[2]]), rng.choice(ADVERBIALS)
    en = frame[0].format(a=a[0], t=t[0])
    right, wrong = (_pair(en, frame[1].format(p=PRONOUNS[g], a=a[1 if g == "m" else 2], t=t[1]))
                    for g in (gender, "f" if gender == "m" else "m"))
    return antecedent, right, wrong[1]


def source_event(rng: random.Random, sense: int, word=None):
    """(cue pair, current pair, wrong current target) of the source-side dependency: the cue
    sentence names a cue of sense ``sense`` (0 or 1), the current sentence translates the
    ambiguous word with that sense; the wrong target has the other sense."""
    word = word or rng.choice(SENSES)
    s, f = rng.choice(SUBJECTS), rng.choice(CUE_FRAMES)
    cue = rng.choice(word[1 + sense][1])
    antecedent = _pair(f"{s[0]} {f[0]} {cue[0]}.", f"{s[1]} {f[1]} {cue[1]}.")
    s2, v = rng.choice(SUBJECTS), rng.choice(VERBS[:7])
    adv = rng.choice(ADVERBIALS) if rng.random() < 0.4 else ("", "")
    en = f"{s2[0]} {v[0]} the {word[0]} {adv[0]}."
    right, wrong = (_pair(en, f"{s2[1]} {v[1]} {word[1 + k][0][1]} {word[1 + k][0][0]} {adv[1]}.")
                    for k in (sense, 1 - sense))
    return antecedent, right, wrong[1]


def event(rng: random.Random, dependency: str, variant: int):
    """One event of ``dependency`` with ``variant`` 0/1 (masculine/feminine, first/second sense)."""
    if dependency == "target":
        return target_event(rng, "mf"[variant])
    return source_event(rng, variant)


def training_document(rng: random.Random, n_sents: int, distances: list[int]) -> tuple[list[str], list[str], list]:
    """A document of ``n_sents`` pairs: events of both dependencies one after the other (never
    overlapping, 0-2 fillers between), their distances drawn from ``distances`` where they fit, and
    fillers. Returns (source, target, events as (dependency, k, antecedent index, variant))."""
    src, tgt, events = [], [], []

    def add(pair):
        src.append(pair[0])
        tgt.append(pair[1])
    while len(src) < n_sents:
        for _ in range(rng.randint(0, 2)):
            add(filler(rng))
        fits = [k for k in distances if len(src) + k < n_sents]
        if not fits:
            break
        k, dep, variant = rng.choice(fits), rng.choice(DEPENDENCIES), rng.randrange(2)
        antecedent, current, _ = event(rng, dep, variant)
        events.append((dep, k, len(src), variant))
        add(antecedent)
        for _ in range(k - 1):
            add(filler(rng))
        add(current)
    while len(src) < n_sents:
        add(filler(rng))
    return src[:n_sents], tgt[:n_sents], events


def suite_pair(seed: int, dependency: str, k: int) -> list[dict]:
    """Two contrastive examples (variant 0 and 1) that share every draw: 0-2 leading fillers, the
    antecedent, k-1 fillers, the current sentence. Only the antecedent's target (target-side) or
    its source and target (source-side) differ between them."""
    out = []
    for variant in (0, 1):
        rng = random.Random(seed)
        lead = [filler(rng) for _ in range(rng.randint(0, 2))]
        antecedent, current, wrong = event(rng, dependency, variant)
        middle = [filler(rng) for _ in range(k - 1)]
        context = lead + [antecedent] + middle
        out.append({"src": " _eos ".join([p[0] for p in context] + [current[0]]),
                    "dst": [" _eos ".join([p[1] for p in context] + [t]) for t in (current[1], wrong)],
                    "true_ind": 0, "ctx_dist": k, "variant": variant, "antecedent": len(lead)})
    return out


def suite(seed: int, dependency: str, k: int, n_examples: int) -> list[dict]:
    """``n_examples`` (even) examples of one dependency at distance k, in variant pairs."""
    rng = random.Random(f"{seed}/{dependency}/{k}")
    return [ex for _ in range(n_examples // 2) for ex in suite_pair(rng.randrange(2 ** 32), dependency, k)]


def write_marker_pair(path: Path, docs: list[tuple[list[str], list[str]]]) -> None:
    """``path.en`` and ``path.xx`` in the ``<d>`` marker format."""
    for side, lang in ((0, "en"), (1, "xx")):
        text = "".join("<d>\n" + "".join(s + "\n" for s in d[side]) for d in docs)
        Path(f"{path}.{lang}").write_text(text, encoding="utf-8")


def generate(out: str | Path, seed: int = 1, train_docs: int = 1200, valid_docs: int = 60,
             doc_sents: tuple[int, int] = (20, 40), train_distances: list[int] | None = None,
             distances: list[int] = (1, 2, 3, 4, 5, 10, 80), examples: int = 200) -> dict:
    """Write the corpora and suites under ``out`` (see the module docstring); returns a summary."""
    out = Path(out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / "suites").mkdir(parents=True, exist_ok=True)
    train_distances = list(train_distances or range(1, 13))
    summary = {"seed": seed, "train_distances": train_distances, "distances": list(distances), "events": {}}
    for split, n_docs, salt in (("train", train_docs, 0), ("valid", valid_docs, 1)):
        rng = random.Random(f"{seed}/{split}/{salt}")
        docs = [training_document(rng, rng.randint(*doc_sents), train_distances) for _ in range(n_docs)]
        write_marker_pair(out / "raw" / split, [(d[0], d[1]) for d in docs])
        summary["events"][split] = sum(len(d[2]) for d in docs)
        summary[f"{split}_sentences"] = sum(len(d[0]) for d in docs)
    for dep in DEPENDENCIES:
        for k in distances:
            name = f"{dep}_k{k}"
            exs = suite(seed, dep, k, examples)
            (out / "suites" / f"{name}.json").write_text(json.dumps(exs, indent=0, ensure_ascii=False) + "\n")
            docs = [(ex["src"].split(" _eos "), ex["dst"][0].split(" _eos ")) for ex in exs]
            write_marker_pair(out / "suites" / name, docs)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-docs", type=int, default=1200)
    ap.add_argument("--valid-docs", type=int, default=60)
    ap.add_argument("--doc-sents", type=int, nargs=2, default=(20, 40), metavar=("MIN", "MAX"))
    ap.add_argument("--train-distances", type=int, nargs="+", help="event distances of the corpora (default 1-12)")
    ap.add_argument("--distances", type=int, nargs="+", default=[1, 2, 3, 4, 5, 10, 80], help="suites' distances")
    ap.add_argument("--examples", type=int, default=200, help="examples per suite (even)")
    a = ap.parse_args()
    print(json.dumps(generate(a.out, a.seed, a.train_docs, a.valid_docs, tuple(a.doc_sents), a.train_distances,
                              a.distances, a.examples)))


if __name__ == "__main__":
    main()
