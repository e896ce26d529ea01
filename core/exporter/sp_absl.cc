/*
 * Debian builds abseil without NDEBUG, so every absl::Mutex (all of
 * gRPC's locks) runs abseil's deadlock detection: each Lock records the
 * lock order in a global graph under a global lock, about a sixth of the
 * instructions of an export call (bench/exporter/export_call.sh). It is
 * a debugging aid that aborts the process on a lock-order cycle, off in
 * release builds of abseil; the exporter turns it off likewise.
 *
 * C++ because abseil has no C interface: this file uses no exceptions,
 * no RTTI and no library of its own, so the C link of the exporter
 * needs nothing more than abseil, which gRPC brings.
 */
#include "sp_absl.h"

#include <absl/synchronization/mutex.h>

void
sp_absl_no_deadlock_detection(void)
{
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}
