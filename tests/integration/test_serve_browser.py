"""The web page of ``docnmt serve`` in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium): paste a document, translate it from the keyboard, read
it side by side, download it; then the same with a file, and with a file of each format kept whole.
Skipped where no browser is installed.

``DOCNMT_SCREENSHOT=docs/img/serve.png`` keeps the screenshot there (``DOCNMT_SCREENSHOT_MODEL=DIR``
serves another model than the tiny one, as for the picture in docs/serving.md).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from test_formats_docx import sample  # noqa: E402
from test_formats_markup import HTML, MARKDOWN, TEXT  # noqa: E402
from test_formats_subtitles import SRT, VTT  # noqa: E402
from test_serve import start_server, stop_server  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no chromium and chromedriver installed")

DOCUMENT = ("Hello, I would like to book a table for two.\nSure, what time would you like?\n"
            "At seven tonight, please.\n\nThank you for your help!")


@pytest.fixture(scope="module")
def page_server(tiny_model, tmp_path_factory):
    model = os.environ.get("DOCNMT_SCREENSHOT_MODEL") or tiny_model("doc2doc")
    proc, url = start_server({"chat": model}, tmp_path_factory.mktemp("page") / "serve.log")
    yield url
    stop_server(proc)


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,1150"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    driver.downloads = downloads
    yield driver
    driver.quit()


def wait_for(driver, condition, seconds: float = 120):
    return WebDriverWait(driver, seconds, poll_frequency=0.1).until(lambda d: condition(d))


def downloaded(folder: Path, name: str, seconds: float = 20, binary: bool = False) -> str | bytes:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if (folder / name).exists() and not list(folder.glob("*.crdownload")):
            return (folder / name).read_bytes() if binary else (folder / name).read_text(encoding="utf-8")
        time.sleep(0.1)
    raise AssertionError(f"{name} was not downloaded; the folder holds {sorted(p.name for p in folder.iterdir())}")


def rows(driver) -> list[list[str]]:
    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, "#pairs tbody tr")]


def test_paste_translate_read_side_by_side_and_download(page_server, browser, tmp_path):
    driver = browser
    driver.get(page_server)
    wait_for(driver, lambda d: "ready" in d.find_element(By.ID, "status").text)
    unlabelled = driver.execute_script(
        "return [...document.querySelectorAll('input, select, textarea')].filter(e => !e.labels.length)"
        ".map(e => e.id)")
    assert unlabelled == []                                  # every control is labelled for a screen reader
    source = driver.find_element(By.ID, "source")
    source.send_keys(DOCUMENT)
    source.send_keys(Keys.CONTROL, Keys.ENTER)               # translate from the keyboard
    wait_for(driver, lambda d: d.find_element(By.ID, "result").is_displayed()
             and "Translated" in d.find_element(By.ID, "status").text)
    want = httpx.post(page_server + "/v1/translate", json={"model": "chat", "text": DOCUMENT, "split": "lines",
                                                            "lang": "en", "options": {}}, timeout=120).json()
    table = rows(driver)
    assert [r[1] for r in table] == DOCUMENT.replace("\n\n", "\n").split("\n")
    assert [r[2] for r in table] == [t or "(empty)" for t in want["translation"]]
    assert [r[0] for r in table] == ["1", "2", "3", "4"]
    warnings = driver.find_element(By.ID, "warnings").text
    assert ("came back empty" in warnings) == bool(want["coverage"]["empty_sentences"])
    shot = Path(os.environ.get("DOCNMT_SCREENSHOT") or tmp_path / "serve.png")
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    driver.find_element(By.ID, "download").click()
    assert downloaded(driver.downloads, "translation.txt") == want["text"] + "\n"
    beam = driver.find_element(By.ID, "beam")                # a refused request: its error alone, no old table
    beam.clear()
    beam.send_keys("99")
    source.send_keys(Keys.CONTROL, Keys.ENTER)
    wait_for(driver, lambda d: "at most" in d.find_element(By.ID, "status").text)
    assert not driver.find_element(By.ID, "result").is_displayed()


def test_a_dropped_or_chosen_file_comes_back_in_its_format(page_server, browser, tmp_path):
    driver = browser
    src = tmp_path / "chat.en"
    src.write_text("<d>\nHello there.\nCan I help you?\n<d>\nGood bye.\n", encoding="utf-8")
    driver.get(page_server)
    wait_for(driver, lambda d: "ready" in d.find_element(By.ID, "status").text)
    driver.find_element(By.ID, "file").send_keys(str(src))
    assert "chat.en" in driver.find_element(By.ID, "filename").text
    driver.find_element(By.ID, "translate").click()
    wait_for(driver, lambda d: "Translated 3 sentences" in d.find_element(By.ID, "status").text)
    assert [r[1] for r in rows(driver)] == ["Hello there.", "Can I help you?", "Good bye."]
    want = httpx.post(page_server + "/v1/translate/file", files={"file": ("chat.en", src.read_bytes())},
                      timeout=120).text
    driver.find_element(By.ID, "download").click()
    assert downloaded(driver.downloads, "chat.translated.en") == want


KEPT = [("talk.srt", SRT, {}), ("talk.vtt", VTT, {}), ("report.docx", sample(), {}), ("notes.md", MARKDOWN, {}),
        ("page.html", HTML, {}), ("story.txt", TEXT, {"format": "text"})]


@pytest.mark.parametrize("name,data,form", KEPT, ids=[k[0] for k in KEPT])
def test_subtitles_word_markdown_html_and_text_come_back_as_files_of_their_kind(page_server, browser, tmp_path,
                                                                                   name, data, form):
    """A file kept whole (docs/formats.md) downloads as the service writes it, DOCX as bytes; a
    .txt file with "found by a sentence splitter" as paragraphs of sentences."""
    driver = browser
    src = tmp_path / name
    src.write_bytes(data)
    driver.get(page_server)
    wait_for(driver, lambda d: "ready" in d.find_element(By.ID, "status").text)
    if form:
        Select(driver.find_element(By.ID, "split")).select_by_value("sentences")
    driver.find_element(By.ID, "file").send_keys(str(src))
    driver.find_element(By.ID, "translate").click()
    wait_for(driver, lambda d: "Translated" in d.find_element(By.ID, "status").text)
    want = httpx.post(page_server + "/v1/translate/file", files={"file": (name, data)}, data=form, timeout=120)
    assert want.status_code == 200 and want.content != data
    driver.find_element(By.ID, "download").click()
    stem, ext = name.split(".")
    assert downloaded(driver.downloads, f"{stem}.translated.{ext}", binary=True) == want.content


def test_with_an_api_key_typing_it_and_pressing_translate_is_enough(tiny_model, browser, tmp_path):
    """A key-guarded server: the page asks for the key; typed and not confirmed with Enter, the
    Translate button still loads the models first and translates."""
    proc, url = start_server({"chat": tiny_model("sent2sent")}, tmp_path / "serve.log",
                             env={"DOCNMT_API_KEY": "s3cret"})
    try:
        driver = browser
        driver.get(url)
        wait_for(driver, lambda d: "needs an API key" in d.find_element(By.ID, "status").text)
        driver.find_element(By.ID, "apikey").send_keys("s3cret")
        driver.find_element(By.ID, "source").send_keys("Hello there.")
        driver.find_element(By.ID, "translate").click()
        wait_for(driver, lambda d: "Translated 1 sentence in" in d.find_element(By.ID, "status").text)
        assert [r[1] for r in rows(driver)] == ["Hello there."]
    finally:
        stop_server(proc)


def test_an_edited_translation_becomes_the_context_of_the_rest(page_server, browser):
    """Editing a translated sentence and pressing its "Re-translate the rest" translates the
    sentences after it again with the edit forced as context: as the API's ``context`` does."""
    driver = browser
    driver.get(page_server)
    wait_for(driver, lambda d: "ready" in d.find_element(By.ID, "status").text)
    driver.find_element(By.ID, "source").send_keys(DOCUMENT)
    driver.find_element(By.ID, "translate").click()
    wait_for(driver, lambda d: "Translated" in d.find_element(By.ID, "status").text)
    first = driver.find_elements(By.CSS_SELECTOR, "#pairs tbody tr")[0]
    redo = first.find_element(By.CSS_SELECTOR, "button.retranslate")
    assert not redo.is_displayed()                          # nothing edited yet
    cell = first.find_element(By.CSS_SELECTOR, "td.translation")
    cell.click()
    cell.send_keys(Keys.CONTROL, "a")
    cell.send_keys("Hallo, ich möchte einen Tisch für zwei.")
    driver.execute_script("window.sent = []; const f = window.fetch; "
                          "window.fetch = (u, i) => { window.sent.push(i && i.body); return f(u, i); };")
    redo.click()
    wait_for(driver, lambda d: "with your edits as context" in d.find_element(By.ID, "status").text)
    sources = DOCUMENT.replace("\n\n", "\n").split("\n")
    sent = json.loads(driver.execute_script("return window.sent[0]"))
    assert sent["sentences"] == sources[1:]
    assert sent["context"] == {"src": sources[:1], "tgt": ["Hallo, ich möchte einen Tisch für zwei."]}
    want = httpx.post(page_server + "/v1/translate", json={
        "model": "chat", "sentences": sources[1:], "options": {},
        "context": {"src": sources[:1], "tgt": ["Hallo, ich möchte einen Tisch für zwei."]}}, timeout=120).json()
    table = rows(driver)
    assert table[0][2] == "Hallo, ich möchte einen Tisch für zwei."
    assert [r[2] for r in table[1:]] == [t or "(empty)" for t in want["translation"]]
