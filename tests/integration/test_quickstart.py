"""The quick start runs end to end (a few seconds of training): data unpacked, model trained and
saved, held-back chats translated sentence by sentence with a full coverage report. It stops on
updates, not on time; the time cap, when it stops training early, is reported loudly."""
from docnmt.cli import main


def test_quickstart_runs_end_to_end_and_stops_on_updates(tmp_path, capsys):
    work = tmp_path / "qs"
    assert main(["quickstart", "--workdir", str(work), "--updates", "12"]) == 0
    captured = capsys.readouterr()
    out, err = captured.out, captured.err
    assert (work / "model" / "model.safetensors").exists() and (work / "model" / "config.yaml").exists()
    assert "5/5 documents fully recovered" in out and "d-BLEU" in out
    assert "training a small Doc2Sent model for 12 updates (time cap 30 minutes)" in err
    assert " on cpu (" in err and "M parameters" in err and "training instances" in err    # start-up line
    assert "WARNING" not in err
    updates = [line for line in (work / "model" / "metrics.jsonl").read_text().splitlines() if '"valid_loss"' in line]
    assert '"updates": 12' in updates[-1]


def test_quickstart_says_loudly_when_the_time_cap_stops_training(tmp_path, capsys):
    work = tmp_path / "qs"
    assert main(["quickstart", "--workdir", str(work), "--updates", "100000", "--minutes", "0.03"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: the 0.03-minute time cap stopped training after" in err and "of 100,000 updates" in err
    assert "undertrained" in err and f"Run `docnmt quickstart --workdir {work} --updates 100000 --minutes" in err


def test_quickstart_run_again_goes_on_from_where_it_stopped(tmp_path, capsys):
    """A second run in the same directory keeps the prepared data and resumes training (here
    from update 6 to 12); --force starts over; a directory with other files is refused."""
    work = tmp_path / "qs"
    assert main(["quickstart", "--workdir", str(work), "--updates", "6"]) == 0
    capsys.readouterr()
    assert main(["quickstart", "--workdir", str(work), "--updates", "12"]) == 0
    err = capsys.readouterr().err
    assert "going on from where it stopped" in err and "already prepared" in err
    assert "resuming from" in err and "(update 6," in err
    updates = [line for line in (work / "model" / "metrics.jsonl").read_text().splitlines() if '"valid_loss"' in line]
    assert '"updates": 12' in updates[-1]
    (work / "notes.txt").write_text("mine")
    for force in ([], ["--force"]):
        assert main(["quickstart", "--workdir", str(work), "--updates", "6", *force]) == 2
    assert (work / "notes.txt").read_text() == "mine" and (work / "model" / "model.safetensors").exists()
