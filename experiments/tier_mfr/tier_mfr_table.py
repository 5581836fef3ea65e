"""The Tier M-fr table from the kept results (experiments/tier_mfr/results/<run>/): per system the
updates, training time, final validation loss, s-/d-BLEU and s-/d-chrF on the six validation
sittings with the difference from the control and its paired-bootstrap p-value, the contrastive
suites' accuracy with the exact McNemar p-value against the control, and coverage; then how much
each system uses its context (CXMI on the validation sittings, attention entropies); then, per
document method, what it is significantly better at than the control (difference > 0 with
p < 0.05: the paired bootstrap's one-sided p for BLEU and chrF, the exact McNemar test's
two-sided p for the suites) and whether that meets Tier M-fr's target: better on d-BLEU and on
at least one contrastive suite, with every sentence of every document recovered. Two systems get
a second verdict row against the baseline their paper's claim is about (ALSO): the
context-encoder Transformer, whose sentence weights stay stage 1's, against stage 1, and
G-Transformer + DLS + LAA against the G-Transformer (the bootstrap from valid.vs_<baseline>.json,
the McNemar tests recomputed from both runs' kept per-example suite scores).

    python experiments/tier_mfr/tier_mfr_table.py experiments/tier_mfr/results            # Markdown table
    python experiments/tier_mfr/tier_mfr_table.py --best-other experiments/tier_mfr/results   # the best document model
                                                                     # other than G-Transformer (d-BLEU)
    python experiments/tier_mfr/tier_mfr_table.py --best-pair gt experiments/tier_mfr/results   # the pair of
        # training aids to run next on a method (gt, doc2doc): the two with the most CXMI gained alone
    python experiments/tier_mfr/tier_mfr_table.py --aid-claims experiments/tier_mfr/results   # the training
        # aids' claim, run by run: Hansard pronouns against the control, CXMI against five times the
        # run without the aid, d-BLEU lost to that run
    python experiments/tier_mfr/tier_mfr_table.py --best-recipe experiments/tier_mfr/results   # the aid run
        # whose recipe becomes a preset: one meeting the claim, else the most CXMI gained at <= 0.3 d-BLEU lost
    python experiments/tier_mfr/tier_mfr_table.py --plot experiments/tier_mfr/results/deltas.png \
        experiments/tier_mfr/results
        # and a figure of every system's difference from the control (and second baseline): d-BLEU
        # with its 95% bootstrap interval, each contrastive suite's accuracy (filled where p < 0.05)
    python experiments/tier_mfr/tier_mfr_table.py --aid-claims --plot-aids experiments/tier_mfr/results/aids.png \
        experiments/tier_mfr/results       # and the training aids' claim as a figure
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ["control", "doc2doc", "doc2doc_sentpos", "gt", "gt_sentpos", "gt_sentpos_lr1", "gt_sentpos_lr1_nowd",
         "gt_dls_laa", "gt_dls_laa_lr1_nowd", "gt_coword", "gt_split", "gt_margin", "doc2doc_coword", "doc2doc_split",
         "doc2doc_margin", "gt_coword_split", "gt_coword_margin", "gt_split_margin", "doc2doc_coword_split",
         "doc2doc_coword_margin", "doc2doc_split_margin", "pt", "docflat_d", "docflat_d_sentpos", "context",
         "context_full", "context_full_tok"]
NAMES = {"stage1": "Sent2Sent, stage 1", "control": "Sent2Sent continued (control)", "doc2doc": "Doc2Doc",
         "gt": "G-Transformer (fine-tuned)", "gt_sentpos": "G-Transformer (fine-tuned, sentence positions)",
         "gt_sentpos_lr1": "G-Transformer (fine-tuned, sentence positions, full lr)",
         "gt_dls_laa": "G-Transformer + DLS + LAA (sentence positions)", "pt": "P-Transformer",
         "docflat_d": "DocFlat_D (two-pass)", "context": "context-encoder Transformer",
         "doc2doc_sentpos": "Doc2Doc (sentence positions)",
         "docflat_d_sentpos": "DocFlat_D (two-pass, sentence positions)",
         "context_full": "context-encoder Transformer (sentence weights trained too)",
         "context_full_tok":
         "context-encoder Transformer (sentence weights trained too, the control's tokens per update)",
         "gt_sentpos_lr1_nowd": "G-Transformer (fine-tuned, sentence positions, full lr, no word dropout)",
         "gt_dls_laa_lr1_nowd": "G-Transformer (as gt_sentpos_lr1_nowd) + DLS + LAA",
         "gt_coword": "G-Transformer (as gt_sentpos_lr1_nowd) + CoWord dropout 0.1",
         "gt_split": "G-Transformer (as gt_sentpos_lr1_nowd) + split pairs 0.3",
         "gt_margin": "G-Transformer (as gt_sentpos_lr1_nowd) + context margin 0.5",
         "doc2doc_coword": "Doc2Doc + CoWord dropout 0.1", "doc2doc_split": "Doc2Doc + split pairs 0.3",
         "doc2doc_margin": "Doc2Doc + context margin 0.5",
         "gt_coword_split": "G-Transformer (as gt_sentpos_lr1_nowd) + CoWord dropout 0.1 + split pairs 0.3",
         "gt_coword_margin": "G-Transformer (as gt_sentpos_lr1_nowd) + CoWord dropout 0.1 + context margin 0.5",
         "gt_split_margin": "G-Transformer (as gt_sentpos_lr1_nowd) + split pairs 0.3 + context margin 0.5",
         "doc2doc_coword_split": "Doc2Doc + CoWord dropout 0.1 + split pairs 0.3",
         "doc2doc_coword_margin": "Doc2Doc + CoWord dropout 0.1 + context margin 0.5",
         "doc2doc_split_margin": "Doc2Doc + split pairs 0.3 + context margin 0.5"}
# second baselines (experiments/tier_mfr/tier_mfr.sh)
ALSO = {"context": "stage1", "gt_dls_laa": "gt_sentpos", "gt_sentpos": "gt", "gt_sentpos_lr1": "gt_sentpos",
        "docflat_d_sentpos": "docflat_d", "doc2doc_sentpos": "doc2doc", "context_full": "context",
        "context_full_tok": "context_full", "gt_sentpos_lr1_nowd": "gt_sentpos_lr1",
        "gt_dls_laa_lr1_nowd": "gt_sentpos_lr1_nowd",
        "gt_coword": "gt_sentpos_lr1_nowd", "gt_split": "gt_sentpos_lr1_nowd", "gt_margin": "gt_sentpos_lr1_nowd",
        "doc2doc_coword": "doc2doc", "doc2doc_split": "doc2doc", "doc2doc_margin": "doc2doc",
        **{f"gt_{pair}": "gt_sentpos_lr1_nowd" for pair in ("coword_split", "coword_margin", "split_margin")},
        **{f"doc2doc_{pair}": "doc2doc" for pair in ("coword_split", "coword_margin", "split_margin")}}
SUITES = (("anaphora", "Bawden anaphora"), ("lexical-choice", "Bawden lexical choice"),
          ("scat_yin2021_enfr", "SCAT valid"),
          # the in-domain pronoun suite (experiments/hansard_pronouns): all examples, and those whose
          # antecedent is in an earlier sentence
          ("hansard_all", "Hansard pronouns"), ("hansard_antecedent", "Hansard pronouns, antecedent earlier"))
MARKERS = "os^Dv"     # one per suite in the plot
# the separator formats decoded a second time with the source's sentence count forced (translate
# --sentence-count): valid.count.json and valid.count.coverage.json beside the run's own; the same
# model, so the same training, NLL and suite scores (teacher-forced, whatever the decoding)
COUNTED = "decoded with the source's sentence count"


def load(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def last_valid(run: Path) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()] \
        if (run / "metrics.jsonl").exists() else []
    valid = [r for r in rows if "valid_loss" in r]
    return {**(valid[-1] if valid else {}), "updates": max((r.get("updates", 0) for r in rows), default=0)}


def score_cell(ev: dict | None, key: str, boot: str | None, level: str) -> str:
    if not ev or not ev.get(key):
        return "–"
    cell = f"{ev[key]['score']:.2f}"
    test = (ev.get(boot) or {}).get(level) if boot else None
    if test:   # evaluate --hyp SYSTEM --compare CONTROL: delta = control - system
        cell += f" ({-test['delta']:+.2f}, p={test['p_value']:.3f})"
    return cell


def suite_cell(rep: dict | None) -> str:
    if not rep:
        return "–"
    cell = f"{100 * rep['accuracy']:.1f}"
    if "against" in rep:
        t = rep["against"]
        cell += f" ({100 * t['delta']:+.1f}, p={t['p_value']:.3f})"
    return cell


def coverage_cell(cov: dict | None) -> str:
    if not cov:
        return "–"
    return f"{cov['documents_fully_recovered']}/{cov['documents']} ({cov['empty_sentences']} empty)"


def rows(root: Path) -> list[list[str]]:
    out = []
    runs = [r for r in ["stage1", *ORDER] if (root / r).exists()]
    runs += sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in runs)
    for name in runs:
        run = root / name
        v, t = last_valid(run), load(run / "training_time.json")
        for ev, cov, label in decodings(root, name):
            out.append([label, f"{v['updates']:,}", f"{t['seconds'] / 3600:.1f} h" if t else "–",
                        f"{v['valid_nll_loss']:.3f}" if "valid_nll_loss" in v else "–",
                        score_cell(ev, "s_bleu", "bootstrap", "s"), score_cell(ev, "d_bleu", "bootstrap", "d"),
                        score_cell(ev, "s_chrf", "bootstrap_chrf", "s"),
                        score_cell(ev, "d_chrf", "bootstrap_chrf", "d"),
                        *(suite_cell(load(run / f"{s}.json")) for s, _ in SUITES), coverage_cell(cov)])
    return out


def system_name(root: Path, name: str) -> str:
    """A run's row label; a run scored from its kept fp16 weights (tier_mfr_keep.py
    --restore-trained, after runs/ was lost) says so."""
    restored = (root / name / "weights_restored.json").exists()
    return NAMES.get(name, name) + (" [scored from its fp16 weights]" if restored else "")


def decodings(root: Path, name: str):
    """``(scores, coverage, row label)`` of each decoding of run ``name``: its own, then the one
    with the source's sentence count forced where the queue made it."""
    run = root / name
    yield load(run / "valid.json"), load(run / "valid.coverage.json"), system_name(root, name)
    if (run / "valid.count.json").exists():
        yield load(run / "valid.count.json"), load(run / "valid.count.coverage.json"), \
            f"{system_name(root, name)}, {COUNTED}"


HEADER = ["system", "updates", "training", "valid NLL (bits)", "s-BLEU (Δ, p)", "d-BLEU (Δ, p)", "s-chrF (Δ, p)",
          "d-chrF (Δ, p)", *(n + " % (Δ, p)" for _, n in SUITES), "documents fully recovered"]


CONTEXT_HEADER = ["system", "CXMI (bits/word piece)", "sentences more likely with context",
                  "attention on other sentences: cross / decoder self / encoder self",
                  "attention entropy (bits): cross / decoder self / encoder self"]
KINDS = ("cross", "dec_self", "enc_self")


def kind_cell(values: dict, fmt, context_label: str) -> str:
    """One figure per attention kind (G-Transformer's global variant beside its local one, the
    context encoder's context attention after them)."""
    cells = []
    for kind in KINDS:
        cell = fmt(values[kind]) if kind in values else "–"
        cells.append(cell + (f" (global {fmt(values[kind + '_global'])})" if kind + "_global" in values else ""))
    gates = [f"{side} {fmt(values[side + '_context'])}" for side in ("enc", "dec") if side + "_context" in values]
    return " / ".join(cells) + (f"; {context_label} {', '.join(gates)}" if gates else "")


def context_rows(root: Path) -> list[list[str]]:
    """How much each system uses its context on the validation sittings (experiments/tier_mfr/tier_mfr_context.py):
    CXMI, and the attention's weight on other sentences and its entropy per kind (without that
    file, the entropies of the last validation during training)."""
    out = []
    for name in [r for r in ORDER if (root / r).exists()]:
        cx = load(root / name / "valid.cxmi.json") or {}
        v = last_valid(root / name)
        entropy = cx.get("entropy_bits") or {k[len("valid_entropy_"):]: x for k, x in v.items()
                                              if k.startswith("valid_entropy_")}
        out.append([system_name(root, name),
                    f"{cx['cxmi_bits_per_token']:+.4f}" if cx else "–",
                    f"{100 * cx['sentences_more_likely_with_context']:.1f}%" if cx else "–",
                    kind_cell(cx.get("context_share", {}), lambda x: f"{100 * x:.1f}%", "context gates") if cx else "–",
                    kind_cell(entropy, lambda x: f"{x:.2f}", "context attention")])
    return out


VERDICT_HEADER = ["system", "better than the control on (Δ, p < 0.05)", "not better on (Δ, p)",
                  "every sentence recovered", "meets the target"]
ALPHA = 0.05


def better(ev: dict | None, suites: dict[str, dict | None]) -> tuple[list[tuple], list[tuple]]:
    """The scores on which a system is significantly better than the control (difference > 0,
    p < ALPHA), and those on which it is not, as ``(label, difference, p)``. The BLEU and chrF
    p-values are the paired bootstrap's, one-sided in the observed direction; the suites' are the
    exact McNemar test's, two-sided (the stricter of the two)."""
    tests = []
    if ev:
        for key, boot, level, label in (("s_bleu", "bootstrap", "s", "s-BLEU"), ("d_bleu", "bootstrap", "d", "d-BLEU"),
                                        ("s_chrf", "bootstrap_chrf", "s", "s-chrF"),
                                        ("d_chrf", "bootstrap_chrf", "d", "d-chrF")):
            t = (ev.get(boot) or {}).get(level)
            if t:   # evaluate --hyp SYSTEM --compare CONTROL: delta = control - system
                tests.append((label, -t["delta"], t["p_value"]))
    for name, label in SUITES:
        rep = suites.get(name)
        if rep and "against" in rep:
            tests.append((label, 100 * rep["against"]["delta"], rep["against"]["p_value"]))
    yes = [t for t in tests if t[1] > 0 and t[2] < ALPHA]
    return yes, [t for t in tests if t not in yes]


def against(root: Path, name: str, base: str) -> tuple[dict | None, dict[str, dict | None]]:
    """``name``'s tests against ``base`` in the shape :func:`better` reads: the bootstrap the queue
    ran (valid.vs_BASE.json) and exact McNemar tests of the two runs' kept suite decisions."""
    from docnmt.contrastive import paired_test, read_decisions
    suites: dict[str, dict | None] = {}
    for s, _ in SUITES:
        a, b = root / base / f"{s}.scores.jsonl", root / name / f"{s}.scores.jsonl"
        suites[s] = {"against": paired_test(read_decisions(a), read_decisions(b))} \
            if a.exists() and b.exists() else None
    return load(root / name / f"valid.vs_{base}.json"), suites


def tested(root: Path):
    """``(run, row label, scores, suites, coverage)`` of every scored document system against the
    control (and its decoding with the source's sentence count, if made), and, for a system with a
    second baseline (ALSO), against that baseline."""
    for name in [r for r in ORDER if r != "control" and (root / r / "valid.json").exists()]:
        suites = {s: load(root / name / f"{s}.json") for s, _ in SUITES}
        for ev, cov, label in decodings(root, name):
            yield name, label, ev, suites, cov
        base = ALSO.get(name)
        if base and (root / name / f"valid.vs_{base}.json").exists():
            label = "stage 1" if base == "stage1" else "the " + NAMES[base]
            yield name, f"{NAMES[name]}, against {label} instead", *against(root, name, base), \
                load(root / name / "valid.coverage.json")


def verdict_rows(root: Path) -> list[list[str]]:
    out = []
    cell = lambda tests: "; ".join(f"{label} ({d:+.2f}, p={p:.3f})" for label, d, p in tests)  # noqa: E731
    for _, label_row, ev, suites, cov in tested(root):
        recovered = bool(cov) and cov["documents_fully_recovered"] == cov["documents"] and cov["empty_sentences"] == 0
        yes, no = better(ev, suites)
        won = {label for label, _, _ in yes}
        target = "d-BLEU" in won and bool(won & {label for _, label in SUITES})
        out.append([label_row, cell(yes) or "nothing", cell(no) or "–",
                    ("yes" if recovered else "no") if cov else "–", "yes" if target and recovered else "no"])
    return out


def table(header: list[str], body: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(r) + " |" for r in body)])


def markdown(root: Path) -> str:
    """The scores table, the context-usage table, then what each method beats the control on."""
    return "\n\n".join((table(HEADER, rows(root)), table(CONTEXT_HEADER, context_rows(root)),
                        table(VERDICT_HEADER, verdict_rows(root))))


def best_other(root: Path) -> str:
    """The document model other than G-Transformer with the best d-BLEU (for keeping its weights)."""
    best, name = float("-inf"), ""
    for run in ORDER:
        ev = load(root / run / "valid.json")
        if run in ("control", "gt") or not ev:
            continue
        if ev["d_bleu"]["score"] > best:
            best, name = ev["d_bleu"]["score"], run
    return name


AIDS = ("coword", "split", "margin")    # each aid's run: <method>_<aid>; a pair's: <method>_<aid>_<aid>
PAIR_BASE = {"gt": "gt_sentpos_lr1_nowd", "doc2doc": "doc2doc"}      # each method's run without an aid


def best_pair(root: Path, method: str) -> str:
    """The pair of training aids to run on ``method`` (the rule written in the README before any aid
    run was scored): the two aids whose runs alone gained the most CXMI over the method's run without
    an aid, compared at the table's precision (4 decimals), with the in-domain Hansard pronoun
    accuracy breaking ties. Refuses until all three single-aid runs are scored."""
    base = load(root / PAIR_BASE[method] / "valid.cxmi.json")
    if base is None:
        raise SystemExit(f"{root / PAIR_BASE[method]}: no valid.cxmi.json")
    keys = {}
    for aid in AIDS:
        run = root / f"{method}_{aid}"
        cx, pron = load(run / "valid.cxmi.json"), load(run / "hansard_all.json")
        if cx is None or pron is None:
            raise SystemExit(f"{run}: not scored yet (valid.cxmi.json and hansard_all.json needed)")
        keys[aid] = (round(cx["cxmi_bits_per_token"] - base["cxmi_bits_per_token"], 4), pron["accuracy"])
    two = sorted(AIDS, key=lambda a: keys[a], reverse=True)[:2]
    return f"{method}_" + "_".join(sorted(two, key=AIDS.index))


AID_HEADER = ["aid run", "Hansard pronouns against the control (Δ points, p)",
              "CXMI (bits/word piece) against the needed five-fold", "d-BLEU against the run without the aid (Δ, p)",
              "meets the claim"]
FOLD, MAX_LOSS = 5, 0.3      # the claim: CXMI at least five-fold, at most 0.3 d-BLEU lost


def aid_runs(root: Path):
    """Per scored aid run, ``(name, checks)``: ``checks`` holds the figures the claim is judged on (see
    :func:`aid_claim_rows`): the Hansard test against the control and the accuracy, the CXMI, what it
    gained over the method's run without the aid and the bar it needs, the bootstrap against that run,
    and whether each part of the claim holds."""
    for method, base in PAIR_BASE.items():
        base_cx = (load(root / base / "valid.cxmi.json") or {}).get("cxmi_bits_per_token")
        gained_from = base_cx
        if base_cx is not None and base_cx <= 0:
            base_cx = (load(root / PAIR_BASE["gt"] / "valid.cxmi.json") or {}).get("cxmi_bits_per_token")
        for name in [r for r in ORDER if r.startswith(method + "_") and r.split("_", 1)[1].split("_")[0] in AIDS]:
            ev, cx = load(root / name / "valid.json"), load(root / name / "valid.cxmi.json")
            if not ev or not cx or base_cx is None:
                continue
            hansard = load(root / name / "hansard_all.json") or {}
            pron = hansard.get("against")
            boot = ((load(root / name / f"valid.vs_{base}.json") or {}).get("bootstrap") or {}).get("d")
            c = {"pron": pron, "accuracy": hansard.get("accuracy", 0.0), "cxmi": cx["cxmi_bits_per_token"],
                 "gained": cx["cxmi_bits_per_token"] - gained_from, "need": FOLD * base_cx, "boot": boot}
            c["ok_pron"] = bool(pron) and pron["delta"] > 0 and pron["p_value"] < ALPHA
            c["ok_cx"] = c["cxmi"] >= c["need"]
            c["ok_bleu"] = bool(boot) and -boot["delta"] >= -MAX_LOSS
            c["meets"] = c["ok_pron"] and c["ok_cx"] and c["ok_bleu"]
            yield name, c


def aid_claim_rows(root: Path) -> list[list[str]]:
    """The training aids' claim (written in the README before any aid run was scored), one row per
    scored aid run: better than the control on the in-domain Hansard pronoun suite (McNemar
    p < 0.05), CXMI at least five times that of the method's run without the aid (for a method whose
    CXMI is not positive, Doc2Doc's, five times the G-Transformer's without an aid, the README's
    reading), and at most 0.3 d-BLEU lost to the run without the aid (the paired bootstrap's
    difference)."""
    out = []
    for name, c in aid_runs(root):
        pron, boot = c["pron"], c["boot"]
        out.append([NAMES[name],
                    f"{100 * pron['delta']:+.1f}, p={pron['p_value']:.3f}" if pron else "–",
                    f"{c['cxmi']:+.4f} against ≥ {c['need']:+.4f}",
                    f"{-boot['delta']:+.2f}, p={boot['p_value']:.3f}" if boot else "–",
                    "yes" if c["meets"] else
                    "no (" + ", ".join(w for w, ok in (("pronouns", c["ok_pron"]), ("CXMI", c["ok_cx"]),
                                                       ("d-BLEU", c["ok_bleu"])) if not ok) + ")"])
    return out


def best_recipe(root: Path) -> str:
    """The aid run whose recipe becomes a preset (the README's rule, written before the pair runs):
    of the runs meeting the claim, the one with the highest Hansard pronoun accuracy; if none does,
    the one with the most CXMI gained over its method's run without an aid among those losing at
    most 0.3 d-BLEU to it."""
    runs = list(aid_runs(root))
    met = [(c["accuracy"], name) for name, c in runs if c["meets"]]
    if met:
        return max(met)[1]
    kept = [(c["gained"], name) for name, c in runs if c["ok_bleu"]]
    if not kept:
        raise SystemExit(f"{root}: no scored aid run loses at most {MAX_LOSS} d-BLEU")
    return max(kept)[1]


def deltas(root: Path) -> list[tuple[str, tuple | None, list[tuple]]]:
    """Per tested system (the verdict table's rows): its d-BLEU difference from its baseline with the
    95% bootstrap interval, ``(Δ, low, high, p)`` or None, and ``(suite index, Δ points, p)`` per
    scored suite."""
    out = []
    for _, label, ev, suites, _ in tested(root):
        t = ((ev or {}).get("bootstrap") or {}).get("d")
        # evaluate --hyp SYSTEM --compare BASELINE: delta and interval are baseline - system
        bleu = (-t["delta"], -t["ci95_b_minus_a"][1], -t["ci95_b_minus_a"][0], t["p_value"]) \
            if t and "ci95_b_minus_a" in t else None
        marks = [(k, 100 * r["against"]["delta"], r["against"]["p_value"])
                 for k, (s, _) in enumerate(SUITES) if (r := suites.get(s)) and "against" in r]
        out.append((label, bleu, marks))
    return out


def plot(root: Path, path: Path) -> None:
    """Two panels, one row per tested system: d-BLEU minus the baseline's with its 95% paired
    bootstrap interval, filled where its p < 0.05; each suite's accuracy minus the baseline's, filled
    where the McNemar p < 0.05 (filled on the left of 0: significantly worse)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows_ = deltas(root)
    if not rows_:
        raise SystemExit(f"{root}: no scored document system to plot")
    import textwrap
    labels = ["\n".join(textwrap.wrap(label, 44)) for label, _, _ in rows_]    # long names on two or three lines
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.62 * len(rows_) + 1.8), sharey=True,
                                      gridspec_kw={"width_ratios": [3, 2]})
    ys = list(range(len(rows_)))[::-1]
    for y, (_, bleu, marks) in zip(ys, rows_):
        if bleu:
            d, lo, hi, p = bleu
            left.errorbar([d], [y], xerr=[[max(0.0, d - lo)], [max(0.0, hi - d)]], fmt="o", color="C0", capsize=3,
                          mfc="C0" if p < ALPHA else "white")
        for k, d, p in marks:
            right.plot([d], [y + 0.12 * (k - (len(SUITES) - 1) / 2)], MARKERS[k], color=f"C{k + 1}",
                       mfc=f"C{k + 1}" if p < ALPHA else "white")
    for k, (_, s_label) in enumerate(SUITES):
        right.plot([], [], MARKERS[k], color=f"C{k + 1}", label=s_label)
    fig.legend(*right.get_legend_handles_labels(), fontsize=8, loc="lower right", ncol=3)
    for ax, xlabel in ((left, "d-BLEU − baseline\n(95% bootstrap interval)"),
                       (right, "suite accuracy − baseline\n(points)")):
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    left.set_yticks(ys, labels, fontsize=8)
    fig.suptitle("Tier M-fr: each system against the control (or the named baseline); "
                 "filled: p < 0.05", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.98))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_aids(root: Path, path: Path) -> None:
    """The training aids' claim as a figure, one row per scored aid run: the Hansard pronoun suite
    against the control (points; filled where McNemar p < 0.05), CXMI against the five-fold bar
    (the bar marked per row), and d-BLEU against the run without the aid with its 95% bootstrap
    interval and the claim's -0.3 limit."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = list(aid_runs(root))
    if not runs:
        raise SystemExit(f"{root}: no scored aid run to plot")
    import textwrap
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.7 * len(runs) + 1.8), sharey=True)
    ys = list(range(len(runs)))[::-1]
    for y, (_, c) in zip(ys, runs):
        pron, boot = c["pron"], c["boot"]
        if pron:
            axes[0].plot([100 * pron["delta"]], [y], "D", color="C4", mfc="C4" if c["ok_pron"] else "white")
        axes[1].plot([c["cxmi"]], [y], "o", color="C0", mfc="C0" if c["ok_cx"] else "white")
        axes[1].plot([c["need"]], [y], "|", color="C3", ms=14)
        if boot:
            d = -boot["delta"]
            lo, hi = (-x for x in reversed(boot["ci95_b_minus_a"])) if "ci95_b_minus_a" in boot else (d, d)
            axes[2].errorbar([d], [y], xerr=[[max(0.0, d - lo)], [max(0.0, hi - d)]], fmt="o", color="C2",
                             capsize=3, mfc="C2" if c["ok_bleu"] else "white")
    axes[0].axvline(0, color="grey", lw=0.8)
    axes[1].axvline(0, color="grey", lw=0.8)
    axes[2].axvline(0, color="grey", lw=0.8)
    axes[2].axvline(-MAX_LOSS, color="C3", lw=0.8, ls="--")
    for ax, label in zip(axes, ("Hansard pronouns − control (points)\nfilled: p < 0.05",
                                "CXMI (bits per word piece)\nred tick: the five-fold bar the claim asks for",
                                "d-BLEU − the run without the aid\n(95% interval; dashed: the −0.3 limit)")):
        ax.set_xlabel(label, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(ys, ["\n".join(textwrap.wrap(NAMES[name], 40)) for name, _ in runs], fontsize=8)
    fig.suptitle("Tier M-fr training aids: the claim asks for all three (filled = that part holds)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, nargs="?", default=Path(__file__).parent / "results")
    ap.add_argument("--best-other", action="store_true")
    ap.add_argument("--aid-claims", action="store_true",
                    help="print the training aids' claim, run by run, instead of the three tables")
    ap.add_argument("--best-recipe", action="store_true",
                    help="print the aid run whose recipe is the preset (meeting the claim, else most CXMI gained)")
    ap.add_argument("--best-pair", choices=sorted(PAIR_BASE), metavar="METHOD",
                    help="print the queue name of the pair of aids to run next on METHOD (gt, doc2doc)")
    ap.add_argument("--plot-aids", type=Path, metavar="PNG", help="also draw the training aids' claim, run by run")
    ap.add_argument("--plot", type=Path, metavar="PNG",
                    help="also draw every system's differences from the control and second baselines")
    a = ap.parse_args()
    if a.plot:
        plot(a.root, a.plot)
    if a.plot_aids:
        plot_aids(a.root, a.plot_aids)
    if a.best_pair:
        print(best_pair(a.root, a.best_pair))
    elif a.best_recipe:
        print(best_recipe(a.root))
    elif a.aid_claims:
        print(table(AID_HEADER, aid_claim_rows(a.root)))
    else:
        print(best_other(a.root) if a.best_other else markdown(a.root))


if __name__ == "__main__":
    main()
