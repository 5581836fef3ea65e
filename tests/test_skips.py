"""The skip rule of CI (tests/_skips.py): under DOCNMT_ONLY_ALLOWED_SKIPS=1 a run with any skip but the
GPU checks' and the browser test's (without Chromium) fails and names the refused skips; without it
skips are only reported."""
import pytest

from _skips import ENV, skip_allowed

pytest_plugins = ["pytester"]

FILES = {
    "tests/cuda/test_rule_gpu.py": 'import pytest\n\ndef test_gpu():\n    pytest.skip("CUDA not available")\n',
    "tests/integration/test_serve_browser.py":
        'import pytest\n\n@pytest.mark.skipif(True, reason="no chromium and chromedriver installed")\n'
        "def test_page():\n    pass\n",
    "tests/test_rule_fine.py": "def test_fine():\n    pass\n",
}
DATA_SKIP = {"tests/test_rule_data.py": 'import pytest\n\ndef test_data():\n    pytest.skip("real data not found")\n'}
MODULE_SKIP = {"tests/test_rule_extra.py": 'import pytest\n\npytest.importorskip("no_such_module_here")\n'
                                      "def test_x():\n    pass\n"}


def run(pytester, monkeypatch, files: dict, rule: bool):
    for path, text in files.items():
        pytester.path.joinpath(path).parent.mkdir(parents=True, exist_ok=True)
        pytester.path.joinpath(path).write_text(text)
    if rule:
        monkeypatch.setenv(ENV, "1")
    else:
        monkeypatch.delenv(ENV, raising=False)
    return pytester.runpytest("-p", "_skips", "-rs", "--import-mode=importlib")   # beside this session's modules


def test_the_allowed_skips_pass(pytester, monkeypatch):
    result = run(pytester, monkeypatch, FILES, rule=True)
    result.assert_outcomes(passed=1, skipped=2)
    assert result.ret == pytest.ExitCode.OK
    assert "skips not allowed" not in result.stdout.str()


@pytest.mark.parametrize("extra, named", [(DATA_SKIP, "tests/test_rule_data.py::test_data: real data not found"),
                                          (MODULE_SKIP, "tests/test_rule_extra.py: could not import")])
def test_any_other_skip_fails_the_run_and_is_named(pytester, monkeypatch, extra, named):
    result = run(pytester, monkeypatch, {**FILES, **extra}, rule=True)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*skips not allowed ({ENV}=1)*", f"*{named}*"])
    section = result.stdout.str().split("skips not allowed")[1].split("short test summary")[0]
    assert named.split(":")[0] in section and "test_rule_gpu" not in section and "browser" not in section


def test_without_the_variable_a_skip_is_only_reported(pytester, monkeypatch):
    result = run(pytester, monkeypatch, {**FILES, **DATA_SKIP}, rule=False)
    assert result.ret == pytest.ExitCode.OK and "skips not allowed" not in result.stdout.str()


def test_the_browser_test_may_skip_only_for_want_of_chromium():
    browser = "tests/integration/test_serve_browser.py"
    assert skip_allowed(browser, "no chromium and chromedriver installed")
    assert not skip_allowed(browser, "could not import 'selenium.webdriver': No module named 'selenium'")
    assert skip_allowed("tests/cuda/test_cuda.py::test_x", "CUDA not available")
    assert skip_allowed("tests/test_x.py::test_y", "CUDA not available", keywords={"cuda": 1})
    assert not skip_allowed("tests/test_x.py::test_y", "real data not found")
