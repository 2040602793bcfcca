// The fuzz targets' seed corpora (fuzz/corpus/<target>/) and the inputs that once broke something
// (tests/hardening/fuzz-regressions/<target>/) replayed through the targets' own entry points, in every
// build: a regression shows up in plain ctest (and under ASan with scripts/test-sanitizers).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int kpr_fuzz_one_gguf(const uint8_t *data, size_t size);
extern "C" int kpr_fuzz_one_config(const uint8_t *data, size_t size);
extern "C" int kpr_fuzz_one_npy(const uint8_t *data, size_t size);
extern "C" int kpr_fuzz_one_op(const uint8_t *data, size_t size);
extern "C" int kpr_fuzz_one_files(const uint8_t *data, size_t size);

namespace fs = std::filesystem;

namespace {

size_t replay(const std::string &target, int (*one)(const uint8_t *, size_t)) {
    size_t n = 0;
    for (const fs::path &dir : {fs::path(KPR_FUZZ_DIR) / "corpus" / target, fs::path(KPR_HARDENING_DIR) / "fuzz-regressions" / target}) {
        if (!fs::is_directory(dir)) continue;
        for (auto &e : fs::directory_iterator(dir)) {
            if (!e.is_regular_file()) continue;
            std::ifstream in(e.path(), std::ios::binary);
            std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            SCOPED_TRACE(e.path().string());
            EXPECT_EQ(one(bytes.data(), bytes.size()), 0);
            ++n;
        }
    }
    // Also the degenerate inputs.
    one(nullptr, 0);
    const uint8_t zero = 0;
    one(&zero, 1);
    return n;
}

} // namespace

TEST(FuzzReplay, Gguf) { EXPECT_GT(replay("gguf", kpr_fuzz_one_gguf), 3u); }
TEST(FuzzReplay, Config) { EXPECT_GT(replay("config", kpr_fuzz_one_config), 3u); }
TEST(FuzzReplay, Npy) { EXPECT_GT(replay("npy", kpr_fuzz_one_npy), 3u); }
TEST(FuzzReplay, Op) { EXPECT_GT(replay("op", kpr_fuzz_one_op), 3u); }
TEST(FuzzReplay, Files) { EXPECT_GT(replay("files", kpr_fuzz_one_files), 3u); }
