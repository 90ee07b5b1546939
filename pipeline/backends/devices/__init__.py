"""The machine's devices: which GPUs there are and which RAPIDS and torch builds can use them
(``detect``: NVML, never a CUDA context), the GPU memory a stage allocates (``device_memory``)
and the meters that sample utilisation, memory and power while it runs (``gpu_usage``).

Below the backends, which choose a device from what ``detect`` finds; with them and
``pipeline.clusters``, the only packages that import GPU libraries.
"""
