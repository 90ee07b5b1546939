"""What the model-training stage kinds (``train``, ``torch``) share: cross-validation over folds,
the hyperparameter search and the trials it runs.
"""
