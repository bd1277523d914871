"""``tirl view`` as a person sees it: the page opened from disk in headless Chromium (Debian's package).

Each test opens the written HTML file, fails on any console error, works the filters and pager as a person
would, and keeps a screenshot under ``test-artifacts/`` (git-ignored). Without Chromium the tests are
skipped with a reason saying the browser test was NOT run (see ``tests/browser_helpers.py``).
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from browser_helpers import ARTIFACTS, browser, console_errors
from tirl.view import write_view
from view_fixtures import write_eval_run, write_train_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def driver():
    d = browser()
    d.implicitly_wait(10)  # a trajectory's details render on the (asynchronous) toggle event
    yield d
    d.quit()


def _open(driver, path):
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "count").text.strip() != "")
    assert console_errors(driver) == []


def _count(driver) -> int:
    return int(driver.find_element(By.ID, "count").text.split()[0])


def _shown(driver) -> list:
    return driver.find_elements(By.CSS_SELECTOR, "#list details.traj")


def _shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    assert driver.save_screenshot(str(ARTIFACTS / name))


def test_eval_page_filters_change_what_is_shown(driver, tmp_path):
    page = write_view(write_eval_run(tmp_path / "run", 40))
    _open(driver, page)
    assert _count(driver) == 40 and len(_shown(driver)) == 40
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("wrong")
    assert _count(driver) == 20
    assert {e.find_element(By.CSS_SELECTOR, ".verdict").text for e in _shown(driver)} == {"wrong"}
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("")
    Select(driver.find_element(By.ID, "f-finish")).select_by_value("truncated")
    assert _count(driver) == 8  # k % 5 == 4
    Select(driver.find_element(By.ID, "f-finish")).select_by_value("")
    Select(driver.find_element(By.ID, "f-tool")).select_by_value("timeout")
    timeouts = _count(driver)
    assert timeouts == sum(1 for k in range(40) if k % 4 == 2 and k % 7 != 6)
    Select(driver.find_element(By.ID, "f-tool")).select_by_value("none")
    assert _count(driver) == sum(1 for k in range(40) if k % 7 == 6)
    Select(driver.find_element(By.ID, "f-tool")).select_by_value("")
    search = driver.find_element(By.ID, "f-search")
    search.send_keys("needle-17")
    assert _count(driver) == 1
    item = _shown(driver)[0]
    item.find_element(By.TAG_NAME, "summary").click()
    model = [e.text for e in item.find_elements(By.CSS_SELECTOR, "pre.model")]
    assert model == ["turn one of 17: let me compute", "so the answer is \\boxed{17} needle-17"]
    assert item.find_element(By.CSS_SELECTOR, ".response pre").text.startswith("<tool_response>")
    assert item.find_element(By.CSS_SELECTOR, ".cls").text == "error"
    assert console_errors(driver) == []
    _shot(driver, "view-eval-search.png")


def test_hostile_problem_text_is_shown_not_run(driver, tmp_path):
    page = write_view(write_eval_run(tmp_path / "run", 2, hostile_at=0))
    _open(driver, page)
    item = _shown(driver)[0]
    item.find_element(By.TAG_NAME, "summary").click()
    assert item.find_element(By.CSS_SELECTOR, ".problem").text.startswith("</script><img")
    assert driver.execute_script("return window.__pwned === undefined") is True
    assert console_errors(driver) == []


def test_training_page_roc_filter_and_decisions(driver, tmp_path):
    page = write_view(write_train_run(tmp_path / "train", steps=3))
    _open(driver, page)
    assert _count(driver) == 24
    Select(driver.find_element(By.ID, "f-kept")).select_by_value("kept")
    assert _count(driver) == 12
    Select(driver.find_element(By.ID, "f-step")).select_by_value("2")
    assert _count(driver) == 4
    item = _shown(driver)[0]
    item.find_element(By.TAG_NAME, "summary").click()
    assert item.find_element(By.CSS_SELECTOR, ".roc-text").text.startswith("kept; p_err")
    Select(driver.find_element(By.ID, "f-kept")).select_by_value("dropped")
    assert _count(driver) == 4
    assert all(e.find_element(By.CSS_SELECTOR, ".badge.dropped") for e in _shown(driver))
    assert console_errors(driver) == []
    _shot(driver, "view-train-dropped.png")


def test_ten_thousand_trajectories_stay_paginated(driver, tmp_path):
    page = write_view(write_eval_run(tmp_path / "big", 10_000, hostile_at=None))
    _open(driver, page)
    assert _count(driver) == 10_000
    assert len(_shown(driver)) == 50  # one page in the DOM, not 10,000
    assert driver.find_element(By.ID, "page").text == "page 1 of 200"
    driver.find_element(By.ID, "next").click()
    assert driver.find_element(By.ID, "page").text == "page 2 of 200"
    assert _shown(driver)[0].find_element(By.CSS_SELECTOR, ".head").text == "bench · p25 · sample 0"
    driver.find_element(By.ID, "f-search").send_keys("needle-9999")
    assert _count(driver) == 1 and driver.find_element(By.ID, "page").text == "page 1 of 1"
    assert console_errors(driver) == []
    _shot(driver, "view-10k.png")


def test_tokens_are_coloured_by_entropy_when_the_file_exists(driver, tmp_path, tiny_smollm2_model_dir):
    from tirl.analysis.entropy import score_run
    from tirl.models import load

    model, tok = load(tiny_smollm2_model_dir, dtype="float32")
    folder = write_eval_run(tmp_path / "run", 3, hostile_at=None)
    score_run(folder, model, tok, "tiny")
    _open(driver, write_view(folder))
    item = _shown(driver)[1]
    item.find_element(By.TAG_NAME, "summary").click()
    pre = item.find_element(By.CSS_SELECTOR, "pre.entropy")
    coloured = pre.find_elements(By.CSS_SELECTOR, "span[title$='nats']")
    injected = pre.find_elements(By.CSS_SELECTOR, "span.tok-inj")
    assert (len(coloured), len(injected)) == (11, 4)  # the fixture's 6 + 5 model tokens, 4 tool tokens
    assert all(s.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)" for s in coloured)
    assert console_errors(driver) == []
    _shot(driver, "view-entropy.png")
