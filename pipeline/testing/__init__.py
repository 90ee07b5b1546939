"""Conformance checks for extensions: what a plugin's tests call to learn whether its stage
kind, feature op or model honours the contract the runner, the config loader, the cache, ``export`` /
``predict`` and Dask workers rely on (as scikit-learn's ``check_estimator`` does for
estimators).

Each check takes a registered name (or the registration itself), runs on tiny data in about a
second, returns None when the extension conforms and raises ``AssertionError`` naming the
extension and the check it failed otherwise, so it is a one-line test::

    from pipeline.testing import check_hook, check_model, check_op, check_stage_kind

    def test_my_plugin_conforms():
        import my_plugin  # registers its kinds and models
        check_stage_kind("key_join")
        check_model("centroid")
        check_op("clip_outliers")
        check_hook(my_plugin.AuditHook)

Each ``check_*`` runs every check of its contract, whatever fails first, and names each one
that failed. ``parametrize_with_checks`` makes each check a test of its own, with its id (as
scikit-learn's does), from the same checks as values (``op_checks``, ``model_checks``,
``stage_kind_checks``, ``hook_checks``)::

    from pipeline.testing import model_checks, op_checks, parametrize_with_checks

    @parametrize_with_checks(op_checks("clip_outliers"), model_checks("centroid"))
    def test_my_plugin(check):
        check()

``check_stage_kind`` is in ``pipeline.testing.stage_kinds``, ``check_model`` in
``pipeline.testing.models``, ``check_op`` in ``pipeline.testing.ops``, ``check_hook`` in
``pipeline.testing.hooks``; docs/guides/extending.md walks through writing a plugin.
"""

from pipeline.testing.failures import Check, ConformanceFailure, parametrize_with_checks, run_checks
from pipeline.testing.hooks import check_hook, hook_checks
from pipeline.testing.models import check_model, model_checks
from pipeline.testing.ops import check_op, op_checks
from pipeline.testing.stage_kinds import check_stage_kind, stage_kind_checks

__all__ = [
    "Check", "ConformanceFailure", "check_hook", "check_model", "check_op", "check_stage_kind", "hook_checks",
    "model_checks", "op_checks", "parametrize_with_checks", "run_checks", "stage_kind_checks",
]
