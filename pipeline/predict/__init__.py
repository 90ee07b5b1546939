"""Batch scoring with a model a run exported (``pipeline predict`` as a library): in memory or
partition by partition, and the rebuild of the model's input table from raw events.

    from pipeline.predict import predict_batch
    result = predict_batch("latest", "new_customers.csv", "scores.csv", pipeline="churn")
"""

from pipeline.predict.batch import PredictResult, predict_batch
from pipeline.predict.predict_options import PredictOptions

__all__ = ["PredictOptions", "PredictResult", "predict_batch"]
