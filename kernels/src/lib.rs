//! CubeCL kernels of burn-hetero, generic over the CubeCL runtime.
