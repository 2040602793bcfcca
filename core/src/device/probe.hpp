#pragma once
#include <kpr/runtime.hpp>

namespace kpr {
Device probe_cpu();
// GPUs through the driver; when there are none, *note says why (one info line, never an error).
std::vector<Device> probe_cuda(std::string *note);
} // namespace kpr
