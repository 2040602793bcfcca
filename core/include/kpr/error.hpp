// kpr/error.hpp -- the one exception type the core's C++ API throws.
#pragma once

#include <stdexcept>
#include <string>

namespace kpr {

// What went wrong, in one line that names the input (file, key, tensor, provider) and the problem.
// `exit_code` is what the CLI exits with: 1 for bad input or a failed check, 2 for a usage error.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string &message, int exit_code = 1)
        : std::runtime_error(message), exit_code_(exit_code) {}
    int exit_code() const noexcept { return exit_code_; }

private:
    int exit_code_;
};

} // namespace kpr
