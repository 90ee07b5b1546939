"""The run report: written when a run ends (on by default), rebuilt by ``pipeline report``,
self-contained, and showing the numbers the run recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pipeline.core.errors import ExitCode
from pipeline.core.settings import Settings
from pipeline.report import REPORT, report_enabled
from pipeline.report.html import duration, number
from pipeline.runs.record import read_manifest
from tests.support.cli import newest_run, run_cli as _pipeline

pytestmark = pytest.mark.slow
TRAIN_SAMPLE = 2000          # evaluate's train_rows in the churn run: its ~4,900 training rows are sampled


def cli(*args: str, cwd: Path, report: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: with no PIPELINE_REPORT unless ``report`` sets one."""
    env = {"COLUMNS": "200", **({"PIPELINE_REPORT": report} if report is not None else {})}
    return _pipeline(*args, cwd=cwd, env=env, unset=[] if report is not None else ["PIPELINE_REPORT"])


class Page(HTMLParser):
    """Sections, figures, tables (as rows of cell texts) and every URL-bearing attribute of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.svgs: list[int] = []           # elements inside each <svg>
        self.tables: list[list[list[str]]] = []
        self.urls: list[str] = []
        self.scripts: list[str] = []
        self._svg_depth = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._script = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "section":
            self.sections.append(values.get("id") or "")
        if tag == "svg":
            self._svg_depth += 1
            self.svgs.append(0)
        elif self._svg_depth:
            self.svgs[-1] += 1
        for name in ("src", "href", "xlink:href", "action", "data"):
            if values.get(name) and not values[name].startswith("#"):
                self.urls.append(values[name])
        if tag == "link":
            self.urls.append(values.get("href") or "<link>")
        if tag == "table":
            self.tables.append([])
        if tag == "tr":
            self._row = []
        if tag in ("td", "th"):
            self._cell = []
        if tag == "script":
            self._script = True
            if values.get("src"):
                self.urls.append(values["src"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg_depth -= 1
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        if tag == "tr" and self._row is not None and self.tables:
            self.tables[-1].append(self._row)
            self._row = None
        if tag == "script":
            self._script = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._script:
            self.scripts.append(data)


def _split_table(page: Page) -> tuple[list[str], list[str], list[list[str]]]:
    """The metrics table (one row per model; each metric over its splits): the metric names,
    the splits under each, and the rows."""
    at = next(i for i, t in enumerate(page.tables) if len(t) > 1 and t[0][0] == "model" and t[1][:1] == ["train"])
    table = page.tables[at]
    names, under = table[0][1:], table[1]
    splits = under[:len(under) // len(names)]
    assert under == splits * len(names)
    return names, splits, table[2:]


def _section(text: str, name: str) -> str:
    start = text.index(f'<section id="{name}">')
    return text[start:text.index("</section>", start)]


@pytest.fixture(scope="module")
def churn_run(tmp_path_factory) -> Path:
    """One run of the shipped churn config, as a user starts it (the report on by default),
    with the training split's metrics on a sample (as a table past 250,000 training rows has)."""
    from tests.conftest import copy_project

    project = copy_project(tmp_path_factory.mktemp("report"))
    proc = cli("run", "configs/churn.yaml", "--device", "cpu", "--set", f"stages.evaluate.train_rows={TRAIN_SAMPLE}",
               cwd=project)
    assert proc.returncode == 0, proc.stderr
    return (project / "runs" / "churn" / "latest").resolve()


def test_a_run_writes_a_self_contained_report_by_default(churn_run):
    path = churn_run / REPORT
    assert path.is_file()
    assert path.stat().st_size < 5 * 2**20
    page = Page(path.read_text(encoding="utf-8"))
    assert page.urls == []                                   # nothing fetched: no src, href, link
    assert "http" not in "".join(page.scripts)
    assert {"result", "summary", "stages", "models-evaluate", "training"} <= set(page.sections)
    assert len(page.svgs) >= 8 and all(count > 20 for count in page.svgs)   # every figure has content
    manifest = read_manifest(churn_run)
    assert REPORT not in manifest.artifacts                  # derived from the record, rebuilt at will
    rounds = (churn_run / "xgb" / "eval_history.csv").read_text().splitlines()
    assert rounds[0].startswith("round,valid_") and "xgb/eval_history.csv" in manifest.artifacts
    import yaml

    config = yaml.safe_load((churn_run / "config.yaml").read_text())
    assert len(rounds) - 1 == config["stages"]["xgb"]["params"]["n_estimators"]     # a row per round
    assert "xgb: evaluation rounds" in path.read_text(encoding="utf-8")


def test_every_metric_shown_is_the_recorded_one(churn_run):
    metrics = json.loads((churn_run / "evaluate" / "metrics.json").read_text())
    manifest = read_manifest(churn_run)
    assert manifest.metrics["splits"] == metrics["splits"]
    page = Page((churn_run / REPORT).read_text(encoding="utf-8"))
    names, splits, rows = _split_table(page)
    assert [row[0] for row in rows] == list(metrics["models"])               # one row per model
    assert names[0] == metrics["rank_by"] and set(names) == set(metrics["models"][metrics["best"]])
    assert splits == list(metrics["splits"]) == ["train", "valid", "test"]
    train_rows = read_manifest(churn_run).stages["split"].facts["rows"]["train"]
    sample = len(range(0, train_rows, -(-train_rows // TRAIN_SAMPLE)))            # every k-th row
    assert metrics["sampled"] == {"train": {m: {"rows": sample, "of": train_rows} for m in metrics["models"]}}
    assert f"The train metrics are of {number(sample)} of its {number(train_rows)} rows" in (churn_run / REPORT).read_text(encoding="utf-8")
    for row in rows:                                                          # every model on every split
        for i, name in enumerate(names):
            for j, split in enumerate(splits):
                assert row[1 + i * len(splits) + j] == number(metrics["splits"][split][row[0]][name]), (row[0], name)
    stages = next(t for t in page.tables if t and t[0][:3] == ["stage", "kind", "status"])
    assert stages[0][3] == "time"
    for row in stages[1:]:
        record = manifest.stages[row[0]]
        took = duration(record.seconds) + (f" (computed in {duration(record.computed_seconds)})"
                                           if record.status == "cached" and record.computed_seconds is not None else "")
        assert (row[1], row[2], row[3]) == (record.kind, record.status, took)
    confusions = [t for t in page.tables if t and t[0][0] == "true \\ predicted"]
    assert len(confusions) == len(metrics["models"])
    per_class = [t for t in page.tables if t and t[0][0] == "class"]
    assert len(per_class) == len(metrics["models"])                       # binary too: both classes
    for table, model in zip(per_class, metrics["models"]):
        (true_no, false_yes), (false_no, true_yes) = metrics["confusion"][model]["matrix"]
        assert [row[0] for row in table[1:]] == ["No", "Yes"]
        assert table[2][1:3] == [number(true_yes / (true_yes + false_yes)), number(true_yes / (true_yes + false_no))]
        assert table[1][4] == number(true_no + false_yes)
    for table, model in zip(confusions, metrics["models"]):
        assert table[0] == ["true \\ predicted", "No", "Yes"]                # the target's values, not 0/1
        shown_matrix = [[int(v.replace(",", "")) for v in row[1:]] for row in table[1:]]
        assert shown_matrix == metrics["confusion"][model]["matrix"]


@pytest.mark.parametrize("config,tables,figures_in_models", [
    ("telco_charges", [], 1),               # regression: scatter first (the answer), residuals in models
    ("telco_contract", ["true \\ predicted", "class"], 0),      # multiclass: confusion and per class
])
def test_regression_and_multiclass_runs_get_their_tasks_sections(project, config, tables, figures_in_models):
    proc = cli("run", f"configs/{config}.yaml", "--device", "cpu", "--set", "stages.mlp.epochs=2",
               "--set", "stages.forest.params.n_estimators=10", "--set", "stages.xgb.params.n_estimators=10",
               cwd=project)
    assert proc.returncode == 0, proc.stderr
    run = (project / "runs" / config / "latest").resolve()
    text = (run / REPORT).read_text(encoding="utf-8")
    page = Page(text)
    assert "models-evaluate" in page.sections and page.urls == []
    metrics = json.loads((run / "evaluate" / "metrics.json").read_text())
    names, _, rows = _split_table(page)
    assert set(names) == set(metrics["models"][metrics["best"]]) and names[0] == metrics["rank_by"]
    assert [row[0] for row in rows] == list(metrics["models"])
    result = text[text.index('<section id="result">'):text.index("</section>", text.index('<section id="result">'))]
    assert f'id="best-model">{metrics["best"]}<' in result and result.count("<svg") == 1   # the headline figure
    for heading in tables:
        assert sum(1 for t in page.tables if t and t[0][0] == heading) == len(metrics["models"])
    models_html = text[text.index('<section id="models-evaluate">'):text.index("</section>", text.index(
        '<section id="models-evaluate">'))]
    assert models_html.count("<svg") == figures_in_models
    profile = json.loads((run / "features" / "profile.json").read_text())
    balance = profile["balance"]
    if balance["kind"] == "classes":                    # rows per class value, per split
        shown = next(t for t in page.tables if t and t[0] == ["split", *map(str, balance["classes"])])
        assert shown[1:] == [[split, *(number(n) for n in counts)] for split, counts in balance["counts"].items()]
    else:                                               # the target's summary per split
        shown = next(t for t in page.tables if t and t[0] == ["split", "mean", "std", "min", "max"])
        assert shown[1][1] == number(balance["summary"]["train"]["mean"])
    assert json.loads((run / "evaluate" / "importance.json").read_text())["metric"] == metrics["rank_by"]


def test_report_command_rebuilds_and_a_changed_file_is_not_shown(churn_run, tmp_path):
    run = tmp_path / churn_run.name
    shutil.copytree(churn_run, run)
    (run / REPORT).unlink()
    out = tmp_path / "again.html"
    proc = cli("report", str(run), "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and not (run / REPORT).exists()
    metrics = run / "evaluate" / "metrics.json"
    metrics.write_text(metrics.read_text().replace('"roc_auc": 0.', '"roc_auc": 0.9'), encoding="utf-8")
    proc = cli("report", str(run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (run / REPORT).read_text(encoding="utf-8")
    assert "evaluate/metrics.json changed since the run" in text
    assert "models-evaluate" not in {s for s in Page(text).sections}
    # The result says why there is no best model (not "no evaluate stage ran"), and the sections
    # whose files are intact (importance.json) are still drawn.
    result = _section(text, "result")
    assert "no evaluate stage ran" not in result and "evaluate/metrics.json" in result and "changed" in result
    assert "explanations-evaluate" in Page(text).sections
    assert _section(text, "explanations-evaluate").count("<svg") >= 1
    # A changed importance.json: its section says so, not that none were recorded (which told
    # the user to change a config that already wrote them).
    (run / "evaluate" / "importance.json").write_text("{}", encoding="utf-8")
    proc = cli("report", str(run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    explanations = _section((run / REPORT).read_text(encoding="utf-8"), "explanations-evaluate")
    assert "evaluate/importance.json changed since the run or could not be read" in explanations
    assert "No importances were recorded" not in explanations


def test_report_command_names_a_recorded_file_that_is_missing(churn_run, tmp_path):
    run = tmp_path / churn_run.name
    shutil.copytree(churn_run, run)
    assert "evaluate/curves.json" in read_manifest(run).artifacts
    (run / "evaluate" / "curves.json").unlink()
    proc = cli("report", str(run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "evaluate/curves.json" in proc.stderr and "missing" in proc.stderr
    text = (run / REPORT).read_text(encoding="utf-8")
    assert "Not shown: evaluate/curves.json missing from the run folder" in text
    assert "models-evaluate" in Page(text).sections                    # the metrics are still there
    proc = cli("report", str(churn_run), "--output", str(tmp_path / "whole.html"), cwd=tmp_path)
    assert proc.returncode == 0 and "missing" not in proc.stderr and "Not shown" not in (
        tmp_path / "whole.html").read_text(encoding="utf-8")


def test_report_command_names_a_run_that_is_not_there(tmp_path):
    proc = cli("report", "latest", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == ExitCode.CONFIG and "Traceback" not in proc.stderr


def test_the_switch_and_the_environment_turn_it_off_and_on(project):
    proc = cli("run", "configs/churn.yaml", "--until", "features", "--device", "cpu",
               "--set", "report.enabled=false", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert not (newest_run(project / "runs" / "churn") / REPORT).exists()
    proc = cli("run", "configs/churn.yaml", "--until", "features", "--device", "cpu",
               "--set", "report.enabled=false", cwd=project, report="on")
    assert proc.returncode == 0, proc.stderr
    assert (newest_run(project / "runs" / "churn") / REPORT).is_file()
    proc = cli("run", "configs/churn.yaml", "--until", "features", "--device", "cpu", cwd=project, report="maybe")
    assert proc.returncode == ExitCode.CONFIG and "PIPELINE_REPORT" in proc.stderr and "Traceback" not in proc.stderr


def test_a_failed_run_gets_a_report_that_says_why(project):
    proc = cli("run", "configs/churn.yaml", "--device", "cpu", "--set", "stages.raw.path=data/nope.csv",
               cwd=project, report="on")
    assert proc.returncode != 0
    (run,) = [p for p in (project / "runs" / "churn").iterdir() if p.is_dir() and not p.name.startswith(".")]
    text = (run / REPORT).read_text(encoding="utf-8")
    assert "failed" in text and "nope.csv" in text


def test_report_enabled_reads_the_environment_first():
    assert report_enabled(True, Settings()) is True and report_enabled(False, Settings()) is False
    assert report_enabled(True, Settings(report="off")) is False
    assert report_enabled(False, Settings(report=" On ")) is True


def test_runs_compare_writes_differences_metrics_and_overlaid_curves(churn_run, tmp_path):
    project = churn_run.parents[2]
    proc = cli("run", "configs/churn.yaml", "--device", "cpu", "--set", "stages.forest.params.n_estimators=20",
               "--set", f"stages.evaluate.train_rows={TRAIN_SAMPLE}", cwd=project, report="off")   # as churn_run
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "compare.html"
    proc = cli("runs", "compare", churn_run.name, "latest", "--pipeline", "churn", "--output", str(out), cwd=project)
    assert proc.returncode == 0, proc.stderr
    page = Page(out.read_text(encoding="utf-8"))
    assert page.urls == [] and {"runs", "differences", "metrics", "curves"} <= set(page.sections)
    config = next(t for t in page.tables if t and t[0] == ["key", "change", "A", "B"])
    assert config[1:] == [["stages.forest.params.n_estimators", "changed", "300", "20"]]
    a = read_manifest(churn_run).metrics["models"]
    b = read_manifest((project / "runs" / "churn" / "latest").resolve()).metrics["models"]
    metrics = next(t for t in page.tables if t and t[0] == ["model", "metric", "A", "B", "B - A"])
    assert len(metrics) - 1 == sum(len(values) for values in a.values())
    for model, metric, shown_a, shown_b, delta in metrics[1:]:
        assert (shown_a, shown_b) == (number(a[model][metric]), number(b[model][metric]))
        assert delta == number(b[model][metric] - a[model][metric])
    assert len(page.svgs) == 3 and all(count > 20 for count in page.svgs)


@pytest.mark.parametrize("damage", ["deleted", "changed"])
def test_runs_compare_draws_the_curves_it_has_and_names_the_curves_json_it_could_not_use(churn_run, tmp_path,
                                                                                          damage):
    """One run's curves.json gone or edited: the other run's curves are still drawn, the page
    and stderr name the file (as `pipeline report` does) and the footer names only what was read."""
    other = tmp_path / "other" / churn_run.name
    shutil.copytree(churn_run, other)
    (curves,) = [p for p in other.glob("*/curves.json")]
    relative = curves.relative_to(other).as_posix()
    if damage == "deleted":
        curves.unlink()
    else:
        curves.write_text(curves.read_text(encoding="utf-8").replace("0.", "0.9", 5), encoding="utf-8")
    out = tmp_path / "compare.html"
    proc = cli("runs", "compare", str(churn_run), str(other), "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    why = "missing from the run folder" if damage == "deleted" else "changed since the run"
    assert f"{relative}" in proc.stderr and why in proc.stderr and "run B" in proc.stderr, proc.stderr
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    assert len(page.svgs) == 3 and all(count > 20 for count in page.svgs)     # A's curves, still drawn
    curves_section = _section(text, "curves")
    assert "(A)" in curves_section and "(B)" not in curves_section
    assert relative in text and why in text
    footer = text[text.rindex("Built "):]
    assert "run A's curves.json" in footer and "both runs' manifest.json, config.yaml and curves.json" not in footer


# ---------------------------------------------------------------------- in a real browser
def _chromium() -> str:
    """The distribution's Chromium (``make test`` installs it); CI must have it, elsewhere skip."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("no Chromium on PATH: make test installs the distribution's chromium package")
    pytest.skip("no Chromium on PATH (apt-get install chromium)")


def test_the_report_opens_in_chromium_with_no_error_and_no_request(churn_run, tmp_path):
    """Headless Chromium loads the page from disk: no console error, no request but the page
    itself, every figure drawn with a size, and a model switch hides that model everywhere.
    The screenshot goes to $PIPELINE_REPORT_SCREENSHOT when set (README's picture)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    url = (churn_run / REPORT).as_uri()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1800})
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            page.goto(url, wait_until="load")
            assert errors == [] and requests == [url]
            sections = page.locator("section").evaluate_all("nodes => nodes.map(n => n.id)")
            assert {"result", "summary", "stages", "models-evaluate", "training"} <= set(sections)
            sizes = page.locator("figure svg").evaluate_all(
                "nodes => nodes.map(n => { const r = n.getBoundingClientRect(); return [r.width, r.height]; })")
            assert len(sizes) >= 8 and all(w > 100 and h > 100 for w, h in sizes)
            first = page.locator(".switches input").first
            index = first.get_attribute("data-model")
            lines = page.locator(f'[id$="--m{index}"]')
            assert lines.count() >= 6                                  # the model is in every curve
            first.uncheck()
            hidden = lines.evaluate_all("nodes => nodes.map(n => getComputedStyle(n).display)")
            assert set(hidden) == {"none"}
            first.check()
            page.evaluate("document.getElementById('models-evaluate').scrollIntoView()")
            shot = Path(os.environ.get("PIPELINE_REPORT_SCREENSHOT") or tmp_path / "report.png")
            page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()


def test_the_page_opens_with_the_answer_and_ends_with_the_run_details(churn_run):
    """Best model, its metrics beside the others' and the ROC curve first; then models, data,
    explanations, training; how the run ran last, the metadata and versions collapsed."""
    text = (churn_run / REPORT).read_text(encoding="utf-8")
    sections = Page(text).sections
    order = ["result", "models-evaluate", "data", "explanations-evaluate", "training", "stages", "summary"]
    assert [s for s in sections if s in order] == order and sections[0] == "result" and sections[-1] == "summary"
    metrics = json.loads((churn_run / "evaluate" / "metrics.json").read_text())
    result = _section(text, "result")
    best = metrics["best"]
    assert f'id="best-model">{best}<' in result
    rank_by = metrics["rank_by"]
    assert f"{rank_by} <b>{number(metrics['models'][best][rank_by])}</b> on the test split" in result
    assert result.index("<table") < result.index('id="evaluate-roc--m')              # the table, then the ROC
    assert "the positive class is Yes" in result
    assert "evaluate-roc" not in _section(text, "models-evaluate")                    # not drawn twice
    summary = _section(text, "summary")
    assert "<details><summary>Versions</summary>" in summary and summary.count("<details>") == 4
    assert "<details><summary>Settings (the PIPELINE_* environment)</summary>" in summary
    assert "<details>" not in text[:text.index('<section id="summary">')].split('<section id="data">')[0]


def test_times_are_rounded_and_the_worker_column_is_only_for_clusters(churn_run):
    import re

    text = (churn_run / REPORT).read_text(encoding="utf-8")
    manifest = read_manifest(churn_run)
    assert not manifest.cluster
    stages = next(t for t in Page(text).tables if t and t[0][:3] == ["stage", "kind", "status"])
    assert "worker" not in stages[0]
    assert re.findall(r"\d\.\d{4} s\b", text) == []                     # no seconds to four decimals
    assert f"took {duration(manifest.duration_s)}" in text


def test_one_hot_features_are_shown_as_their_column_and_level(churn_run):
    text = (churn_run / REPORT).read_text(encoding="utf-8")
    importance = json.loads((churn_run / "evaluate" / "importance.json").read_text())
    shown = _section(text, "explanations-evaluate")
    one_hot = {f for entry in importance["models"].values() for values in entry.values()
               for f in values.get("mean", values) if "=" in f}
    assert one_hot                                                  # the churn config one-hot encodes 15 columns
    drawn = [f for f in one_hot if f.replace("=", " = ", 1) in shown]
    assert drawn and not [f for f in one_hot if f"{f}<" in shown]  # none drawn as the raw column name
    assert "Contract = Two year" in text or "Contract = Month-to-month" in text


def test_the_first_screen_shows_the_best_model_and_its_test_metrics(churn_run, tmp_path):
    """At 1400x900, without scrolling: the best model's name, its test value of every metric
    (one row per model, the splits as columns) and the top of the ROC curve. The screenshot goes
    to $PIPELINE_REPORT_FIRST_SCREEN when set (docs/report-first-screen.png, the README's)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    metrics = json.loads((churn_run / "evaluate" / "metrics.json").read_text())
    best, width, height = metrics["best"], 1400, 900
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto((churn_run / REPORT).as_uri(), wait_until="load")

            def on_screen(locator) -> bool:
                box = locator.bounding_box()
                return (box is not None and box["width"] > 0 and box["x"] >= 0 and box["y"] >= 0
                        and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height)

            name = page.locator("#best-model")
            assert name.inner_text() == best and on_screen(name)
            names = page.locator("#result table thead tr").first.locator("th").all_inner_texts()[1:]
            row = page.locator("#result table tbody tr").filter(
                has=page.locator("td:first-child", has_text=best)).first
            test_cells = row.locator("td.split-test")
            assert test_cells.all_inner_texts() == [number(metrics["splits"]["test"][best][n]) for n in names]
            assert all(on_screen(test_cells.nth(i)) for i in range(test_cells.count()))
            roc = page.locator('#result figure svg').first
            assert roc.bounding_box()["y"] < height - 150                     # the headline curve starts above the fold
            shot = Path(os.environ.get("PIPELINE_REPORT_FIRST_SCREEN") or tmp_path / "first-screen.png")
            page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()


@pytest.mark.parametrize("folds,shown", [(5, "5"), ([{"roc_auc": 0.8}, {"roc_auc": 0.9}], "2")])
def test_cross_validation_table_takes_the_fold_count_or_the_folds(folds, shown):
    from pipeline.report.page import _cross_validation

    html_text = _cross_validation({"cv": {"xgb": {"mean": {"roc_auc": 0.85}, "std": {"roc_auc": 0.01},
                                                  "folds": folds}}}, "evaluate", ["xgb"])
    (table,) = Page(html_text).tables
    assert table[1] == ["xgb", shown, "0.8500 ± 0.0100"]


def test_the_folds_spread_is_drawn_from_each_folds_metric():
    from pipeline.report.page import _cross_validation

    folds = [{"roc_auc": 0.8}, {"roc_auc": 0.9}, {"roc_auc": 0.7}]
    html_text = _cross_validation({"rank_by": "roc_auc", "cv": {"xgb": {"mean": {"roc_auc": 0.8}, "std": {},
                                                                       "folds": 3, "per_fold": folds}}},
                                  "evaluate", ["logreg", "xgb"])
    page = Page(html_text)
    assert len(page.svgs) == 1 and page.svgs[0] > 20
    assert 'id="evaluate-folds--m1"' in html_text and "roc_auc per fold" in html_text     # xgb is model 1


def test_the_data_and_explanations_sections_show_the_recorded_numbers(churn_run):
    text = (churn_run / REPORT).read_text(encoding="utf-8")
    page = Page(text)
    assert {"data", "explanations-evaluate"} <= set(page.sections)
    profile = json.loads((churn_run / "features" / "profile.json").read_text())
    splits = next(t for t in page.tables if t and t[0] == ["split", "rows", "share", "rows profiled"])
    assert [row[:2] for row in splits[1:]] == [[split, number(n)] for split, n in profile["rows"].items()]
    balance = next(t for t in page.tables if t and t[0] == ["split", "No", "Yes"])      # Churn's own values
    assert balance[1:] == [[split, *(number(n) for n in counts)]
                           for split, counts in profile["balance"]["counts"].items()]
    columns = json.loads((churn_run / "raw" / "columns.json").read_text())
    missing = next(t for t in page.tables if t and t[0] == ["column", "type", "missing", "of rows"])
    assert missing[1:] == [[c["name"], c["dtype"], number(c["missing"]), f"{100 * c['missing'] / columns['rows']:.2f}%"]
                           for c in columns["columns"] if c["missing"]]
    assert missing[1][:3] == ["TotalCharges", "float64", "11"]          # the blanks of the Telco table

    def section(name: str) -> str:
        start = text.index(f'<section id="{name}">')
        return text[start:text.index("</section>", start)]

    metrics = json.loads((churn_run / "evaluate" / "metrics.json").read_text())
    importance = json.loads((churn_run / "evaluate" / "importance.json").read_text())
    assert set(importance["models"]) == set(metrics["models"]) and importance["skipped"] == {}
    kinds = {kind for entry in importance["models"].values() for kind in entry}
    assert kinds == {"permutation", "gain", "shap"}                     # gain and SHAP: the XGBoost model's
    assert section("explanations-evaluate").count("<svg") == len(kinds)
    data = section("data")
    assert data.count("<svg") == 1 + 6                                  # target balance, six features
    assert f"Ranked by {metrics['best']}&#x27;s permutation importance" in data


def test_a_cached_stage_shows_the_time_its_output_took_to_compute(project):
    for _ in range(2):
        proc = cli("run", "configs/churn.yaml", "--until", "features", "--device", "cpu", cwd=project, report="on")
        assert proc.returncode == 0, proc.stderr
    first, second = sorted(p for p in (project / "runs" / "churn").iterdir() if p.name[0].isdigit())
    computed, cached = read_manifest(first).stages, read_manifest(second).stages
    text = (second / REPORT).read_text(encoding="utf-8")
    for name in ("split", "features"):
        assert cached[name].status == "cached" and cached[name].seconds == 0
        assert cached[name].computed_seconds == computed[name].seconds
        assert f"cached (computed in {duration(computed[name].seconds)})" in text        # the timeline
        assert f"<td>0 s (computed in {duration(computed[name].seconds)})</td>" in text   # the table


def test_a_run_whose_ranking_metric_is_undefined_still_gets_its_report(tmp_path):
    """One class in the test rows: ROC AUC and its permutation importances are null. The report
    hook failed on the nulls ("no report written") and `pipeline report` exited 1."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(2)
    n = 200
    x = rng.normal(size=n)
    y = (x + rng.normal(0, 0.5, n) > 0).astype(int)
    y[-40:] = 0                                        # the last rows, the test split by order: one class
    pd.DataFrame({"rid": range(n), "t": range(n), "x": x, "y": y}).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "p.yaml").write_text(
        "name: oneclass\ndevice: cpu\nstages:\n"
        "  raw: {kind: load, path: rows.csv}\n"
        "  split: {kind: split, inputs: [raw], target: y, test: 0.2, order_by: t}\n"
        "  features: {kind: features, inputs: [split], id: rid, ops: [{drop: {columns: [t]}}]}\n"
        "  lr: {kind: train, inputs: [features], model: logistic_regression}\n"
        "  evaluate: {kind: evaluate, inputs: [lr]}\n")
    proc = cli("run", "p.yaml", cwd=tmp_path, report="on")
    assert proc.returncode == 0 and "no report written" not in proc.stderr, proc.stderr
    run_dir = newest_run(tmp_path / "runs" / "oneclass")
    assert (run_dir / REPORT).is_file()
    assert "roc_auc is undefined for every model on the test split (lr); 'best' (lr) is only the first" in proc.stderr
    proc = cli("report", str(run_dir), "--output", str(tmp_path / "again.html"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr
