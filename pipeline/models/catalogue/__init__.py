"""The built-in models, one module per family, registered in this order (the order ``train``
lists them in, the reference documents them in, and ``init`` and ``auto`` break ties by): a
model added by a plugin is one more ``register_model`` call, from its own file.
"""

from pipeline.models.catalogue import catboost, forests, lightgbm, linear, tabular_mlp, xgboost
from pipeline.models.registry import register_model

for _spec in (linear.LOGISTIC_REGRESSION, forests.RANDOM_FOREST, forests.EXTRA_TREES, xgboost.XGBOOST,
              lightgbm.LIGHTGBM, catboost.CATBOOST, linear.RIDGE, linear.LINEAR, tabular_mlp.MLP):
    register_model(_spec)

# The composites register themselves: their formats find their members' formats in the registry.
from pipeline.models.catalogue import composites  # noqa: E402,F401
