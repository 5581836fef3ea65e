"""What the commands tell the user beyond their results: warnings about scores that cover little."""
from __future__ import annotations

import json


def test_evaluate_warns_loudly_when_most_documents_have_mismatched_sentence_counts(run_cli, write_files, tmp_path):
    ref = "<d>\nA cat sat.\nIt slept.\n<d>\nDogs bark.\nThey run.\n<d>\nBirds sing.\nThey fly.\n"
    merged = "<d>\nA cat sat. It slept.\n<d>\nDogs bark. They run.\n<d>\nBirds sing.\nThey fly.\n"
    paths = write_files(tmp_path, {"ref.txt": ref, "hyp.txt": merged, "ok.txt": ref})
    status, out, err = run_cli("evaluate", "--hyp", paths["hyp.txt"], "--ref", paths["ref.txt"],
                               "--json", tmp_path / "r.json")
    assert status == 0
    assert "WARNING: 2 of 3 documents have a different number of sentences" in err
    assert "(2 of 6 sentences scored)" in err
    assert "2 of 3 documents" in json.loads((tmp_path / "r.json").read_text())["warning"]
    status, out, err = run_cli("evaluate", "--hyp", paths["ok.txt"], "--ref", paths["ref.txt"],
                               "--json", tmp_path / "r2.json")
    assert status == 0 and "WARNING" not in err and "warning" not in json.loads((tmp_path / "r2.json").read_text())


def test_presets_name_prints_its_description_and_every_value_it_sets(run_cli, cli_error):
    import yaml

    from docnmt.config import Config, preset_description
    name = "g_transformer_finetune_docnmt_split_small"
    status, out, _ = run_cli("presets", name)
    head = [line[2:] for line in out.splitlines() if line.startswith("# ")]
    assert status == 0 and " ".join(head) == preset_description(name)
    assert yaml.safe_load(out) == Config.load(name).to_dict()          # the resolved config, parents included
    assert yaml.safe_load(out)["train"]["split_pairs"] == 0.3 and yaml.safe_load(out)["train"]["lr"] == 4e-4
    said = cli_error("presets", "g_transformer_finetune_docnmt_smal")
    assert "did you mean 'g_transformer_finetune_docnmt_small'" in said


def test_presets_prints_whole_descriptions_in_aligned_columns(run_cli, monkeypatch):
    from docnmt.config import preset_description, preset_names
    monkeypatch.setenv("COLUMNS", "100")
    status, out, _ = run_cli("presets")
    assert status == 0
    names, lines = preset_names(), out.splitlines()
    width = max(map(len, names)) + 2
    starts = [line[:width].strip() for line in lines if not line.startswith(" ")]
    assert starts == names
    assert all(len(line) <= 100 or " " not in line[width:] for line in lines)
    assert all(line[:width].strip() == "" for line in lines if line.startswith(" "))
    text = " ".join(line[width:].strip() for line in lines)
    for name in names:                    # every description whole, not only its first line
        assert preset_description(name) in text
    assert "docs/methods/context_transformer.md#two-step-training" in preset_description("context_transformer_small")
    assert "Tier M" not in out and "SPEC" not in out and "PROTOCOL" not in out
