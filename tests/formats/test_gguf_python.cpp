// Cross-check with PyPI's `gguf` (ggml's own Python reader, writer and dequantizers), through
// gguf_crosscheck.py. Every test here is skipped (not passed) when `python3 -c "import gguf"` fails.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>
#include <kpr/npy.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "test_util.hpp"

using namespace kpr;
using json = nlohmann::json;
using kpr_test::ScratchDir;

namespace {

bool have_python_gguf() {
    static const bool ok = std::system("python3 -c 'import gguf' >/dev/null 2>&1") == 0;
    return ok;
}

#define REQUIRE_PYTHON_GGUF()                                                                                       \
    do {                                                                                                            \
        if (!have_python_gguf()) GTEST_SKIP() << "PyPI gguf is not importable by python3 (pip install gguf)";       \
    } while (0)

std::string shell_quote(const std::string &s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

// Runs the script with `args`; returns its stdout. Fails the test on a non-zero exit.
std::string run_script(const ScratchDir &dir, const std::string &args) {
    const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
    const std::string cmd = "python3 " + shell_quote(KPR_GGUF_CROSSCHECK_SCRIPT) + " " + args + " >" + shell_quote(out) +
                            " 2>" + shell_quote(err);
    const int rc = std::system(cmd.c_str());
    std::ifstream o(out), e(err);
    std::stringstream so, se;
    so << o.rdbuf();
    se << e.rdbuf();
    EXPECT_EQ(rc, 0) << cmd << "\n" << se.str();
    return so.str();
}

json dump(const ScratchDir &dir, const std::string &gguf_path) {
    return json::parse(run_script(dir, "dump " + shell_quote(gguf_path)));
}

// What gguf's reader reports for a value: the type chain (following first elements) and the leaves.
void flatten(const gguf::Value &v, json &types, json &leaves, bool record_types) {
    if (record_types) types.push_back(static_cast<uint32_t>(v.type()));
    if (const gguf::Array *a = v.as_array()) {
        for (size_t i = 0; i < a->items.size(); ++i) flatten(a->items[i], types, leaves, record_types && i == 0);
        return;
    }
    std::visit(
        [&](const auto &x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, gguf::Array>) {
            } else if constexpr (std::is_same_v<T, float>) {
                leaves.push_back(static_cast<double>(x));
            } else {
                leaves.push_back(x);
            }
        },
        v.v);
}

// Every key, type and value, and every tensor's type, shape, offset, size and bytes agree.
void expect_same(const gguf::File &f, const json &py) {
    EXPECT_EQ(py["alignment"].get<uint64_t>(), f.alignment()) << f.path();
    EXPECT_EQ(py["data_offset"].get<uint64_t>(), f.data_offset()) << f.path();
    const json &fields = py["fields"];
    ASSERT_EQ(fields.size(), f.metadata().size()) << f.path();
    for (size_t i = 0; i < fields.size(); ++i) {
        const gguf::KV &kv = f.metadata()[i];
        EXPECT_EQ(fields[i]["key"].get<std::string>(), kv.key);
        json types = json::array(), leaves = json::array();
        flatten(kv.value, types, leaves, true);
        EXPECT_EQ(fields[i]["types"], types) << kv.key;
        EXPECT_EQ(fields[i]["leaves"], leaves) << kv.key;
    }
    const json &tensors = py["tensors"];
    ASSERT_EQ(tensors.size(), f.tensors().size()) << f.path();
    for (size_t i = 0; i < tensors.size(); ++i) {
        const gguf::Tensor &t = f.tensors()[i];
        SCOPED_TRACE(t.name);
        EXPECT_EQ(tensors[i]["name"].get<std::string>(), t.name);
        EXPECT_EQ(tensors[i]["type"].get<uint32_t>(), t.type);
        EXPECT_EQ(tensors[i]["ne"].get<std::vector<uint64_t>>(), t.ne);
        EXPECT_EQ(tensors[i]["data_offset"].get<uint64_t>(), static_cast<uint64_t>(t.data - f.bytes()));
        EXPECT_EQ(tensors[i]["n_bytes"].get<uint64_t>(), t.bytes);
        EXPECT_EQ(tensors[i]["crc32"].get<uint32_t>(), formats::crc32(t.data, t.bytes));
    }
}

} // namespace

TEST(GgufPython, TypeTableAgrees) {
    REQUIRE_PYTHON_GGUF();
    ScratchDir dir("pytypes");
    const json py = json::parse(run_script(dir, "types"));
    int compared = 0;
    for (const auto &[id_s, v] : py.items()) {
        const uint32_t id = static_cast<uint32_t>(std::stoul(id_s));
        const formats::TypeInfo *t = formats::type_info(id);
        if (!t) {
            ADD_FAILURE() << "gguf knows type " << id << " (" << v[0] << "), kpr does not";
            continue;
        }
        EXPECT_EQ(v[0].get<std::string>(), [&] {
            std::string n = t->name;
            for (char &c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            return n;
        }()) << id;
        EXPECT_EQ(v[1].get<uint32_t>(), t->block_size) << t->name;
        // gguf-py still lists Q8_1 with f32 d and s (40 bytes); ggml's block_q8_1 has two f16 (36).
        if (id != KPR_TYPE_Q8_1) {
            EXPECT_EQ(v[2].get<uint32_t>(), t->block_bytes) << t->name;
        }
        ++compared;
    }
    EXPECT_GE(compared, 30);
}

TEST(GgufPython, ReadsWhatKprWrites) {
    REQUIRE_PYTHON_GGUF();
    ScratchDir dir("pyread");
    using V = gguf::Value;
    using T = gguf::ValueType;
    gguf::Writer w;
    w.add_string("general.architecture", "kpr");
    w.add_u8("k.u8", 255);
    w.add_i8("k.i8", -128);
    w.add_u16("k.u16", 65535);
    w.add_i16("k.i16", -32768);
    w.add_u32("k.u32", 4294967295u);
    w.add_i32("k.i32", -2147483647 - 1);
    w.add_f32("k.f32", -0.125f);
    w.add_bool("k.bool", false);
    w.add_string("k.str", "\xe2\x82\xac 5");
    w.add_u64("k.u64", ~uint64_t{0});
    w.add_i64("k.i64", INT64_MIN);
    w.add_f64("k.f64", 1e300);
    w.add_array("k.arr_i16", {T::I16, {V::i16(1), V::i16(-2)}});
    w.add_array("k.arr_str", {T::String, {V::string("x"), V::string("yz")}});
    w.add_array("k.arr_bool", {T::Bool, {V::boolean(true), V::boolean(false)}});
    w.add_array("k.arr_f64", {T::F64, {V::f64(0.25)}});
    w.add_array("k.arr_empty", {T::U32, {}});
    w.add_array("k.arr_nested", {T::Array, {V::array({T::U16, {V::u16(1), V::u16(2)}}), V::array({T::U16, {V::u16(3)}})}});
    w.set_alignment(128);
    for (const formats::TypeInfo *t : formats::supported_types()) {
        const uint64_t cols = 2 * (t->block_size == 1 ? 64 : t->block_size);
        std::vector<uint8_t> data(formats::row_bytes(t->id, cols) * 3);
        formats::fill_random_blocks(t->id, t->id, data.data(), data.size() / t->block_bytes);
        w.add_tensor(std::string("t.") + t->name, t->id, {cols, 3}, std::move(data));
    }
    std::vector<uint8_t> experts(formats::row_bytes(KPR_TYPE_Q6_K, 256) * 2 * 4);
    formats::fill_random_blocks(KPR_TYPE_Q6_K, 9, experts.data(), 8);
    w.add_tensor("t.experts", KPR_TYPE_Q6_K, {256, 2, 4}, experts);
    const std::string path = dir.file("kpr.gguf");
    w.write(path);
    expect_same(gguf::File(path), dump(dir, path));
}

TEST(GgufPython, ReadsWhatGgufWrites) {
    REQUIRE_PYTHON_GGUF();
    ScratchDir dir("pywrite");
    const std::string path = dir.file("py.gguf");
    run_script(dir, "write " + shell_quote(path));
    gguf::File f(path);
    expect_same(f, dump(dir, path));
    EXPECT_EQ(f.get_string("general.architecture"), "pycheck");
    EXPECT_EQ(f.get_u64("p.u8"), 200u);
    EXPECT_EQ(f.get_i64("p.i8"), -100);
    EXPECT_EQ(f.get_u64("p.u64"), (uint64_t{1} << 63) + 5);
    EXPECT_EQ(f.get_i64("p.i64"), -(int64_t{1} << 62));
    EXPECT_EQ(f.get_f64("p.f64"), 0.1);
    EXPECT_EQ(f.get_f64("p.f32"), 1.5);
    EXPECT_TRUE(f.get_bool("p.bool"));
    EXPECT_EQ(f.get_string("p.str"), "gr\xc3\xbc\xc3\x9f dich");
    EXPECT_EQ(f.get_array("p.arr_str").items.at(1).as_string()->size(), 2u);
    EXPECT_EQ(f.get_array("p.arr_u8").type, gguf::ValueType::U8);
    const gguf::Array &nested = f.get_array("p.arr_nested");
    ASSERT_EQ(nested.type, gguf::ValueType::Array);
    EXPECT_EQ(nested.items.at(0).as_array()->items.size(), 2u);
    EXPECT_EQ(f.tensor("t.q8_0").ne, (std::vector<uint64_t>{64, 4}));
    const gguf::TensorOp op = gguf::tensor_op(f.tensor("t.q4_K"), f.path());
    EXPECT_EQ(op.cols, 256u);
    EXPECT_EQ(op.rows, 3u);
    EXPECT_EQ(op.n_experts, 2u);
}

TEST(GgufPython, SharedVectorsReadTheSame) {
    REQUIRE_PYTHON_GGUF();
    ScratchDir dir("pyvectors");
    for (const char *name : {"weights.gguf", "activations.gguf", "expected.gguf"}) {
        const std::string path = kpr_test::data_dir() + "/" + name;
        expect_same(gguf::File(path), dump(dir, path));
    }
}

TEST(GgufPython, DequantizationAgreesWithGgufQuants) {
    REQUIRE_PYTHON_GGUF();
    ScratchDir dir("pydequant");
    gguf::Writer w;
    const uint64_t nb = 64;
    std::map<std::string, std::vector<uint8_t>> blocks;
    for (const formats::TypeInfo *t : formats::supported_types()) {
        const uint64_t n = nb * (t->block_size == 1 ? 256 : t->block_size);
        std::vector<uint8_t> data(formats::row_bytes(t->id, n));
        formats::fill_random_blocks(t->id, 1000 + t->id, data.data(), data.size() / t->block_bytes);
        blocks[t->name] = data;
        w.add_tensor(t->name, t->id, {n}, std::move(data));
    }
    const std::string path = dir.file("blocks.gguf");
    w.write(path);
    run_script(dir, "dequant " + shell_quote(path) + " " + shell_quote(dir.path().string()));
    gguf::File f(path);
    int compared = 0;
    for (const gguf::Tensor &t : f.tensors()) {
        const std::string npy = dir.file(t.name + ".npy");
        if (!std::filesystem::exists(npy)) {
            ADD_FAILURE() << "gguf.quants cannot dequantize " << t.name;
            continue;
        }
        const npy::Array py = npy::read(npy);
        const uint64_t n = t.elements();
        ASSERT_EQ(py.data.size(), n) << t.name;
        std::vector<float> ours(n);
        formats::dequantize_row(t.type, t.data, ours.data(), n);
        uint64_t inexact = 0;
        double max_diff = 0, max_abs = 0;
        for (uint64_t i = 0; i < n; ++i) {
            if (std::memcmp(&ours[i], &py.data[i], 4) != 0) ++inexact;
            max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[i]) - py.data[i]));
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(ours[i])));
        }
        // Bit for bit: gguf.quants evaluates the same float expressions.
        EXPECT_EQ(inexact, 0u) << t.name;
        EXPECT_LE(max_diff, 1e-6 * max_abs) << t.name << ": " << inexact << " of " << n << " differ";
        std::printf("%-8s %6llu values, %6llu not bit-identical, max |diff| %.3e (max |w| %.3e)\n", t.name.c_str(),
                    static_cast<unsigned long long>(n), static_cast<unsigned long long>(inexact), max_diff, max_abs);
        ++compared;
    }
    EXPECT_EQ(compared, static_cast<int>(formats::supported_types().size()));
}

TEST(GgufPython, NumpyLoadsWhatKprWrites) {
    REQUIRE_PYTHON_GGUF(); // gguf brings numpy
    ScratchDir dir("pynpy");
    for (const std::vector<uint64_t> &shape : {std::vector<uint64_t>{}, std::vector<uint64_t>{7},
                                               std::vector<uint64_t>{3, 5}, std::vector<uint64_t>{2, 1, 4},
                                               std::vector<uint64_t>{0, 3}}) {
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        std::vector<float> data(n);
        formats::fill_random_floats(n, data.data(), n);
        const std::string p = dir.file("x.npy");
        npy::write(p, shape, data.data());
        const json py = json::parse(run_script(dir, "npy " + shell_quote(p)));
        EXPECT_EQ(py["dtype"].get<std::string>(), "<f4");
        EXPECT_FALSE(py["fortran"].get<bool>());
        EXPECT_EQ(py["shape"].get<std::vector<uint64_t>>(), shape);
        const auto values = py["values"].get<std::vector<double>>();
        ASSERT_EQ(values.size(), n);
        for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(static_cast<float>(values[i]), data[i]) << i;
    }
}
