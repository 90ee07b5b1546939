"""A run and an alias that is not a link: a run that would move ``latest`` does not start (it
used to succeed, be recorded "succeeded" and promoted, then fail at marking with the champion
unmoved); an alias a stage asks for that cannot be moved is said to be unmoved."""

from __future__ import annotations

import pytest

from pipeline.core.errors import DataError
from pipeline.runs.history import alias_target
from tests.stages.test_promote import project, run


def test_a_plain_file_latest_stops_the_run_before_it_starts(tmp_path):
    config = project(tmp_path)
    pipeline_dir = tmp_path / "runs" / "nightly"
    pipeline_dir.mkdir(parents=True)
    (pipeline_dir / "latest").write_text("20261201T000000.000Z-000001\n")
    with pytest.raises(DataError, match=r"run not started: it would move 'latest'.*is a plain file") as info:
        run(config)
    # What to do for 'latest': move it away; `runs promote` moves only champion.
    assert "the next run of every stage points it again" in str(info.value) and "runs promote" not in str(info.value)
    assert {p.name for p in pipeline_dir.iterdir() if not p.name.startswith(".")} == {"latest"}   # no run folder
    assert (pipeline_dir / "latest").read_text() == "20261201T000000.000Z-000001\n"

    # A run of some stages does not move 'latest', so it runs.
    part = run(config, only=["split"])
    assert part.status == "succeeded"


def test_an_alias_that_cannot_be_moved_is_said_to_be_where_it_was(tmp_path):
    config = project(tmp_path, extra="""\
        mark:
          kind: python
          inputs: [raw]
          function: "promote_helpers:ask_aliases"
          params: {names: [champion]}
        """)
    pipeline_dir = tmp_path / "runs" / "nightly"
    pipeline_dir.mkdir(parents=True)
    (pipeline_dir / "champion").write_text("chosen by hand\n")
    with pytest.raises(DataError, match=r"succeeded, but .*champion' is a plain file.*'champion' still points to "
                                        r"the run before it"):
        run(config, only=["mark"])
    assert (pipeline_dir / "champion").read_text() == "chosen by hand\n"
    assert alias_target(pipeline_dir, "latest") is None
