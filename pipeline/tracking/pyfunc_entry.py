"""MLflow's entry to a pipeline model logged as a pyfunc ("models from code").

MLflow copies this file into each logged model and runs it when the model is loaded
(``mlflow.pyfunc.load_model``, ``mlflow models serve``): it names the class that scores, so
nothing pickled is ever loaded. The model's files are the exported model folder (JSON, and the
model file in the project's own formats), read by ``ExportedModel.load_context``. Nothing in
the package imports this module.
"""

from mlflow.models import set_model

from pipeline.tracking.mlflow_pyfunc import ExportedModel

set_model(ExportedModel())
