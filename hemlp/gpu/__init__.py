"""hemlp's CUDA backend: RNS-CKKS operations and the exact modular GEMM on an NVIDIA GPU, bit for bit the CPU
core's results (docs/gpu.md).

    from hemlp import gpu
    gpu.device_info()            # {'available': ..., 'reason': ...}: no device work, no error
    dev = gpu.CudaEvaluator(ctx) # DeviceError naming the fix when there is no device or the library is not built

The library is built apart from the CPU core (scripts/build_cuda.sh, `make cuda`): the CPU build never needs nvcc.
Importing this package loads neither the CPU core nor the CUDA library.
"""
from hemlp.gpu.boot_steps import DeviceEncapsulationKeys, dense_to_sparse, mod_raise
from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext, DeviceKey, DeviceSpec, GemmPlan
from hemlp.gpu.library import device_info
from hemlp.gpu.lintrans import DeviceLinearTransform
from hemlp.gpu.polyeval import evaluate_polynomial

__all__ = ["CudaEvaluator", "DeviceCiphertext", "DeviceKey", "DeviceSpec", "GemmPlan", "DeviceLinearTransform",
           "DeviceEncapsulationKeys", "dense_to_sparse", "mod_raise", "evaluate_polynomial", "device_info"]
