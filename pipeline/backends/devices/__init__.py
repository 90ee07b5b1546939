"""The machine's devices: which GPUs there are and which RAPIDS and torch builds can use them
(``detect``: NVML, never a CUDA context), the GPU memory a stage allocates (``device_memory``)
and the meters that sample utilisation, memory and power while it runs (``gpu_usage``).

A subpackage of the backends (the only package that imports GPU libraries): the backends
choose a device from what ``detect`` finds.
"""
