// The periodic box [−π, π)³ on the device: a coordinate wrapped into [−π, π), bit for bit the
// host's `wrap` (src/summation/cells.rs): fmod, no multiply-add, so it is the same under any
// --fmad setting. Included by ewald.cu and fmm_tree.cu.
#pragma once

#define BOX_PI 3.141592653589793
#define BOX_TAU 6.283185307179586

__device__ __forceinline__ double box_wrap(double x)
{
    double r = fmod(x + BOX_PI, BOX_TAU);
    if (r < 0.0) r += BOX_TAU;
    double y = r - BOX_PI;
    if (y >= BOX_PI) y -= BOX_TAU;
    return y;
}
