// The block-wide exclusive scan shared by sort.cu (the scans of the sort module) and ewald.cu (its
// spreading kernel's row offsets); given to NVRTC as the named header "scan.cuh".
#pragma once

// Exclusive prefix sum of one int per thread over the block (blockDim.x a multiple of 32, at most
// 1024); `total` receives the block's sum. s_warp: 32 ints of shared memory, reusable on return.
__device__ __forceinline__ int block_exclusive_scan(int v, int *s_warp, int &total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
    if (lane == 31) s_warp[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x >> 5;
        int w = lane < nw ? s_warp[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int t = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += t;
        }
        if (lane < nw) s_warp[lane] = w; // inclusive warp totals
    }
    __syncthreads();
    const int before = warp > 0 ? s_warp[warp - 1] : 0;
    total = s_warp[(blockDim.x >> 5) - 1];
    __syncthreads(); // s_warp may be reused by the caller
    return before + incl - v;
}
