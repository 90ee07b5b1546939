"""Training and scoring on partitioned data across a Dask cluster (xgboost.dask, cuml.dask,
external-memory XGBoost), and what a task on a worker reports back to the run."""
