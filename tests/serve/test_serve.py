"""``pipeline serve``: real servers in subprocesses on 127.0.0.1 (``--port 0``), spoken to over HTTP.

Small runs are made once for the module (two churn runs for the champion swap, a multiclass
and a regression run on the same table, an events-built run); the servers are started side by
side, so their start-up overlaps. Every served score is compared with ``pipeline predict``'s for
the same rows read from CSV (``predict_batch``, the CLI's own function).
"""

from __future__ import annotations

import http.client
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.predict.batch import predict_batch
from pipeline.runs.layout import CHAMPION
from pipeline.runs.store import RunStore
from tests.conftest import DEVICES, copy_project, working_directory

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Two quick models per run (logistic regression / ridge, and a small XGBoost): the others'
# stages are left out by running up to evaluate and export only.
SMALL = ["device=cpu", "stages.xgb.params.n_estimators=10", "stages.evaluate.inputs=[logreg,xgb]",
         "stages.export.inputs=[logreg,xgb]"]
ROWS = 60                        # test rows posted per comparison


@dataclass
class Server:
    """A ``pipeline serve`` subprocess and the address its ready line gave."""

    proc: subprocess.Popen
    port: int = 0
    lines: list[str] = field(default_factory=list)

    def request(self, method: str, path: str, body: bytes | None = None, *,
                content_type: str = "application/json", timeout: float = 30) -> tuple[int, bytes, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Content-Type": content_type} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read(), dict(response.getheaders())
        finally:
            conn.close()

    def post_json(self, payload, path: str = "/predict") -> tuple[int, dict]:
        status, body, _ = self.request("POST", path, json.dumps(payload).encode())
        return status, json.loads(body)

    def get_json(self, path: str) -> tuple[int, dict]:
        status, body, _ = self.request("GET", path)
        return status, json.loads(body)

    def stderr(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def start(project: Path, *args: str) -> Server:
    # A process: a server is a process the tests speak to over HTTP.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "serve", *args, "--port", "0",
                             "--runs-dir", str(project / "runs")],
                            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    server = Server(proc)
    threading.Thread(target=lambda: server.lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    return server


def wait_ready(server: Server, timeout: float = 240) -> Server:
    """Read the ready line (``serving <run> model <name> on http://127.0.0.1:PORT``)."""
    deadline = time.monotonic() + timeout
    line = server.proc.stdout.readline()
    assert line.startswith("serving "), f"no ready line: {line!r}\n{server.stderr()}"
    assert " on http://127.0.0.1:" in line
    server.port = int(line.rsplit(":", 1)[1])
    while time.monotonic() < deadline:
        if server.request("GET", "/ready")[0] == 200:
            return server
        time.sleep(0.05)
    raise AssertionError("not ready")


# ---------------------------------------------------------------- runs and servers
@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The runs (about a minute on two cores) and the servers, started together."""
    from pipeline import run_pipeline
    from tests.predict.test_as_of import CONFIG, write_events

    project = copy_project(tmp_path_factory.mktemp("serve"))
    until = ["evaluate", "export"]
    with working_directory(project):
        churn_a = run_pipeline("configs/churn.yaml", runs_dir="runs", overrides=SMALL, until=until).run_dir
        churn_b = run_pipeline("configs/churn.yaml", runs_dir="runs", until=until,
                               overrides=[*SMALL, "seed=7", "stages.logreg.params.C=0.05"]).run_dir
        contract = run_pipeline("configs/telco_contract.yaml", runs_dir="runs", overrides=SMALL, until=until).run_dir
        charges = run_pipeline("configs/telco_charges.yaml", runs_dir="runs", until=until,
                               overrides=[o.replace("logreg", "ridge") for o in SMALL]).run_dir
        write_events(project)
        (project / "events.yaml").write_text(CONFIG)
        events = run_pipeline("events.yaml", runs_dir="runs").run_dir
    store = RunStore(project / "runs", "churn")
    store.mark_alias(churn_a, CHAMPION)
    servers = {
        "champion": start(project, "champion", "--pipeline", "churn", "--reload-seconds", "0.3",
                          "--max-wait-ms", "20", "--drift-window", "50"),
        # By folder: a run of some stages (until) leaves `latest` where it was.
        "multiclass": start(project, str(contract)),
        "regression": start(project, str(charges), "--no-batching"),
        "events": start(project, "latest", "--pipeline", "events_predict"),
        "drain": start(project, str(churn_a), "--max-wait-ms", "1500", "--max-batch-rows", "100000"),
    }
    try:
        for server in servers.values():
            wait_ready(server)
        yield {"project": project, "store": store, "a": Path(churn_a), "b": Path(churn_b),
               "runs": {"multiclass": Path(contract), "regression": Path(charges), "events": Path(events)},
               "servers": servers}
    finally:
        for server in servers.values():
            server.stop()


def csv_rows(project: Path, n: int = ROWS, seed: int = 0) -> pd.DataFrame:
    """``n`` rows of the Telco table as a CSV reader reads them (blanks missing)."""
    table = pd.read_csv(project / "data" / "telco_customer_churn.csv", na_values=[" "])
    return table.sample(n, random_state=seed).reset_index(drop=True)


def records(frame: pd.DataFrame, fields: list[str]) -> list[dict]:
    """JSON records of ``frame``'s ``fields``: NaN as null, NumPy scalars as Python ones."""
    out = []
    for row in frame[fields].to_dict("records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v.item() if hasattr(v, "item") else v)
                    for k, v in row.items()})
    return out


def fields_of(server: Server) -> list[str]:
    status, meta = server.get_json("/metadata")
    assert status == 200
    return [*meta["input_columns"], *([meta["id_column"]] if meta["id_column"] not in meta["input_columns"] else [])]


def predicted(run_dir: Path, frame: pd.DataFrame, tmp_path: Path, **options) -> pd.DataFrame:
    """``pipeline predict``'s table for ``frame`` written as CSV (the CLI's function)."""
    source = tmp_path / "rows.csv"
    frame.to_csv(source, index=False)
    out = tmp_path / "scores.parquet"
    predict_batch(run_dir, source, out, **options)
    return pd.read_parquet(out)


def assert_same(served: pd.DataFrame, expected: pd.DataFrame) -> None:
    expected = expected.drop(columns=["model"])
    assert list(served.columns) == list(expected.columns)
    for column in expected.columns:
        if pd.api.types.is_float_dtype(expected[column]):
            np.testing.assert_allclose(served[column].to_numpy(float), expected[column].to_numpy(float), atol=1e-6,
                                       rtol=0)
        else:
            assert served[column].astype(str).tolist() == expected[column].astype(str).tolist(), column


# ---------------------------------------------------------------- the scores equal predict's
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_predict_equals_pipeline_predict_in_both_orientations(made, task, tmp_path):
    server = made["servers"]["champion" if task == "binary" else task]
    run_dir = made["a"] if task == "binary" else made["runs"][task]
    frame = csv_rows(made["project"], seed={"binary": 0, "multiclass": 1, "regression": 2}[task])
    expected = predicted(run_dir, frame, tmp_path)
    fields = fields_of(server)
    rows = records(frame, fields)

    status, body = server.post_json({"rows": rows})
    assert status == 200, body
    assert (body["run_id"], body["task"], body["rows"]) == (run_dir.name, task, ROWS)
    assert body["model"] == expected["model"].iloc[0]
    assert_same(pd.DataFrame(body["predictions"]), expected)

    columns = {name: [row[name] for row in rows] for name in fields}
    status, body = server.post_json({"columns": columns})
    assert status == 200, body
    assert isinstance(body["predictions"], dict)
    assert_same(pd.DataFrame(body["predictions"]), expected)


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_batch_endpoint_answers_in_the_requests_format(made, fmt, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    server = made["servers"]["multiclass"]
    frame = csv_rows(made["project"], seed=3)
    expected = predicted(made["runs"]["multiclass"], frame, tmp_path)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    sink = io.BytesIO()
    if fmt == "arrow":
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        content_type = "application/vnd.apache.arrow.stream"
    else:
        pq.write_table(table, sink)
        content_type = "application/vnd.apache.parquet"
    status, body, headers = server.request("POST", "/predict/batch", sink.getvalue(), content_type=content_type)
    assert status == 200, body
    assert headers["content-type"] == content_type
    served = (pa.ipc.open_stream(io.BytesIO(body)).read_all() if fmt == "arrow"
              else pq.read_table(io.BytesIO(body))).to_pandas()
    assert served["model"].tolist() == expected["model"].tolist()
    assert_same(served.drop(columns=["model"]), expected)


def test_batch_endpoint_reads_a_csv_body_in_the_requests_dialect_as_predict_reads_a_file(made, tmp_path):
    server = made["servers"]["multiclass"]
    frame = csv_rows(made["project"], seed=4)
    frame.loc[0, "PaymentMethod"] = "Chèque électronique"          # a level never seen, in Latin-1
    expected = predicted(made["runs"]["multiclass"], frame, tmp_path)
    body = frame.to_csv(index=False, sep=";", decimal=",").encode("latin-1")
    status, answer, headers = server.request("POST", "/predict/batch?sep=%3B&decimal=%2C", body,
                                             content_type="text/csv; charset=latin-1")
    assert status == 200, answer
    assert headers["content-type"] == "text/csv; charset=utf-8"
    served = pd.read_csv(io.BytesIO(answer), sep=";", decimal=",")     # answered in the request's dialect
    assert served["model"].tolist() == expected["model"].tolist()
    assert_same(served.drop(columns=["model"]), expected)
    # The default dialect (the run's: commas) on a ;-separated body names the separator to set.
    status, answer, _ = server.request("POST", "/predict/batch", body, content_type="text/csv; charset=latin-1")
    assert status == 422 and "';'" in json.loads(answer)["detail"], answer
    assert "sep=';' as a query parameter" in json.loads(answer)["detail"]     # not the load stage's key
    status, answer, _ = server.request("POST", "/predict/batch?sep=%3B%3B", body, content_type="text/csv")
    assert status == 400 and json.loads(answer)["detail"].startswith("query parameter sep must be one character")
    status, answer, _ = server.request("POST", "/predict/batch?delimiter=%3B", body, content_type="text/csv")
    assert status == 400 and "delimiter" in json.loads(answer)["detail"]
    header_only = frame.head(0).to_csv(index=False).encode()
    status, answer, _ = server.request("POST", "/predict/batch", header_only, content_type="text/csv")
    assert status == 422 and "empty batch" in json.loads(answer)["detail"]


def test_an_events_built_model_scores_rebuilt_feature_rows_as_predict_as_of(made, tmp_path):
    """Serving takes the model's input columns (the rows as ``--as-of`` rebuilds them); the
    scores of those rows equal ``pipeline predict --as-of``'s."""
    from pipeline.backends import get_backend
    from pipeline.predict.batch import input_files, open_model, rebuilt_input

    from tests.predict.test_as_of import CUTOFF

    project, run_dir, server = made["project"], made["runs"]["events"], made["servers"]["events"]
    with working_directory(project):
        out = tmp_path / "scores.parquet"
        predict_batch(run_dir, project / "events.csv", out, as_of=CUTOFF, device="cpu")
        expected = pd.read_parquet(out)
        opened = open_model(run_dir, device="cpu")
        frame = rebuilt_input(run_dir, opened.name, input_files(project / "events.csv"), CUTOFF, opened.saved,
                              get_backend("cpu"))
    status, body = server.post_json({"rows": records(frame, fields_of(server))})
    assert status == 200, body
    assert_same(pd.DataFrame(body["predictions"]), expected)


# ---------------------------------------------------------------- bad requests
def malformed(good: dict, fields: dict[str, str]) -> list[tuple[bytes, str, str]]:
    """About a hundred bad requests: (body, content type, a word the message must name)."""
    cases: list[tuple[bytes, str, str]] = []
    text = [f for f, kind in fields.items() if kind == "text"]
    numbers = [f for f, kind in fields.items() if kind in ("number", "integer")]

    def with_row(row: dict, word: str) -> None:
        cases.append((json.dumps({"rows": [good, row]}).encode(), "application/json", word))

    for name in numbers:
        with_row({**good, name: "12"}, name)
        with_row({**good, name: True}, name)
        with_row({**good, name: {"value": 1}}, name)
        cases.append((json.dumps({"rows": [good, {**good, name: float("nan")}]}).encode(), "application/json", name))
        cases.append((json.dumps({"rows": [good, {**good, name: float("inf")}]}).encode(), "application/json", name))
    for name in text:
        with_row({**good, name: 3}, name)
        with_row({**good, name: ["a"]}, name)
        with_row({k: v for k, v in good.items() if k != name}, name)
        with_row({**good, name + "x": "y"}, name + "x")
    ids = [f for f, kind in fields.items() if kind == "id"]
    for name in ids:
        with_row({**good, name: 1.5}, name)
        with_row({**good, name: [1]}, name)
    for name in list(fields)[:6]:
        columns = {k: [v, v] for k, v in good.items()}
        columns[name] = [columns[name][0]]
        cases.append((json.dumps({"columns": columns}).encode(), "application/json", name))
    cases += [
        (b'{"rows": []}', "application/json", "empty"),
        (json.dumps({"columns": {k: [] for k in good}}).encode(), "application/json", "empty"),
        (b"not json", "application/json", "JSON"),
        (b'{"rows": [', "application/json", "JSON"),
        (b"[1, 2]", "application/json", "rows"),
        (b'{"rows": [1]}', "application/json", "rows[0]"),
        (b'{}', "application/json", "rows"),
        (json.dumps(good).encode(), "application/json", "the body is one record"),   # not "extra inputs"
        (json.dumps({"rows": [good], "columns": {}}).encode(), "application/json", "columns"),
        (json.dumps({"rows": [good], "extra": 1}).encode(), "application/json", "extra"),
        (json.dumps({"rows": [good]}).encode(), "text/csv", "application/json"),
        (b"x" * (17 * 1024 * 1024), "application/json", "limit"),
        (b"garbage", "application/vnd.apache.arrow.stream", "Arrow"),
        (b"", "application/vnd.apache.arrow.stream", "empty"),
        (b"PAR1garbagePAR1", "application/vnd.apache.parquet", "Parquet"),
        (b"a,b\n1,2\n", "text/csv", "missing column"),
        (b"a,b\n1,2\n", "application/xml", "text/csv"),
    ]
    return cases


def test_a_hundred_malformed_requests_each_get_a_4xx_naming_the_field(made):
    server = made["servers"]["champion"]
    status, meta = server.get_json("/metadata")
    kinds = {name: spec["kind"] for name, spec in meta["input_columns"].items()}
    fields = {**kinds, meta["id_column"]: "id"}
    good = records(csv_rows(made["project"], n=1, seed=5), list(fields))[0]
    cases = malformed(good, fields)
    assert len(cases) >= 100
    for body, content_type, word in cases:
        path = "/predict/batch" if "arrow" in content_type or "parquet" in content_type else "/predict"
        if content_type in ("text/csv", "application/xml") and word != "application/json":
            path = "/predict/batch"
        status, answer, _ = server.request("POST", path, body, content_type=content_type)
        assert 400 <= status < 500, (status, answer[:300], body[:200])
        detail = json.loads(answer)["detail"]
        assert word.lower() in detail.lower(), (word, detail)
    status, answer = server.post_json({"rows": [good]})
    assert status == 200, answer
    assert "Traceback" not in server.stderr() and " 500" not in server.stderr()
    metrics = server.request("GET", "/metrics")[1].decode()
    assert 'status="500"' not in metrics


def test_a_missing_value_is_null_where_predict_reads_a_blank(made, tmp_path):
    server = made["servers"]["champion"]
    frame = csv_rows(made["project"], n=5, seed=6)
    frame.loc[[1, 3], "TotalCharges"] = np.nan
    expected = predicted(made["a"], frame, tmp_path)
    status, body = server.post_json({"rows": records(frame, fields_of(server))})
    assert status == 200, body
    assert_same(pd.DataFrame(body["predictions"]), expected)


def test_whole_numbers_past_int64_score_as_predict_scores_them(made, tmp_path):
    """An integer column's values past int64 (1e19, 2**63, +-1e30) were cast to int64 and
    wrapped to -2**63: a 200 with the score of that number. predict reads them as numbers; the
    served scores equal its, sent as JSON floats or as integer literals, in both orientations."""
    server = made["servers"]["champion"]
    frame = csv_rows(made["project"], n=6, seed=12)
    frame["tenure"] = frame["tenure"].astype("float64")
    frame.loc[:3, "tenure"] = [1e19, 2.0 ** 63, 1e30, -1e30]
    expected = predicted(made["a"], frame, tmp_path)
    fields = fields_of(server)
    rows = records(frame, fields)
    literals = [{**row, "tenure": int(row["tenure"])} for row in rows]          # 10000000000000000000, ...
    assert str(10 ** 19) in json.dumps(literals)
    for body in (rows, literals):
        status, answer = server.post_json({"rows": body})
        assert status == 200, answer
        assert_same(pd.DataFrame(answer["predictions"]), expected)
        status, answer = server.post_json({"columns": {name: [row[name] for row in body] for name in fields}})
        assert status == 200, answer
        assert_same(pd.DataFrame(answer["predictions"]), expected)
    for row, score in zip(literals[:4], expected["score"]):                     # one row alone: the few-rows path
        status, answer = server.post_json({"rows": [row]})
        assert status == 200 and answer["predictions"][0]["score"] == pytest.approx(score, abs=1e-6), answer


def test_a_value_the_features_refuse_is_a_422_naming_its_row_as_validation_does(made):
    """A null where no fill_missing op fills the column, or a number the ops take past the
    float32 range, passes the schema and fails in the features: the 422 names ``rows[3].tenure``
    (0-based, as a validation error does) and lists it under ``errors``."""
    server = made["servers"]["champion"]
    fields = fields_of(server)
    rows = records(csv_rows(made["project"], n=5, seed=13), fields)
    for name, value in (("tenure", None), ("MonthlyCharges", 1e308)):
        bad = [dict(row) for row in rows]
        bad[3][name] = value
        status, body = server.post_json({"rows": bad})
        assert status == 422, body
        assert body["detail"].startswith(f"rows[3].{name}: field '{name}'"), body
        assert "row 4" not in body["detail"]
        assert body["errors"][0]["loc"] == ["rows", 3, name] and body["errors"][0]["type"] == "value_error", body
        status, body = server.post_json({"columns": {field: [row[field] for row in bad] for field in fields}})
        assert status == 422 and body["detail"].startswith(f"columns.{name}[3]: "), body
        assert body["errors"][0]["loc"] == ["columns", name, 3]
    assert server.post_json({"rows": rows})[0] == 200                           # still serving


def test_a_request_the_model_cannot_score_fails_alone_not_its_batch(made):
    """``tenure`` has no fill_missing: a null there passes the schema (null is a missing value) but
    the features refuse it, as predict refuses a blank; batched with good requests, only it fails."""
    server = made["servers"]["champion"]
    good = records(csv_rows(made["project"], n=1, seed=10), fields_of(server))[0]
    bad = {**good, "tenure": None}
    bodies = [{"rows": [bad if i == 5 else good]} for i in range(12)]
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(server.post_json, bodies))
    assert [status for status, _ in answers] == [422 if i == 5 else 200 for i in range(12)]
    assert "tenure" in answers[5][1]["detail"]


def test_an_arrow_body_with_a_mistyped_column_is_a_422_naming_it(made):
    import pyarrow as pa

    server = made["servers"]["multiclass"]
    frame = csv_rows(made["project"], n=4, seed=11)
    frame["tenure"] = frame["tenure"].astype(str)
    sink = io.BytesIO()
    table = pa.Table.from_pandas(frame, preserve_index=False)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    status, body, _ = server.request("POST", "/predict/batch", sink.getvalue(),
                                     content_type="application/vnd.apache.arrow.stream")
    assert status == 422 and "tenure" in json.loads(body)["detail"]
    status, body, _ = server.request("POST", "/predict/batch", sink.getvalue().replace(b"tenure", b"tenurX"),
                                     content_type="application/vnd.apache.arrow.stream")
    assert status == 422 and "tenure" in json.loads(body)["detail"]


# ---------------------------------------------------------------- health, metadata, metrics
def test_health_ready_metadata_and_the_openapi_document(made):
    server = made["servers"]["multiclass"]
    assert server.get_json("/health") == (200, {"status": "ok"})
    assert server.get_json("/ready")[0] == 200
    status, meta = server.get_json("/metadata")
    assert status == 200
    assert meta["run_id"] == made["runs"]["multiclass"].name and meta["task"] == "multiclass"
    assert meta["threshold"] is None and meta["id_column"] == "customerID"
    assert meta["input_columns"]["tenure"]["kind"] == "integer"
    assert meta["input_columns"]["gender"]["kind"] == "text"
    assert meta["output_columns"][0] == "customerID" and meta["output_columns"][-1] == "prediction"
    assert meta["batching"] == {"max_batch_rows": 1024, "max_wait_ms": 2.0, "enabled": True}
    assert "pandas" in meta["versions"] and meta["metrics"]
    status, document = server.get_json("/openapi.json")
    assert status == 200
    schema = document["components"]["schemas"]
    row = next(s for s in schema.values() if "properties" in s and "tenure" in s["properties"])
    assert set(row["required"]) >= {"tenure", "gender", "customerID"}


def test_metrics_count_requests_and_show_batches_of_several_rows(made):
    server = made["servers"]["champion"]
    good = records(csv_rows(made["project"], n=1, seed=7), fields_of(server))[0]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: server.post_json({"rows": [good]}), range(64)))
    assert all(status == 200 for status, _ in answers)
    text = server.request("GET", "/metrics")[1].decode()
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert samples['pipeline_serve_requests_total{endpoint="/predict",status="200"}'] >= 64
    calls = samples["pipeline_serve_batch_rows_count"]
    rows = samples["pipeline_serve_batch_rows_sum"]
    assert rows / calls > 1                                    # some calls scored several requests
    assert samples['pipeline_serve_batch_rows_bucket{le="1.0"}'] < calls
    assert samples["pipeline_serve_drift_windows_total"] >= 1   # windows of 50 rows
    assert any(key.startswith("pipeline_serve_drift_psi{feature=") for key in samples)
    assert 'pipeline_serve_request_seconds_bucket{endpoint="/predict"' in text


def test_a_client_that_hangs_up_mid_body_is_counted_not_logged_as_an_error(made):
    import socket

    server = made["servers"]["champion"]
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 5000\r\n\r\n{\"rows\": [")
        time.sleep(0.2)                     # the server reads the half body, then the hang-up
    deadline = time.monotonic() + 20
    while True:
        text = server.request("GET", "/metrics")[1].decode()
        counted = [line for line in text.splitlines()
                   if line.startswith('pipeline_serve_client_disconnects_total{endpoint="/predict"}')]
        if counted and float(counted[0].rsplit(" ", 1)[1]) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert counted and float(counted[0].rsplit(" ", 1)[1]) >= 2, text
    assert "ClientDisconnect" not in server.stderr() and "Traceback" not in server.stderr()
    assert server.post_json({"rows": []})[0] in (200, 422)           # still serving


# ---------------------------------------------------------------- champion swap, drain
def test_the_champion_swaps_under_load_without_dropping_a_request(made):
    server, store = made["servers"]["champion"], made["store"]
    good = records(csv_rows(made["project"], n=3, seed=8), fields_of(server))
    stop, results = threading.Event(), []

    def client() -> None:
        while not stop.is_set():
            results.append(server.post_json({"rows": good}))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    store.mark_alias(made["b"], CHAMPION)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.get_json("/metadata")[1]["run_id"] != made["b"].name:
        time.sleep(0.1)
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert server.get_json("/metadata")[1]["run_id"] == made["b"].name
    assert results and all(status == 200 for status, _ in results), [r for r in results if r[0] != 200][:3]
    runs = {body["run_id"] for _, body in results}
    assert runs == {made["a"].name, made["b"].name}
    assert "swap" in server.request("GET", "/metrics")[1].decode()


@pytest.mark.parametrize("run", ["a", "multiclass", "regression", "events"])
def test_few_rows_score_as_the_frame_path_for_every_exported_model_and_task(made, run):
    """A batch of a few rows is scored on NumPy columns (``backends.few_rows``): for every model
    each run exported (linear, forest, XGBoost, MLP; binary, multiclass, regression, event
    features), its table equals the frame path's exactly, with missing text and an unseen level."""
    from pipeline.backends.few_rows import ColumnFrame
    from pipeline.serve.served_model import load_served_model

    run_dir = made["a"] if run == "a" else made["runs"][run]
    names = sorted(p.name for p in (run_dir / "export" / "models").iterdir() if p.is_dir())
    compared = []
    for name in names:
        served = load_served_model(run_dir, model=name, warm=False)
        rng = np.random.default_rng(len(name))
        columns = {}
        for field_name, kind in served.fields.items():
            values = [None, None, None, None, None]
            if kind in ("number", "integer"):
                values = [float(v) for v in rng.integers(0, 90, 5)]
                values[1] = 0.5 if kind == "number" else 0.0
            elif kind == "text":
                values = ["Yes", "No", "never-seen-level", None, "Month-to-month"]
            elif kind == "boolean":
                values = [True, False, None, True, False]
            elif kind == "id":
                values = [f"id-{i}" for i in range(5)]
            columns[field_name] = values
        try:
            few, _ = served.score_frame(served.few_rows_frame(columns))
        except Exception as exc:  # noqa: BLE001 - then the frame path must refuse the rows the same way
            with pytest.raises(type(exc), match=re.escape(str(exc)[:60])):
                served.score_frame(served.frame_of(columns))
            continue
        assert isinstance(served.few_rows_frame(columns), ColumnFrame)
        frame, _ = served.score_frame(served.frame_of(columns))
        pd.testing.assert_frame_equal(few, frame, check_exact=True, obj=f"{run} {name}")
        compared.append(name)
    assert compared == names          # every model scored the rows (none refused them on both paths)


def test_a_device_model_scores_a_few_rows_on_its_host_copy_and_more_on_the_device(made, monkeypatch):
    """Through the backend seam, on the CPU: a stand-in device backend (the CPU backend under
    the GPU's name) serves the model; a batch up to DEVICE_FROM_ROWS rows is scored on the host
    copy's NumPy columns, a larger one on the "device", with the same scores, and /metrics-style
    counts say which path each call took."""
    import dataclasses

    from pipeline.backends.cpu import CpuBackend
    from pipeline.serve import served_model as sm
    from pipeline.serve.prometheus_metrics import ServeMetrics

    class DeviceStandIn(CpuBackend):
        name = "gpu"

    served = sm.load_served_model(made["a"], model="xgb", warm=False)
    assert served.host is None and sm.host_copy(served.opened) is None           # a CPU model needs no copy
    device = dataclasses.replace(served.opened, backend=DeviceStandIn())
    host = sm.host_copy(device)
    assert host is not None and host.backend.name == "cpu" and host.name == "xgb"
    on_device = dataclasses.replace(served, opened=device, host=host)
    monkeypatch.setattr(sm, "DEVICE_FROM_ROWS", 8)
    rows = records(csv_rows(made["project"], n=20, seed=4), list(served.fields))
    columns = {name: [row[name] for row in rows] for name in served.fields}
    metrics = ServeMetrics()
    small, _ = on_device.score_merged({k: v[:3] for k, v in columns.items()}, 3)
    assert on_device.last_path == "few_rows"
    metrics.observe_batch(on_device, 3, None, 0.0)
    large, _ = on_device.score_merged(columns, 20)
    assert on_device.last_path == "device"
    metrics.observe_batch(on_device, 20, None, 0.0)
    assert served.path_for(20) == "few_rows" and served.path_for(5000) == "frame"
    cpu, _ = served.score_merged(columns, 20)
    assert small["score"].tolist() == large["score"][:3].tolist()
    assert large["score"].tolist() == cpu["score"].tolist() and large["prediction"].tolist() == cpu["prediction"].tolist()
    text = metrics.render().decode()
    assert 'pipeline_serve_batches_total{path="few_rows"} 1.0' in text
    assert 'pipeline_serve_batches_total{path="device"} 1.0' in text


def test_the_few_rows_path_gives_way_to_pandas_only_after_repeated_misses_not_bad_rows(made, monkeypatch, caplog):
    """A batch the few-rows path cannot run is scored by pandas; the model stops trying the path
    after FEW_ROWS_MISSES such batches, with one warning. Rows that pandas refuses too are the
    request's fault: they raise the same error and count as no miss."""
    from pipeline.core.errors import DataError
    from pipeline.serve import served_model as sm

    served = sm.load_served_model(made["a"], model="xgb", warm=False)
    rows = records(csv_rows(made["project"], n=4, seed=5), list(served.fields))
    columns = {name: [row[name] for row in rows] for name in served.fields}
    bad = {**columns, "tenure": [None, *columns["tenure"][1:]]}        # not filled by any op: refused
    with pytest.raises(DataError, match="tenure"):
        served.score_merged(bad, 4)
    assert served.few_rows_misses == 0 and served.path_for(4) == "few_rows"
    expected, _ = served.score_merged(columns, 4)

    def unable(_columns):
        raise TypeError("a plugin op called a pandas method the NumPy columns lack")

    monkeypatch.setattr(served, "few_rows_frame", unable)
    with caplog.at_level("WARNING", logger="pipeline"):
        for miss in range(1, sm.FEW_ROWS_MISSES + 1):
            got, _ = served.score_merged(columns, 4)
            assert got["score"].tolist() == expected["score"].tolist() and served.few_rows_misses == miss
    assert served.path_for(4) == "frame"
    assert sum("from now on" in r.message for r in caplog.records) == 1


def test_sigterm_answers_the_request_in_flight_and_exits_0(made):
    """A request whose body is half sent when SIGTERM comes is read to its end, answered, and
    the server exits 0 (a lone request is no longer held for a batch, so the body keeps it in
    flight)."""
    server = made["servers"]["drain"]
    body = json.dumps({"rows": records(csv_rows(made["project"], n=2, seed=9), fields_of(server))}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest("POST", "/predict")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        conn.send(body[:len(body) // 2])
        time.sleep(0.5)                                   # the handler is reading the body
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert server.proc.poll() is None                 # still there for the request in flight
        conn.send(body[len(body) // 2:])
        response = conn.getresponse()
        status, answer = response.status, json.loads(response.read())
    finally:
        conn.close()
    assert status == 200 and answer["rows"] == 2
    assert server.proc.wait(timeout=60) == 0, server.stderr()


def test_a_client_that_stalls_mid_body_does_not_hold_the_stop(made):
    """A body declared 1,000 bytes that sent 9 held SIGTERM's stop for the whole 30 s grace
    (a pod's grace period), then got a 500 logged with a CancelledError traceback."""
    server = wait_ready(start(made["project"], str(made["a"])))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest("POST", "/predict")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", "1000")
        conn.endheaders()
        conn.send(b'{"rows": [')
        time.sleep(0.5)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        response = conn.getresponse()
        status, answer = response.status, json.loads(response.read())
    finally:
        conn.close()
    assert status == 503 and "the server is stopping" in answer["detail"], answer
    assert server.proc.wait(timeout=60) == 0
    assert time.monotonic() - started < 20
    assert "Traceback" not in server.stderr() and "CancelledError" not in server.stderr()


def test_without_the_serve_extra_the_message_says_how_to_install_it(tmp_path):
    """A missing library is exit 5 with the pip line (the interpreter made not to find fastapi)."""
    code = ("import importlib.util, sys; real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda n, *a: None if n == 'fastapi' else real(n, *a)\n"
            "from pipeline.cli.app import main; sys.argv = ['pipeline', 'serve', 'latest']; main()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 5, proc.stderr
    assert "pip install 'pipeline[serve]'" in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif("gpu" not in DEVICES, reason="no usable GPU here")
def test_on_the_gpu_served_scores_equal_predicts_on_the_gpu(made, tmp_path):
    """The batch's frame goes to the device once per model call; scores as predict's on the GPU."""
    server = wait_ready(start(made["project"], str(made["a"]), "--device", "gpu"))
    try:
        frame = csv_rows(made["project"], seed=12)
        expected = predicted(made["a"], frame, tmp_path, device="gpu")
        assert server.get_json("/metadata")[1]["device"] == "gpu"
        status, body = server.post_json({"rows": records(frame, fields_of(server))})
        assert status == 200, body
        assert_same(pd.DataFrame(body["predictions"]), expected)
    finally:
        assert server.stop() == 0


def test_a_port_in_use_is_a_usage_error_before_the_model_loads(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "pipeline", "serve", "latest", "--port", str(port)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert f"127.0.0.1:{port}" in proc.stderr and "--port" in proc.stderr


def test_a_host_that_is_not_this_machines_is_named_as_such():
    """--host with an address of no interface here said "another server may be using the
    port". 192.0.2.1 is TEST-NET-1 (RFC 5737, documentation only): bound, never reached."""
    from pipeline.core.errors import UsageError
    from pipeline.serve.server import bind

    with pytest.raises(UsageError, match=r"192\.0\.2\.1 is not an address of this machine; give one of its own "
                                         r"with --host"):
        bind("192.0.2.1", 0)
