"""The command line explains itself: help texts and defaults for every option, flags grouped, and
one spelling per idea (switches with --no- forms, one batch-budget name, -i/--input, --device)."""
from __future__ import annotations

import argparse

import pytest
import torch

from docnmt.cli import build_parser
from docnmt.cli.flags import TRAIN_GROUPS, base_default, collect_overrides, decode_flags, train_flags
from docnmt.config import Config

TRAIN, DECODE = train_flags(), decode_flags()      # the verbs' tables: the core's, then the methods'


def verbs() -> dict[str, argparse.ArgumentParser]:
    ap = build_parser()
    return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("verb", sorted(verbs()))
def test_every_option_of_every_verb_has_a_help_text(verb):
    parser = verbs()[verb]
    missing = [a.option_strings or a.dest for a in parser._actions if not a.help]
    assert not missing
    text = parser.format_help()
    assert "SPEC" not in text and "PROTOCOL" not in text and "Tier M" not in text


@pytest.mark.parametrize("verb", sorted(verbs()))
def test_every_default_is_shown(verb):
    """An option with a default says it: argparse's value, or the base configuration's for the
    flags that presets and models set."""
    parser = verbs()[verb]
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.dest == "help":
            continue
        has_default = action.default is not None and action.default is not False or action.dest in {
            f[2:].replace("-", "_") for f, (key, *_) in {**TRAIN, **DECODE}.items() if key}
        if has_default and action.dest != "version":
            assert "default" in parser._get_formatter()._expand_help(action), (verb, action.option_strings)


def test_train_flags_are_grouped_and_each_group_is_in_the_help():
    text = verbs()["train"].format_help()
    for title in TRAIN_GROUPS:
        assert f"\n{title}:" in text, title
    assert {group for *_, group in TRAIN.values()} <= set(TRAIN_GROUPS)
    # each flag sits under its own group's heading
    sections = text.split("\n\n")
    for flag in ("--lr", "--dls", "--max-update", "--save-interval-updates"):
        group = TRAIN[flag][3]
        where = next(i for i, s in enumerate(sections) if s.startswith(f"{group}:"))
        assert any(f"  {flag} " in s or f"  {flag}," in s for s in sections[where:where + 2]), flag


def test_the_shown_default_is_the_configurations():
    cfg = Config()
    assert base_default("train.max_tokens") == cfg.train.max_tokens
    assert base_default("decode.beam") == cfg.decode.beam
    text = " ".join(verbs()["train"].format_help().split())
    assert f"--max-tokens N batch budget in tokens (padded, the longer of source and target) (default: " \
           f"{cfg.train.max_tokens})" in text
    assert f"(default: {cfg.train.patience})" in text


def parse(*argv):
    return build_parser().parse_args(list(argv))


def test_boolean_settings_are_switches_with_a_no_form():
    for argv, want in ((["--dls"], True), (["--no-dls"], False), ([], None)):
        args = parse("train", "data", "--save-dir", "run", *argv)
        assert collect_overrides(args, TRAIN).get("data.dls") is want
    with pytest.raises(SystemExit):                      # the old "--dls true" is not a second spelling
        parse("train", "data", "--save-dir", "run", "--dls", "true", "--lr", "1")


def test_a_usage_error_is_one_line_naming_the_verbs_help(cli_error):
    line = cli_error("train", "data", "--save-dir", "run", "--dls", "true")
    assert line == "docnmt: error: unrecognized arguments: true (see docnmt train --help)"
    assert "the following arguments are required: --save-dir" in cli_error("train", "data")
    assert cli_error("frobnicate").endswith("(see docnmt --help)")
    args = parse("translate", "m", "--sliding", "--no-official-start")
    got = collect_overrides(args, DECODE)
    assert got["decode.sliding"] is True and got["decode.official_start"] is False
    assert Config().override(got).decode.sliding is True
    bools = [f for f, (_, typ, *_) in {**TRAIN, **DECODE}.items() if typ is bool]
    for flag in bools:                     # every boolean setting of the tables is a switch
        key = {**TRAIN, **DECODE}[flag][0]
        assert isinstance(base_default(key), bool), flag
    assert not [f for f, (key, typ, *_) in {**TRAIN, **DECODE}.items()
                if key and typ is not bool and isinstance(base_default(key), bool)]


def test_one_batch_budget_name_in_train_translate_score_contrastive_and_serve():
    assert collect_overrides(parse("train", "d", "--save-dir", "r", "--max-tokens", "100"),
                             TRAIN)["train.max_tokens"] == 100
    for flag in ("--max-tokens", "--batch-tokens"):          # the old translate name still works
        assert collect_overrides(parse("translate", "m", flag, "123"), DECODE)["decode.max_tokens"] == 123
    assert parse("score-contrastive", "m", "s", "--max-tokens", "77").batch_tokens == 77
    args = parse("serve", "m", "--max-tokens", "999", "--request-tokens", "50")
    assert (args.batch_tokens, args.request_tokens) == (999, 50)
    for verb in ("train", "translate", "serve", "score-contrastive"):
        assert "--max-tokens" in verbs()[verb].format_help()
        assert "--batch-tokens" not in verbs()[verb].format_help()


@pytest.mark.parametrize("verb,extra", [("translate", []), ("score", ["--ref", "r"]), ("entropy", ["--ref", "r"]),
                                        ("fba-map", ["-o", "x.png"]), ("compare", ["m", "--ref", "r"]),
                                        ("evaluate", ["--hyp", "h", "--ref", "r"])])
def test_input_documents_are_minus_i_everywhere(verb, extra):
    positional = [] if verb in ("evaluate", "compare") else ["m"]
    for flag in ("-i", "--input"):
        args = parse(verb, *positional, *extra, flag, "docs.txt")
        got = args.input if verb == "translate" else args.src
        assert got in (["docs.txt"], "docs.txt")


def test_train_device(tiny_dir, tmp_path, cli_error):
    from _tiny import tiny_config
    from docnmt.training import Trainer
    trainer = Trainer.from_dirs(tiny_config(), tiny_dir / "data", tmp_path / "run", progress_bar=False, device="cpu")
    try:
        assert trainer.device == torch.device("cpu")
        assert next(trainer.model.parameters()).device.type == "cpu"
    finally:
        trainer.close()
    if not torch.cuda.is_available():
        message = cli_error("train", tiny_dir / "data", "--save-dir", tmp_path / "gpu", "--device", "cuda")
        assert "no CUDA GPU" in message
        assert not (tmp_path / "gpu").exists()
    message = cli_error("train", tiny_dir / "data", "--save-dir", tmp_path / "tpu", "--device", "tpu")
    assert "unknown device" in message
