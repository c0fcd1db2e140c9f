// spin.h — a GPU spin queued before each timed call of the benchmark.
//
// One thread of one block waits `cycles` clock cycles and exits. Queued before a call's
// start event, it keeps the GPU busy while the host enqueues the call, so the events time the
// kernel and not the launch; and it gives every call the same short pause in heavy work
// before it, which PyTorch's peers get from torch.cuda._sleep in scripts/peers.py: both sides
// are timed at the same duty cycle, and so at the same clocks (docs/conventions.md, Timing).
#pragma once

#include <cuda_runtime.h>

namespace fa::bench {

/// \brief Queues a one-thread kernel that spins for `cycles` SM clock cycles on `stream`;
/// nothing for cycles <= 0. \param cycles clock cycles (1e6 ≈ 0.5 ms at 2 GHz)
/// \param stream the stream the timed call will run on
void gpu_spin(long long cycles, cudaStream_t stream = nullptr);

}  // namespace fa::bench
