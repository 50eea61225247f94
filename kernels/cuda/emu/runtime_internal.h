// Internals shared by the files of the emulator's host-side runtime: memory (runtime_memory.cpp),
// streams and events (runtime_streams.cpp), copies (runtime_copies.cpp), errors and the fault
// reporter (runtime_errors.cpp), the device and its counters (runtime_device.cpp). What the SIMT
// engine, the checks and cuBLAS also use is in emu_internal.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/cuda/emu/emu_internal.h"

namespace tandem_emu {

constexpr size_t kPage = 4096;

inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// ---- memory (runtime_memory.cpp) ----------------------------------------------------------------

// Reserves the device range and maps pinned memory, if not done yet.
void reserve_memory();
// Whether p lies in the reserved device range (used by the fault handler; no lock).
bool in_device_range(uintptr_t p);
// An address of the host view of pinned memory in the device alias, and back.
uintptr_t host_to_alias(uintptr_t p);
uintptr_t alias_to_host(uintptr_t p);

// ---- errors (runtime_errors.cpp) ----------------------------------------------------------------

// Returns e, and records it for cudaGetLastError when it is an error.
cudaError_t ret(cudaError_t e);
// Prints "tandem emulator: what" to stderr.
void report(const std::string& what);
// The context's sticky error: the first one set stays.
void set_sticky_error(cudaError_t e);
// The SIGSEGV/SIGBUS reporter naming what the host touched (installed once), and the alternate
// signal stack it runs on for the calling thread.
void install_fault_handler();
void alt_signal_stack();

// ---- streams (runtime_streams.cpp) --------------------------------------------------------------

// Queues t on s; returns its sequence number.
uint64_t enqueue_seq(Stream* s, Task t);
// Lets s run up to seq (under TANDEM_EMU_DEFER nothing else does) and waits until it has.
void wait_done(Stream* s, uint64_t seq);
// Whether s has finished the task with sequence number seq.
bool stream_done(Stream* s, uint64_t seq);
// A host wait on the device, counted with its time.
void host_wait(const std::function<void()>& f);
// Waits for every stream (a host synchronisation); returns the sticky error.
cudaError_t sync_all();

// ---- pinned copies in flight (runtime_copies.cpp) -----------------------------------------------

// The host view of [p, p + n) stays PROT_NONE until s has run its task seq and the host saw it.
void protect_pending(Stream* s, uint64_t seq, uintptr_t p, size_t n);
// Unprotects the copies of s (every stream when s is null) up to sequence number done.
void release_pending(Stream* s, uint64_t done);
// Whether a copy still in flight writes address p (used by the fault handler; no lock).
bool pending_copy_at(uintptr_t p);

}  // namespace tandem_emu
