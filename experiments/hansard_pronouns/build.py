"""Build a contrastive pronoun suite from the Hansard validation sittings, the way ContraPro was built
from OpenSubtitles (Müller et al. 2018), with no tool beyond this script (README.md: the heuristic).

A sentence pair is an example when its English side has "it" (or "they") n times, no other of the
two and no he/she, and its French side the same subject pronoun of that number n times (il or elle
for "it", ils or elles for "they"), neither side impersonal ("il y a", "il faut", "it is ... to/that"
...). The contrastive candidate swaps the pronoun's gender (il <-> elle, ils <-> elles) at each
occurrence, keeping its case.

The antecedent distance: 0 when the current French sentence holds a noun of the pronoun's gender and
number; else d in 1..3 when the d-th previous French sentence of the sitting holds one whose English
translation (the most associated English word, by the Dice coefficient over the training pairs) is
in the English side of that sentence; else none. Nouns are a determiner and the next word (le/un/ce/
du/au: masculine, la/une/cette: feminine), or an elided or plural form (l'X, les/des/ces/aux X) whose
gender a lexicon counted on the training French gives (a word seen at least twice after un/une/ce/
cet/cette and at least 90% of the time after one gender's determiners).

Two suites, in ContraPro's file layout (docnmt score-contrastive reads it, --langs en fr), with the
three previous sentences as context:
  all/         every example;
  antecedent/  the examples whose antecedent is in a previous sentence (distance 1-3).
and, in results/, handcheck_input.tsv: up to 100 examples of antecedent/ (seeded; there are fewer:
all of them), for the hand check of the heuristic (results/handcheck.tsv), and stats.json.

    python experiments/hansard_pronouns/build.py [--data ../shared/data/enfr] [--out experiments/hansard_pronouns/suite]
"""
from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

PRON = re.compile(r"(?<![\w-])(il|elle|ils|elles)(?![\w-])", re.I)
EN_PRON = re.compile(r"\b(it|they)\b", re.I)
EN_PERSON = re.compile(r"\b(he|she|him|his|her|hers)\b", re.I)
SWAP = {"il": "elle", "elle": "il", "ils": "elles", "elles": "ils"}
# impersonal or expletive uses, which no antecedent decides
FR_IMPERSONAL = re.compile(
    r"\bil (ne |n')?(y a|y avait|y aura|y aurait|faut|fallait|faudra|faudrait|s'agit|s'agissait|agit|semble|semblait"
    r"|semblerait|reste|restait|convient|importe|suffit|suffirait|arrive|vaut|pleut|se peut"
    r"|est (\w+ ){0,2}(de|d'|que|qu')"
    r"|était (\w+ ){0,2}(de|d'|que|qu')|serait (\w+ ){0,2}(de|d'|que|qu')|sera (\w+ ){0,2}(de|d'|que|qu'))", re.I)
EN_IMPERSONAL = re.compile(
    r"\bit(('s)| is| was| would be| will be| has been| seems| seemed| appears| takes| remains)( \w+){0,3} (to|that)\b"
    r"|\bit (seems|appears|is clear|was clear)\b", re.I)
MASC, FEM = {"le", "un", "ce", "cet", "du", "au"}, {"la", "une", "cette"}
INDEF = {"un", "une", "ce", "cet", "cette"}
PLURAL = {"les", "des", "ces", "aux"}
WORD = re.compile(r"[a-zàâäçéèêëîïôöùûüœæ]+(?:-[a-zàâäçéèêëîïôöùûüœæ]+)*")
DET_NOUN = re.compile(r"(?<![\w'])(?:(les|des|ces|aux|cette|cet|ce|une|un|le|la|du|au)\s+|(l)['’])"
                      r"([a-zàâäçéèêëîïôöùûüœæ]+(?:-[a-zàâäçéèêëîïôöùûüœæ]+)*)")
EN_STOP = set("the a an of to and in that is for on this it be are was with as by not we have has which will at "
              "from they there their all but or been would should can its our also these those more what who any "
              "were one his her he she them than into about such some only other very if so do does did had mr "
              "speaker madam minister member members government house hon".split())


def documents(path: Path) -> list[list[str]]:
    docs: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line == "<d>":
            docs.append([])
        elif docs and line:
            docs[-1].append(line)
    return docs


def singular(word: str) -> str:
    if word.endswith("aux"):
        return word[:-3] + "al"
    return word[:-1] if word.endswith(("s", "x")) else word


def stem(word: str) -> str:
    return word[:-1] if word.endswith("s") and len(word) > 3 else word


def gender_lexicon(train_fr: Path, limit: int) -> dict[str, str]:
    """word -> "m" or "f", from the determiners before it in the training French."""
    counts: dict[str, Counter] = defaultdict(Counter)
    with open(train_fr, encoding="utf-8") as f:
        for k, line in enumerate(f):
            if k >= limit:
                break
            for det, _, word in DET_NOUN.findall(line.lower()):
                if det in MASC or det in FEM:
                    counts[word]["m" if det in MASC else "f"] += 1
                    counts[word]["indef"] += det in INDEF
    lexicon = {}
    for word, c in counts.items():
        total = c["m"] + c["f"]
        if c["indef"] >= 2 and total and max(c["m"], c["f"]) / total >= 0.9:
            lexicon[word] = "m" if c["m"] > c["f"] else "f"
    return lexicon


def nouns(sentence: str, lexicon: dict[str, str], strict: bool = True) -> list[tuple[str, str, str]]:
    """(singular word, gender, number "s"/"p") of every noun the determiner patterns find; with
    ``strict`` off, any word after a gendered determiner counts (to rule a sentence out)."""
    out = []
    for det, elided, word in DET_NOUN.findall(sentence.lower()):
        if det in PLURAL:
            g = lexicon.get(singular(word))
            if g:
                out.append((singular(word), g, "p"))
            elif not strict:                   # of unknown gender: either
                out += [(singular(word), "m", "p"), (singular(word), "f", "p")]
        elif elided:
            if word in lexicon:
                out.append((word, lexicon[word], "s"))
        elif word in lexicon or not strict:    # a known noun (not "la" before a verb)
            out.append((word, "m" if det in MASC else "f", "s"))
    return out


def translations(train_en: Path, train_fr: Path, wanted: set[str], limit: int) -> dict[str, set[str]]:
    """French noun -> its three English stems of highest Dice coefficient over the training pairs."""
    f_count, e_count, pair = Counter(), Counter(), Counter()
    with open(train_en, encoding="utf-8") as fe, open(train_fr, encoding="utf-8") as ff:
        for k, (en, fr) in enumerate(zip(fe, ff)):
            if k >= limit:
                break
            fws = {singular(w) for w in WORD.findall(fr.lower())} & wanted
            ews = {stem(w) for w in WORD.findall(en.lower()) if len(w) > 2 and w not in EN_STOP}
            e_count.update(ews)
            if fws:
                f_count.update(fws)
                pair.update((f, e) for f in fws for e in ews)
    best: dict[str, list] = defaultdict(list)
    for (f, e), n in pair.items():
        if n >= 3:
            best[f].append((2 * n / (f_count[f] + e_count[e]), e))
    return {f: {e for _, e in sorted(c, reverse=True)[:3]} for f, c in best.items()}


def pronoun_pair(en: str, fr: str):
    """(French pronoun matches, number) when the pair is an example, else None: as many "it" (or
    "they") as French subject pronouns, all one word of the right number (a chain is swapped whole)."""
    ep, fp = [p.lower() for p in EN_PRON.findall(en)], list(PRON.finditer(fr))
    if not ep or len(ep) != len(fp) or len(set(ep)) != 1 or EN_PERSON.search(en):
        return None
    if len({m.group(1).lower() for m in fp}) != 1:
        return None
    number = "s" if ep[0] == "it" else "p"
    if (fp[0].group(1).lower() in ("il", "elle")) != (number == "s"):
        return None
    if FR_IMPERSONAL.search(fr) or EN_IMPERSONAL.search(en):
        return None
    return fp, number


def examples(docs_en, docs_fr, lexicon, trans) -> list[dict]:
    out = []
    for d, (den, dfr) in enumerate(zip(docs_en, docs_fr)):
        for i, (en, fr) in enumerate(zip(den, dfr)):
            found = pronoun_pair(en, fr)
            if not found:
                continue
            matches, number = found
            pron = matches[0].group(1)
            gender = "m" if pron.lower() in ("il", "ils") else "f"
            wrong = PRON.sub(lambda m: SWAP[m.group(1).lower()].capitalize() if m.group(1)[0].isupper()
                             else SWAP[m.group(1).lower()], fr)
            dist, ante = None, None
            if any(g == gender and n == number for _, g, n in nouns(fr, lexicon, strict=False)):
                dist = 0
            else:
                for back in (1, 2, 3):
                    if i - back < 0:
                        break
                    en_stems = {stem(w) for w in WORD.findall(den[i - back].lower())}
                    hits = [w for w, g, n in nouns(dfr[i - back], lexicon)
                            if g == gender and n == number and trans.get(w, set()) & en_stems]
                    if hits:
                        dist, ante = back, hits[-1]
                        break
            out.append({"document": d, "segment id": i + 1, "src": en, "ref": fr, "contrastive": wrong,
                        "src pronoun": EN_PRON.findall(en)[0].lower(), "ref pronoun": pron.lower(),
                        "ante distance": dist, "antecedent": ante,
                        "context_en": den[max(0, i - 3):i], "context_fr": dfr[max(0, i - 3):i]})
    return out


def write_suite(exs: list[dict], out: Path) -> None:
    """ContraPro's layout: contrapro.json, one text line per candidate, three context lines each."""
    out.mkdir(parents=True, exist_ok=True)
    keys = ("document", "segment id", "src pronoun", "ref pronoun", "ante distance", "antecedent")
    (out / "contrapro.json").write_text(json.dumps(
        [{**{k: e[k] for k in keys if e[k] is not None}, "errors": [{"contrastive": e["contrastive"]}],
          "intrasegmental": e["ante distance"] == 0} for e in exs], ensure_ascii=False, indent=0) + "\n")
    files = {name: [] for name in ("text.en", "text.fr", "context.en", "context.fr")}
    for e in exs:
        for tgt in (e["ref"], e["contrastive"]):
            files["text.en"].append(e["src"])
            files["text.fr"].append(tgt)
            pad = [""] * (3 - len(e["context_en"]))
            files["context.en"] += pad + e["context_en"]
            files["context.fr"] += pad + e["context_fr"]
    for name, lines in files.items():
        (out / f"contrapro.{name}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "enfr"))
    ap.add_argument("--out", default=str(HERE / "suite"))
    ap.add_argument("--lexicon-lines", type=int, default=913913, help="training lines the gender lexicon counts")
    ap.add_argument("--dice-lines", type=int, default=300000, help="training pairs the Dice lexicon counts")
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    data, out = Path(args.data), Path(args.out)
    lexicon = gender_lexicon(data / "train" / "hansard.fr", args.lexicon_lines)
    docs_en, docs_fr = documents(data / "valid" / "hansard.en"), documents(data / "valid" / "hansard.fr")
    wanted = {w for doc in docs_fr for s in doc for w, _, _ in nouns(s, lexicon)}
    trans = translations(data / "train" / "hansard.en", data / "train" / "hansard.fr", wanted, args.dice_lines)
    exs = examples(docs_en, docs_fr, lexicon, trans)
    ante = [e for e in exs if e["ante distance"] in (1, 2, 3)]
    write_suite(exs, out / "all")
    write_suite(ante, out / "antecedent")
    rng = random.Random(args.seed)
    sample = rng.sample(ante, min(100, len(ante)))
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    with open(results / "handcheck_input.tsv", "w", encoding="utf-8") as f:
        f.write("id\tdistance\tantecedent\tpronoun\tcontext_fr\tsentence_fr\tcontext_en\tsentence_en\n")
        for k, e in enumerate(sample):
            f.write("\t".join(map(str, [k, e["ante distance"], e["antecedent"], e["ref pronoun"],
                                        " ||| ".join(e["context_fr"]), e["ref"], " ||| ".join(e["context_en"]),
                                        e["src"]])) + "\n")
    stats = {"lexicon_words": len(lexicon), "examples": len(exs),
             "by_distance": dict(Counter(str(e["ante distance"]) for e in exs)),
             "by_pronoun": dict(Counter(e["ref pronoun"] for e in exs)),
             "antecedent_by_pronoun": dict(Counter(e["ref pronoun"] for e in ante))}
    (results / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
