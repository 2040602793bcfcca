// float32 .npy reader and atomic writer.
#include <kpr/error.hpp>
#include <kpr/npy.hpp>

#include "../util/atomic_file.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <unistd.h>

namespace kpr::npy {
namespace {

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
public:
    HeaderParser(const std::string &file, std::string_view s) : file_(file), s_(s) {}

    [[noreturn]] void fail(const std::string &what) const {
        throw Error(file_ + ": .npy header: " + what + " (header: " + std::string(s_.substr(0, 120)) + ")");
    }
    void ws() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    bool eat(char c) {
        ws();
        if (i_ < s_.size() && s_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) fail(std::string("expected '") + c + "' at column " + std::to_string(i_));
    }
    std::string str() {
        ws();
        if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string at column " + std::to_string(i_));
        const char q = s_[i_++];
        const size_t start = i_;
        while (i_ < s_.size() && s_[i_] != q) ++i_;
        if (i_ >= s_.size()) fail("unterminated string");
        return std::string(s_.substr(start, i_++ - start));
    }
    std::string word() {
        ws();
        const size_t start = i_;
        while (i_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[i_]))) ++i_;
        return std::string(s_.substr(start, i_ - start));
    }
    std::vector<uint64_t> tuple() {
        expect('(');
        std::vector<uint64_t> out;
        while (!eat(')')) {
            const std::string w = word();
            if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos)
                fail("shape entry '" + w + "' is not a non-negative integer");
            if (w.size() > 19) fail("shape entry " + w + " is too large");
            out.push_back(std::stoull(w));
            if (out.size() > 64) fail("shape has more than 64 dimensions");
            if (!eat(',')) {
                expect(')');
                break;
            }
        }
        return out;
    }

    void parse(std::string &descr, bool &fortran, std::vector<uint64_t> &shape) {
        bool have_descr = false, have_fortran = false, have_shape = false;
        expect('{');
        while (!eat('}')) {
            const std::string key = str();
            expect(':');
            if (key == "descr") {
                descr = str();
                have_descr = true;
            } else if (key == "fortran_order") {
                const std::string w = word();
                if (w != "True" && w != "False") fail("fortran_order is '" + w + "', not True or False");
                fortran = w == "True";
                have_fortran = true;
            } else if (key == "shape") {
                shape = tuple();
                have_shape = true;
            } else {
                fail("unexpected key '" + key + "'");
            }
            if (!eat(',')) {
                expect('}');
                break;
            }
        }
        if (!have_descr || !have_fortran || !have_shape) fail("missing one of 'descr', 'fortran_order', 'shape'");
    }

private:
    const std::string &file_;
    std::string_view s_;
    size_t i_ = 0;
};

} // namespace

Array read(const std::string &path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a .npy file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error(path + ": read failed");
    const uint64_t size = bytes.size();
    static const char magic[] = "\x93NUMPY";
    if (size < 10 || std::memcmp(bytes.data(), magic, 6) != 0)
        throw Error(path + ": not an .npy file (no \\x93NUMPY magic)");
    const auto major = static_cast<uint8_t>(bytes[6]);
    uint64_t header_len = 0, header_start = 0;
    if (major == 1) {
        header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint64_t>(static_cast<uint8_t>(bytes[9])) << 8);
        header_start = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12) throw Error(path + ": truncated .npy header (" + std::to_string(size) + " bytes)");
        for (int k = 0; k < 4; ++k) header_len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[8 + k])) << (8 * k);
        header_start = 12;
    } else {
        throw Error(path + ": .npy format version " + std::to_string(major) + "." +
                    std::to_string(static_cast<uint8_t>(bytes[7])) + " is not supported (1, 2 or 3)");
    }
    if (header_len > size - header_start)
        throw Error(path + ": truncated .npy header: " + std::to_string(header_len) + " bytes announced, " +
                    std::to_string(size - header_start) + " in the file");
    std::string descr;
    bool fortran = false;
    Array out;
    HeaderParser(path, std::string_view(bytes.data() + header_start, header_len)).parse(descr, fortran, out.shape);
    if (descr != "<f4")
        throw Error(path + ": .npy dtype is '" + descr + "'; only little-endian float32 ('<f4') is supported");
    if (fortran) throw Error(path + ": .npy array is in Fortran order; only C order is supported");
    uint64_t count = 1;
    for (uint64_t d : out.shape)
        if (__builtin_mul_overflow(count, d, &count))
            throw Error(path + ": .npy shape element count overflows");
    const uint64_t data_bytes = size - header_start - header_len;
    uint64_t want = 0;
    if (__builtin_mul_overflow(count, uint64_t{4}, &want) || want != data_bytes)
        throw Error(path + ": .npy shape holds " + std::to_string(count) + " float32 values (" +
                    (want / 4 == count ? std::to_string(want) : std::string("overflowing")) + " bytes) but the file has " +
                    std::to_string(data_bytes) + " bytes of data" + (data_bytes < want ? " (truncated)" : ""));
    out.data.resize(count);
    if (count) std::memcpy(out.data.data(), bytes.data() + header_start + header_len, want);
    return out;
}

void write(const std::string &path, const std::vector<uint64_t> &shape, const float *data) {
    uint64_t count = 1;
    for (uint64_t d : shape)
        if (__builtin_mul_overflow(count, d, &count)) throw Error(path + ": .npy shape element count overflows");
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < shape.size(); ++i) {
        dict += std::to_string(shape[i]);
        if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
        if (i + 1 < shape.size()) dict += " ";
    }
    dict += "), }";
    // Pad with spaces and a final newline so the data starts at a multiple of 64.
    auto build = [&](uint64_t prefix) {
        std::string h = dict;
        const uint64_t total = prefix + h.size() + 1;
        h.append(static_cast<size_t>((64 - total % 64) % 64), ' ');
        h += '\n';
        return h;
    };
    std::string header = build(10);
    std::string pre = std::string("\x93NUMPY", 6);
    if (header.size() <= 0xffff) {
        pre += '\x01';
        pre += '\x00';
        pre += static_cast<char>(header.size() & 0xff);
        pre += static_cast<char>(header.size() >> 8);
    } else {
        header = build(12);
        pre += '\x02';
        pre += '\x00';
        for (int k = 0; k < 4; ++k) pre += static_cast<char>((header.size() >> (8 * k)) & 0xff);
    }
    // A temporary of our own (unique name, O_EXCL: never an existing file), renamed over `path`.
    util::TempFile tmp(path);
    tmp.write(pre);
    tmp.write(header);
    if (count) tmp.write(data, static_cast<size_t>(count) * sizeof(float));
    tmp.commit();
}

void write(const std::string &path, const Array &array) {
    uint64_t count = 1;
    for (uint64_t d : array.shape) count *= d;
    if (count != array.data.size())
        throw Error(path + ": .npy shape holds " + std::to_string(count) + " values but " +
                    std::to_string(array.data.size()) + " were given");
    write(path, array.shape, array.data.data());
}

} // namespace kpr::npy
