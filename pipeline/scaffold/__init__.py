"""``pipeline init``: a commented, runnable config for a table nobody has described yet.

From a bounded sample of the file (``pipeline.scaffold.sampling``) each column gets one role
(``ROLES``), built on its basic type (``pipeline.features.column_types``, the rule column
selectors use), the target gives the task, each role gets feature ops from the op registry and
the task a few models from the model registry. The YAML is written by hand, not dumped, so
every choice carries a comment that says why; before anything is written the text goes
through the project's own config loader and its feature ops are fitted on the sample, so a
config that ``init`` writes validates and its features fit.

Rules are deliberately simple and stated in docs/guides/init.md; every threshold is a
module constant in ``pipeline.scaffold.rules``. They read a sample, so a rule can misread a column whose rare values
the sample missed: the comments say what was seen, for the user to correct.

Its modules, by job: ``sampling`` (the bounded reader), ``markers`` (missing-value markers),
``task_choice`` (the task from the target), ``ops_and_models`` (ops for the roles, models for
the task), ``yaml_text`` (the commented YAML) and ``draft`` (all of it, checked before it is
written); ``rules`` holds the thresholds.
"""

from pipeline.scaffold.draft import Scaffold, draft_config
from pipeline.scaffold.ops_and_models import pipeline_name
from pipeline.scaffold.sampling import read_sample
from pipeline.scaffold.yaml_text import scalar

__all__ = ["Scaffold", "draft_config", "pipeline_name", "read_sample", "scalar"]
