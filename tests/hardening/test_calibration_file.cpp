// The calibration file's round trip (kpr::calibration::File::load, save, load), on what the `files` fuzz
// target found: files that loaded, were saved (as `kpr calibrate` does after loading the existing file)
// and then no longer loaded. The inputs are also in fuzz-regressions/files/ for the replay.
#include "test_support.hpp"

#include <kpr/calibration.hpp>
#include <kpr/error.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

using namespace kpr_test;
namespace cal = kpr::calibration;

namespace {

std::string read_file(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const std::string kEntry = "version = 1\n[[entries]]\ndevice = \"cpu\"\nkind = \"gemv\"\ntype = \"f32\"\n";

// Loads, saves, loads again: the second load must succeed with the same entries.
cal::File round_trip(const TempDir &tmp, const cal::File &f) {
    fs::path out = tmp.path() / "saved" / "calibration.toml";
    f.save(out);
    cal::File g;
    try {
        g = cal::File::load(out);
    } catch (const kpr::Error &e) {
        ADD_FAILURE() << "what save() wrote does not load: " << e.what() << "\n" << read_file(out);
        return g;
    }
    EXPECT_EQ(g.entries.size(), f.entries.size()) << read_file(out);
    return g;
}

std::string load_error(const fs::path &p) {
    try {
        cal::File::load(p);
    } catch (const kpr::Error &e) {
        return e.what();
    }
    return "";
}

} // namespace

// A DEL (U+007F) in a string was written raw, and TOML forbids it unescaped.
TEST(CalibrationFile, ControlCharacterDelIsEscapedOnSave) {
    TempDir tmp;
    cal::File f = cal::File::load(tmp.write("del.toml", "version = 1\n[devices.\"a\\u007fb\"]\nname = \"x\\u007f\"\n" +
                                                            kEntry.substr(12) +
                                                            "rows = 4\ncols = 32\nncols = 1\nwinner = \"w\\u007f\"\n"
                                                            "times = { \"p\\u007f\" = 1.5 }\nexcluded = { q = \"why\\u007f\" }\n"));
    ASSERT_EQ(f.entries.size(), 1u);
    cal::File g = round_trip(tmp, f);
    ASSERT_EQ(g.entries.size(), 1u);
    EXPECT_EQ(g.devices.count("a\x7f" "b"), 1u);
    EXPECT_EQ(g.devices["a\x7f" "b"].name, "x\x7f");
    EXPECT_EQ(g.entries[0].winner, "w\x7f");
    EXPECT_EQ(g.entries[0].times.count("p\x7f"), 1u);
    EXPECT_EQ(g.entries[0].excluded["q"], "why\x7f");
}

// A time of 1e300 us was written with three decimals (304 characters); toml++ refuses numbers over 126.
TEST(CalibrationFile, HugeAndNonFiniteTimesSurviveSave) {
    TempDir tmp;
    cal::File f = cal::File::load(tmp.write(
        "big.toml", kEntry + "rows = 4\ncols = 32\nncols = 1\ntimes = { a = 1e300, b = -1.5e200, c = inf, d = nan, e = 12.5 }\n"));
    ASSERT_EQ(f.entries.size(), 1u);
    cal::File g = round_trip(tmp, f);
    ASSERT_EQ(g.entries.size(), 1u);
    auto &t = g.entries[0].times;
    EXPECT_DOUBLE_EQ(t["a"], 1e300);
    EXPECT_DOUBLE_EQ(t["b"], -1.5e200);
    EXPECT_TRUE(std::isinf(t["c"]));
    EXPECT_TRUE(std::isnan(t["d"]));
    EXPECT_DOUBLE_EQ(t["e"], 12.5);
    // The usual times keep their three decimals.
    EXPECT_NE(read_file(tmp.path() / "saved" / "calibration.toml").find("e = 12.500"), std::string::npos);
}

// rows = -1 loaded as 2^64 - 1 and was saved as 18446744073709551615, which is no TOML integer; an
// experts count of 2^32 became 0. Values that do not fit their field are now an error naming the key.
TEST(CalibrationFile, IntegersOutOfRangeAreRefused) {
    TempDir tmp;
    struct Case {
        const char *name, *body, *key;
    } cases[] = {
        {"rows.toml", "rows = -1\ncols = 32\nncols = 1\n", "rows"},
        {"cols.toml", "rows = 4\ncols = -32\nncols = 1\n", "cols"},
        {"ncols.toml", "rows = 4\ncols = 32\nncols = 4294967297\n", "ncols"},
    };
    for (const Case &c : cases) {
        std::string e = load_error(tmp.write(c.name, kEntry + c.body));
        EXPECT_NE(e.find(c.name), std::string::npos) << e;
        EXPECT_NE(e.find(std::string("'") + c.key + "'"), std::string::npos) << e;
        EXPECT_NE(e.find("out of range"), std::string::npos) << e;
    }
    const std::string grouped = "version = 1\n[[entries]]\ndevice = \"cpu\"\nkind = \"gemv_grouped\"\ntype = \"f32\"\n"
                                "rows = 4\ncols = 32\nncols = 1\n";
    for (const char *key : {"experts", "experts_used", "x_slots"}) {
        for (const char *v : {"-1", "4294967296"}) {
            std::string e = load_error(tmp.write("grouped.toml", grouped + key + " = " + v + "\n"));
            EXPECT_NE(e.find(std::string("'") + key + "'"), std::string::npos) << key << " = " << v << ": " << e;
        }
    }
    std::string e = load_error(tmp.write("driver.toml", "version = 1\n[devices.\"cuda:0\"]\nname = \"x\"\ndriver = -1\n"));
    EXPECT_NE(e.find("'driver'"), std::string::npos) << e;
    // The largest values that fit still load and survive a save.
    cal::File f = cal::File::load(tmp.write(
        "max.toml", "version = 1\n[[entries]]\ndevice = \"cpu\"\nkind = \"gemv_grouped\"\ntype = \"f32\"\n"
                    "rows = 9223372036854775807\ncols = 0\nncols = 4294967295\nexperts = 4294967295\nexperts_used = 0\n"
                    "x_slots = 4294967295\n"));
    ASSERT_EQ(f.entries.size(), 1u);
    EXPECT_EQ(f.entries[0].op.rows, uint64_t(std::numeric_limits<int64_t>::max()));
    EXPECT_EQ(f.entries[0].op.n_experts, 4294967295u);
    cal::File g = round_trip(tmp, f);
    ASSERT_EQ(g.entries.size(), 1u);
    EXPECT_EQ(cal::key_of(g.entries[0].device, g.entries[0].op), cal::key_of(f.entries[0].device, f.entries[0].op));
}

// A float where an integer belongs was cast to int64_t by toml++ before its range was checked (undefined
// behaviour for 4294967e95: UBSan in the `files` fuzz target). A whole float in range still counts.
TEST(CalibrationFile, FloatsForIntegersAreRangeCheckedBeforeTheCast) {
    TempDir tmp;
    for (const char *v : {"4294967e95", "-1e300", "9.3e18", "inf", "nan", "4.5"}) {
        std::string e = load_error(tmp.write("float.toml", kEntry + "rows = 4\ncols = 32\nncols = " + v + "\n"));
        EXPECT_NE(e.find("'ncols'"), std::string::npos) << v << ": " << e;
    }
    cal::File f = cal::File::load(tmp.write("whole.toml", kEntry + "rows = 4.0\ncols = 3.2e1\nncols = 1\n"));
    ASSERT_EQ(f.entries.size(), 1u);
    EXPECT_EQ(f.entries[0].op.rows, 4u);
    EXPECT_EQ(f.entries[0].op.cols, 32u);
    EXPECT_NO_THROW(cal::File::load(tmp.write("version.toml", "version = 1e300\n")));
    EXPECT_THROW(cal::File::load(tmp.write("version2.toml", "version = 2.0\n")), kpr::Error);
}
