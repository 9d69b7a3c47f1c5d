"""CUDA kernels (NVRTC through CuPy) and the CUDA backend."""
