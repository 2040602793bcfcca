// Calibration (measured winners per key) is not implemented yet: negotiation uses priorities and the
// providers' own scores. This file is where `kpr calibrate`'s results will be read back.
#include "runtime/internal.hpp"

namespace kpr {
void attach_calibration(RuntimeImpl &, const RuntimeOptions &) {}
} // namespace kpr
