"""The pieces of a training run's save directory (docnmt.training.run_dir), each on its own:
claiming (lock, foreign files, leftovers), the config check, choosing the checkpoint to resume,
and metrics.jsonl after a resume point. Nothing here trains or reads prepared data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from _tiny import tiny_config
from docnmt.errors import DocnmtError
from docnmt.training import RunDir


def test_the_lock_refuses_a_second_claim_until_the_first_closes(tmp_path):
    first = RunDir(tmp_path / "run")
    first.claim(force=False)
    with pytest.raises(DocnmtError, match="in use"):
        RunDir(tmp_path / "run").claim(force=False)
    first.close()
    again = RunDir(tmp_path / "run")
    again.claim(force=False)
    again.close()


def test_claim_never_takes_a_file_or_a_directory_docnmt_did_not_make(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(DocnmtError, match="is a file"):
        RunDir(tmp_path / "file").claim(force=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(DocnmtError, match="not a docnmt model directory"):
        RunDir(tmp_path / "mine").claim(force=True)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]     # not even a lock


def test_files_of_an_earlier_run_without_a_checkpoint_need_force(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    tiny_config().dump(run.path / "config.yaml")
    (run.path / "metrics.jsonl").write_text("")
    run.refuse_leftovers(force=False)            # only what a run writes: a start killed early, fine
    (run.path / "notes.txt").write_text("mine")
    with pytest.raises(DocnmtError, match="notes.txt"):
        run.refuse_leftovers(force=False)
    run.refuse_leftovers(force=True)


def test_config_check_refuses_another_model_or_data_but_not_other_training_settings(tmp_path):
    run = RunDir(tmp_path)
    tiny_config(max_update=10).dump(tmp_path / "config.yaml")
    run.check_config(tiny_config(max_update=99, lr=1e-3))
    with pytest.raises(DocnmtError, match="different model or data"):
        run.check_config(tiny_config(max_update=10).override({"model.d_model": 64}))
    with pytest.raises(DocnmtError, match="different model or data"):
        run.check_config(tiny_config("doc2doc", max_update=10))


def test_resume_takes_the_newest_checkpoint_that_loads(tmp_path, capsys):
    run = RunDir(tmp_path)
    found = [tmp_path / f"u{u:08d}" for u in (2, 4, 6)]
    tried = []

    def resume(path: Path):
        tried.append(path.name)
        if path.name != "u00000002":
            raise EOFError("torn")
    assert run.resume_newest(found, resume) == found[0]
    assert tried == ["u00000006", "u00000004", "u00000002"]
    assert "u00000006 (EOFError: torn), u00000004 (EOFError: torn) cannot be loaded; resumed from u00000002" \
        in capsys.readouterr().err
    with pytest.raises(DocnmtError, match="no checkpoint can be loaded"):
        run.resume_newest(found[1:], resume)


def test_metrics_after_the_resume_point_and_torn_lines_are_forgotten(tmp_path):
    records = [{"updates": 4, "loss": 1.0}, {"updates": 6, "loss": 0.9}, {"updates": 6, "valid_loss": 0.8},
               {"updates": 7, "loss": 0.7}]
    lines = "".join(json.dumps(r) + "\n" for r in records) + '{"updates": 8, "lo'
    run = RunDir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(lines)
    run.forget_metrics_after(6, validated=True)
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == records[:3]
    run.forget_metrics_after(6, validated=False)      # the checkpoint predates its validation: redone
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == records[:2]


def test_a_failed_start_removes_only_a_directory_it_made_and_left_empty(tmp_path):
    made = RunDir(tmp_path / "new")
    made.claim(force=False)
    made.close()
    made.remove_if_made_empty()
    assert not made.path.exists()
    (tmp_path / "old").mkdir()
    kept = RunDir(tmp_path / "old")
    kept.claim(force=False)
    kept.close()
    kept.remove_if_made_empty()
    assert kept.path.is_dir()
