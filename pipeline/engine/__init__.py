"""Running a pipeline: the runner (plan, cache, record) and the executors that run stages in this
process or on Dask workers.
"""
