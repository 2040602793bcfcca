// Helpers shared by the formats tests: a scratch directory and byte builders.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace kpr_test {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class ScratchDir {
public:
    explicit ScratchDir(const std::string &tag) {
        static int counter = 0;
        path_ = std::filesystem::temp_directory_path() /
                ("kpr_formats_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string file(const std::string &name) const { return (path_ / name).string(); }
    const std::filesystem::path &path() const { return path_; }

private:
    std::filesystem::path path_;
};

// Little-endian byte builder for hand-made (and deliberately broken) files.
struct Bytes {
    std::vector<uint8_t> b;
    // resize + memcpy rather than insert: GCC 12 warns falsely (-Wstringop-overflow) on inserts here.
    Bytes &append(const void *p, size_t n) {
        const size_t at = b.size();
        b.resize(at + n);
        if (n) std::memcpy(b.data() + at, p, n);
        return *this;
    }
    template <typename T>
    Bytes &pod(T v) {
        return append(&v, sizeof v);
    }
    Bytes &u8(uint8_t v) { return pod(v); }
    Bytes &u32(uint32_t v) { return pod(v); }
    Bytes &u64(uint64_t v) { return pod(v); }
    Bytes &str(const std::string &s) {
        u64(s.size());
        return append(s.data(), s.size());
    }
    Bytes &raw(const std::string &s) { return append(s.data(), s.size()); }
    Bytes &zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
    Bytes &pad_to(size_t alignment) {
        while (b.size() % alignment) b.push_back(0);
        return *this;
    }
    void save(const std::string &path) const {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char *>(b.data()), static_cast<std::streamsize>(b.size()));
    }
};

inline std::string data_dir() { return KPR_TEST_DATA_DIR; }

} // namespace kpr_test
