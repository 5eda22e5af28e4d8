// CHORUS_HD marks code that compiles both for the device and for the host: the device kernels
// and their CPU-run twins in tests share it. Plain C++ without the CUDA headers.
#pragma once

#ifndef CHORUS_HD
#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__
#else
#define CHORUS_HD
#endif
#endif
