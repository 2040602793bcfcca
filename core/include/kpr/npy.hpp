// kpr/npy.hpp -- float32 .npy files (NumPy format versions 1, 2 and 3), read and written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kpr::npy {

struct Array {
    std::vector<uint64_t> shape; // C order; empty for a 0-d array (one element)
    std::vector<float> data;     // product(shape) values
};

// Reads a little-endian float32 ('<f4'), C-order .npy. Throws kpr::Error naming the file and what is
// wrong: not an .npy file, an unsupported version, a dtype other than '<f4', Fortran order, a malformed
// header, or data whose size does not match the shape.
Array read(const std::string &path);

// Writes `data` (product(shape) floats) as a version 1.0 .npy (2.0 when the header needs it),
// atomically: a new temporary next to `path` (a unique name created with O_EXCL, so no existing file
// is truncated), then renamed over `path`.
void write(const std::string &path, const std::vector<uint64_t> &shape, const float *data);
void write(const std::string &path, const Array &array);

} // namespace kpr::npy
