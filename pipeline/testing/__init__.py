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

``check_stage_kind`` is in ``pipeline.testing.stage_kinds``, ``check_model`` in
``pipeline.testing.models``, ``check_op`` in ``pipeline.testing.ops``, ``check_hook`` in
``pipeline.testing.hooks``; docs/guides/extending.md walks through writing a plugin.
"""

from pipeline.testing.hooks import check_hook
from pipeline.testing.models import check_model
from pipeline.testing.ops import check_op
from pipeline.testing.stage_kinds import check_stage_kind

__all__ = ["check_hook", "check_model", "check_op", "check_stage_kind"]
