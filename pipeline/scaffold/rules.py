"""``init``'s rules: every threshold, the roles a column can take, the models per task."""

from __future__ import annotations


from pipeline.features.column_roles import (
    FREE_TEXT_WORDS,
    LOW_CARDINALITY,
)

# ---------------------------------------------------------------- the rules' thresholds
# (the column roles' own are in pipeline.features.column_roles)
RARE_CODE = 5                  # categorify: values seen fewer times share code 0
INTEGER_CLASSES = 10           # a whole-number target with at most this many values is classes
VALID_FROM_ROWS = 1_000        # a validation split only when there are rows to spare
TEST_SHARE = 0.2               # the split's test share
VALID_SHARE = 0.1              # ... and its validation share, from VALID_FROM_ROWS rows
SEED = 42                      # the config's seed: the split init checks is the one the run makes

ROLES: dict[str, str] = {
    "target": "what the models predict (--target)",
    "identifier": "unique per row (a key, a row number): never a feature; the first one is written beside "
                  "predictions (features.id)",
    "numeric": "numbers: missing values filled with the training median, log1p when skewed, then standardized",
    "categorical": f"text, true/false or a category with at most {LOW_CARDINALITY} values: one 0/1 column per value",
    "high_cardinality": f"text with more than {LOW_CARDINALITY} values: integer codes by frequency (categorify)",
    "date": "dates or date text: calendar parts as numbers (date_parts)",
    "constant": "one value in every row (or none at all): carries no information; dropped",
    "free_text": f"prose (about {FREE_TEXT_WORDS:g}+ words per value, most values different): no op reads text; "
                 "dropped",
    "leak": "likely leak: near-unique id-like values, or the target can be read off it; dropped",
    "nested": "lists or records in each row (Parquet lists, structs, maps): no op reads them; dropped",
}

YES_WORDS = ("yes", "y", "true", "t", "positive", "pos", "1")
# The models per task are the registry entries' (``ModelSpec.init_choices``).
# `init --auto`: one auto stage instead of the features stage and the models above.
AUTO_TIME_LIMIT = "5m"
AUTO_WHY = ("auto: a portfolio of boosted trees, forests, an MLP and a linear model, planned against time_limit "
            "(each member screened on a holdout, those that earn weight bagged) and blended")


