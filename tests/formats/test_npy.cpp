// .npy: round trips, headers as NumPy writes them (v1, v2, v3), and clear rejections.
#include <kpr/error.hpp>
#include <kpr/npy.hpp>

#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.hpp"

using kpr_test::Bytes;
using kpr_test::ScratchDir;

namespace {

// A file as NumPy writes it: magic, version, header length, dict padded with spaces to 64 and '\n'.
Bytes npy_file(int major, const std::string &dict, const std::vector<float> &data) {
    const size_t prefix = major == 1 ? 10 : 12;
    std::string h = dict;
    while ((prefix + h.size() + 1) % 64) h += ' ';
    h += '\n';
    Bytes b;
    b.raw(std::string("\x93NUMPY", 6)).u8(static_cast<uint8_t>(major)).u8(0);
    if (major == 1)
        b.pod<uint16_t>(static_cast<uint16_t>(h.size()));
    else
        b.u32(static_cast<uint32_t>(h.size()));
    b.raw(h);
    for (float f : data) b.pod(f);
    return b;
}

std::string error_of(const std::string &path) {
    try {
        kpr::npy::read(path);
    } catch (const kpr::Error &e) {
        return e.what();
    }
    return "(no error)";
}

void expect_rejected(const std::string &path, const std::string &part) {
    const std::string msg = error_of(path);
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
}

} // namespace

TEST(Npy, WriteReadRoundTrip) {
    ScratchDir dir("npy");
    for (const std::vector<uint64_t> &shape :
         {std::vector<uint64_t>{}, std::vector<uint64_t>{5}, std::vector<uint64_t>{3, 4}, std::vector<uint64_t>{2, 0, 3},
          std::vector<uint64_t>{2, 3, 4, 5}}) {
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        std::vector<float> data(n);
        for (uint64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i) * 0.5f - 3.0f;
        const std::string p = dir.file("a.npy");
        kpr::npy::write(p, shape, data.data());
        EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
        size_t files = 0;
        for ([[maybe_unused]] auto &e : std::filesystem::directory_iterator(dir.path())) ++files;
        EXPECT_EQ(files, 1u) << "a temporary was left";
        EXPECT_EQ(std::filesystem::file_size(p) % 64, (n * 4) % 64) << "data starts at a multiple of 64";
        const kpr::npy::Array a = kpr::npy::read(p);
        EXPECT_EQ(a.shape, shape);
        EXPECT_EQ(a.data, data);
        kpr::npy::write(p, a); // overwrite in place
        EXPECT_EQ(kpr::npy::read(p).data, data);
    }
    EXPECT_THROW(kpr::npy::write(dir.file("b.npy"), kpr::npy::Array{{2, 2}, {1.0f}}), kpr::Error);
    EXPECT_THROW(kpr::npy::write(dir.file("no/dir/c.npy"), std::vector<uint64_t>{1}, std::vector<float>{1}.data()),
                 kpr::Error);
}

TEST(Npy, ReadsEveryHeaderVersion) {
    ScratchDir dir("npyv");
    for (int major : {1, 2, 3}) {
        std::string name = "v";
        name += std::to_string(major);
        const std::string p = dir.file(name + ".npy");
        npy_file(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", {1, 2, 3, 4, 5, 6}).save(p);
        const kpr::npy::Array a = kpr::npy::read(p);
        EXPECT_EQ(a.shape, (std::vector<uint64_t>{2, 3}));
        EXPECT_EQ(a.data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
    }
    // Spacing and key order vary between writers.
    const std::string p = dir.file("odd.npy");
    npy_file(1, "{\"shape\":(3,),\"fortran_order\":False,\"descr\":\"<f4\"}", {7, 8, 9}).save(p);
    EXPECT_EQ(kpr::npy::read(p).data, (std::vector<float>{7, 8, 9}));
}

TEST(Npy, Rejections) {
    ScratchDir dir("npybad");
    auto save = [&](const Bytes &b, const std::string &name) {
        const std::string p = dir.file(name);
        b.save(p);
        return p;
    };
    Bytes junk;
    junk.raw("GGUF and more bytes");
    expect_rejected(save(junk, "junk.npy"), "not an .npy file");
    expect_rejected(dir.file("missing.npy"), "cannot open");
    expect_rejected(save(npy_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", {1, 2, 3, 4}), "f8.npy"),
                    "dtype is '<f8'");
    expect_rejected(save(npy_file(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", {1, 2}), "be.npy"),
                    "dtype is '>f4'");
    expect_rejected(save(npy_file(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 1), }", {1, 2}), "f.npy"),
                    "Fortran order");
    expect_rejected(save(npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", {1, 2, 3}), "short.npy"),
                    "truncated");
    expect_rejected(save(npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", {1, 2}), "long.npy"),
                    "the file has 8 bytes of data");
    expect_rejected(save(npy_file(1, "{'descr': '<f4', 'shape': (1,), }", {1}), "nokey.npy"), "missing");
    expect_rejected(save(npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", {1}), "neg.npy"),
                    "shape entry");
    expect_rejected(
        save(npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", {}), "big.npy"),
        "overflows");
    Bytes v9 = npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", {1});
    v9.b[6] = 9;
    expect_rejected(save(v9, "v9.npy"), "version 9");
    Bytes cut = npy_file(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", {1});
    cut.b.resize(40);
    expect_rejected(save(cut, "cut.npy"), "truncated .npy header");
}
