// Process-wide settings of client programs: see process_settings.h.
#include "client/cpp/process_settings.h"

#include "absl/synchronization/mutex.h"

namespace matserve::client {

void turn_off_lock_order_checks() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace matserve::client
