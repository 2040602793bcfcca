// GGUF reader/writer: a round trip of every metadata type, the atomic writer, and one test per way a file
// can lie (each built here byte by byte), asserting the message names the file and the field.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <random>

#include "test_util.hpp"

using namespace kpr;
using kpr_test::Bytes;
using kpr_test::ScratchDir;

namespace {

gguf::Array arr(gguf::ValueType t, std::vector<gguf::Value> v) { return gguf::Array{t, std::move(v)}; }

// Every metadata value type, nested arrays included.
std::vector<std::pair<std::string, gguf::Value>> all_metadata() {
    using V = gguf::Value;
    using T = gguf::ValueType;
    std::vector<std::pair<std::string, V>> m;
    m.emplace_back("general.architecture", V::string("test"));
    m.emplace_back("t.u8", V::u8(250));
    m.emplace_back("t.i8", V::i8(-120));
    m.emplace_back("t.u16", V::u16(65000));
    m.emplace_back("t.i16", V::i16(-32000));
    m.emplace_back("t.u32", V::u32(4000000000u));
    m.emplace_back("t.i32", V::i32(-2000000000));
    m.emplace_back("t.f32", V::f32(3.25f));
    m.emplace_back("t.bool_true", V::boolean(true));
    m.emplace_back("t.bool_false", V::boolean(false));
    m.emplace_back("t.string", V::string("h\xc3\xa9llo, w\xc3\xb6rld"));
    m.emplace_back("t.empty_string", V::string(""));
    m.emplace_back("t.u64", V::u64(0xFEDCBA9876543210ull));
    m.emplace_back("t.i64", V::i64(-0x123456789ABCDEFll));
    m.emplace_back("t.f64", V::f64(-1.0 / 3.0));
    m.emplace_back("t.arr_u8", V::array(arr(T::U8, {V::u8(1), V::u8(2), V::u8(255)})));
    m.emplace_back("t.arr_i32", V::array(arr(T::I32, {V::i32(-1), V::i32(7)})));
    m.emplace_back("t.arr_f32", V::array(arr(T::F32, {V::f32(0.5f), V::f32(-0.25f)})));
    m.emplace_back("t.arr_str", V::array(arr(T::String, {V::string("a"), V::string(""), V::string("ccc")})));
    m.emplace_back("t.arr_bool", V::array(arr(T::Bool, {V::boolean(true), V::boolean(false)})));
    m.emplace_back("t.arr_u64", V::array(arr(T::U64, {V::u64(1ull << 40)})));
    m.emplace_back("t.arr_i64", V::array(arr(T::I64, {V::i64(-5)})));
    m.emplace_back("t.arr_f64", V::array(arr(T::F64, {V::f64(2.5)})));
    m.emplace_back("t.arr_u16", V::array(arr(T::U16, {V::u16(9)})));
    m.emplace_back("t.arr_i16", V::array(arr(T::I16, {V::i16(-9)})));
    m.emplace_back("t.arr_u32", V::array(arr(T::U32, {V::u32(9)})));
    m.emplace_back("t.arr_i8", V::array(arr(T::I8, {V::i8(-9)})));
    m.emplace_back("t.arr_empty", V::array(arr(T::F32, {})));
    m.emplace_back("t.arr_nested",
                   V::array(arr(T::Array, {V::array(arr(T::U32, {V::u32(1), V::u32(2)})),
                                           V::array(arr(T::String, {V::string("x")})),
                                           V::array(arr(T::Array, {V::array(arr(T::I8, {V::i8(3)}))}))})));
    return m;
}

std::string error_of(const std::string &path) {
    try {
        gguf::File f(path);
    } catch (const kpr::Error &e) {
        return e.what();
    }
    return "(no error)";
}

// The message names the file and every one of `parts`, and is one line.
void expect_rejected(const std::string &path, std::initializer_list<std::string> parts) {
    const std::string msg = error_of(path);
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    for (const std::string &p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// A well-formed header with `n_tensors` / `n_kv`, then whatever the test appends.
Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    Bytes b;
    b.raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    return b;
}

// One tensor info.
Bytes &tensor_info(Bytes &b, const std::string &name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    b.str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) b.u64(d);
    return b.u32(type).u64(offset);
}

} // namespace

TEST(Gguf, RoundTripsEveryMetadataTypeAndTensors) {
    ScratchDir dir("roundtrip");
    const std::string path = dir.file("all.gguf");
    gguf::Writer w;
    const auto meta = all_metadata();
    for (const auto &[k, v] : meta) w.add(k, v);
    w.set_alignment(64);

    std::vector<float> f32(8 * 3);
    formats::fill_random_floats(1, f32.data(), f32.size());
    std::vector<uint8_t> f32b(f32.size() * 4);
    std::memcpy(f32b.data(), f32.data(), f32b.size());
    w.add_tensor("a.f32", KPR_TYPE_F32, {8, 3}, f32b);
    std::vector<uint8_t> q8(formats::row_bytes(KPR_TYPE_Q8_0, 64) * 5);
    formats::fill_random_blocks(KPR_TYPE_Q8_0, 2, q8.data(), 10);
    w.add_tensor_view("b.q8_0", KPR_TYPE_Q8_0, {64, 5}, q8.data(), q8.size());
    const uint64_t q4k_bytes = formats::row_bytes(KPR_TYPE_Q4_K, 512) * 3 * 4;
    w.add_tensor_generated("c.experts.q4_K", KPR_TYPE_Q4_K, {512, 3, 4}, [](uint8_t *dst, uint64_t bytes) {
        formats::fill_random_blocks(KPR_TYPE_Q4_K, 3, dst, bytes / 144);
    });
    std::vector<uint8_t> one(2);
    w.add_tensor("d.scalar_f16", KPR_TYPE_F16, {1}, one);
    w.write(path);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

    gguf::File f(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 64u);
    EXPECT_EQ(f.data_offset() % 64, 0u);
    ASSERT_EQ(f.metadata().size(), meta.size() + 1); // + general.alignment
    for (size_t i = 0; i < meta.size(); ++i) {
        EXPECT_EQ(f.metadata()[i].key, meta[i].first);
        EXPECT_TRUE(f.metadata()[i].value == meta[i].second) << meta[i].first << ": " << f.metadata()[i].value.to_string();
        ASSERT_NE(f.find(meta[i].first), nullptr);
    }
    EXPECT_EQ(f.get_u64("general.alignment"), 64u);
    EXPECT_EQ(f.get_string("general.architecture"), "test");
    EXPECT_EQ(f.get_u64("t.u8"), 250u);
    EXPECT_EQ(f.get_i64("t.i8"), -120);
    EXPECT_EQ(f.get_u64("t.u64"), 0xFEDCBA9876543210ull);
    EXPECT_EQ(f.get_f64("t.f32"), 3.25);
    EXPECT_EQ(f.get_f64("t.u32"), 4000000000.0);
    EXPECT_TRUE(f.get_bool("t.bool_true"));
    EXPECT_EQ(f.get_array("t.arr_str").items.size(), 3u);
    EXPECT_EQ(f.get_array("t.arr_empty").type, gguf::ValueType::F32);
    EXPECT_EQ(f.get_array("t.arr_nested").items[2].as_array()->items[0].as_array()->items[0].as_i64(), 3);
    EXPECT_EQ(f.get_u64_or("missing", 7), 7u);
    EXPECT_EQ(f.get_string_or("missing", "x"), "x");
    // Wrong types and missing keys name the file and the key.
    try {
        f.get_string("t.u8");
        FAIL();
    } catch (const kpr::Error &e) {
        EXPECT_NE(std::string(e.what()).find(path + ": key 't.u8'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(f.get_u64("t.i8"), kpr::Error); // negative
    EXPECT_THROW(f.get_bool("nope"), kpr::Error);

    ASSERT_EQ(f.tensors().size(), 4u);
    const gguf::Tensor &a = f.tensor("a.f32");
    EXPECT_EQ(a.type, static_cast<uint32_t>(KPR_TYPE_F32));
    EXPECT_EQ(a.ne, (std::vector<uint64_t>{8, 3}));
    EXPECT_EQ(a.bytes, f32b.size());
    EXPECT_EQ(std::memcmp(a.data, f32b.data(), a.bytes), 0);
    const gguf::Tensor &b = f.tensor("b.q8_0");
    EXPECT_EQ(std::memcmp(b.data, q8.data(), q8.size()), 0);
    EXPECT_EQ(b.offset % 64, 0u);
    const gguf::Tensor &c = f.tensor("c.experts.q4_K");
    EXPECT_EQ(c.bytes, q4k_bytes);
    std::vector<uint8_t> want(q4k_bytes);
    formats::fill_random_blocks(KPR_TYPE_Q4_K, 3, want.data(), q4k_bytes / 144);
    EXPECT_EQ(std::memcmp(c.data, want.data(), q4k_bytes), 0);
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
    EXPECT_THROW(f.tensor("nope"), kpr::Error);

    // The tensor -> op mapping.
    const gguf::TensorOp op = gguf::tensor_op(c);
    EXPECT_EQ(op.type, static_cast<uint32_t>(KPR_TYPE_Q4_K));
    EXPECT_EQ(op.cols, 512u);
    EXPECT_EQ(op.rows, 3u);
    EXPECT_EQ(op.n_experts, 4u);
    const kpr_op_desc d = gguf::make_op_desc(op, 2, 2, 1);
    EXPECT_EQ(d.kind, static_cast<uint32_t>(KPR_OP_GEMV_GROUPED));
    EXPECT_EQ(d.n_experts, 4u);
    EXPECT_EQ(d.n_used, 2u);
    const kpr_op_desc d2 = gguf::make_op_desc(gguf::tensor_op(b), 3);
    EXPECT_EQ(d2.kind, static_cast<uint32_t>(KPR_OP_GEMV));
    EXPECT_EQ(d2.rows, 5u);
    EXPECT_EQ(d2.cols, 64u);
    EXPECT_EQ(d2.ncols, 3u);
    EXPECT_EQ(d2.struct_size, sizeof(kpr_op_desc));

    // Moving keeps the mapping valid.
    gguf::File moved = std::move(f);
    EXPECT_EQ(std::memcmp(moved.tensor("a.f32").data, f32b.data(), f32b.size()), 0);
}

TEST(Gguf, ReadsVersion2) {
    ScratchDir dir("v2");
    const std::string path = dir.file("v2.gguf");
    Bytes b = header(1, 1, 2);
    b.str("general.name").u32(8).str("v2");
    tensor_info(b, "t", {4}, KPR_TYPE_F32, 0);
    b.pad_to(32).zeros(16);
    b.save(path);
    gguf::File f(path);
    EXPECT_EQ(f.version(), 2u);
    EXPECT_EQ(f.get_string("general.name"), "v2");
    EXPECT_EQ(f.tensor("t").bytes, 16u);
}

TEST(Gguf, WriterIsAtomic) {
    ScratchDir dir("atomic");
    const std::string path = dir.file("out.gguf");
    {
        gguf::Writer w;
        w.add_string("general.name", "first");
        w.write(path);
    }
    // A failure while writing leaves the previous file and no temporary.
    gguf::Writer bad;
    bad.add_string("general.name", "second");
    bad.add_tensor_generated("t", KPR_TYPE_F32, {4}, [](uint8_t *, uint64_t) { throw kpr::Error("boom"); });
    EXPECT_THROW(bad.write(path), kpr::Error);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    EXPECT_EQ(gguf::File(path).get_string("general.name"), "first");
    // The temporary is a new file of its own: a file named like the old fixed temporary (out.gguf.tmp) is
    // neither truncated nor removed, by a failed write or a successful one, and nothing else is left.
    std::ofstream(path + ".tmp", std::ios::binary) << "somebody's file";
    EXPECT_THROW(bad.write(path), kpr::Error);
    gguf::Writer good;
    good.add_string("general.name", "third");
    good.write(path);
    EXPECT_EQ(gguf::File(path).get_string("general.name"), "third");
    {
        std::ifstream in(path + ".tmp", std::ios::binary);
        EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "somebody's file");
    }
    size_t files = 0;
    for ([[maybe_unused]] auto &e : std::filesystem::directory_iterator(dir.path())) ++files;
    EXPECT_EQ(files, 2u);
    // An unwritable place throws and creates nothing.
    EXPECT_THROW(bad.write(dir.file("no/such/dir/x.gguf")), kpr::Error);
}

TEST(Gguf, WriterRejectsBadInput) {
    gguf::Writer w;
    w.add_u32("k", 1);
    EXPECT_THROW(w.add_u32("k", 2), kpr::Error);
    EXPECT_THROW(w.set_alignment(48), kpr::Error);
    EXPECT_THROW(w.add_string("general.alignment", "32"), kpr::Error);
    EXPECT_THROW(w.add_tensor("t", KPR_TYPE_Q8_0, {33, 1}, std::vector<uint8_t>(34)), kpr::Error);
    EXPECT_THROW(w.add_tensor("t", KPR_TYPE_F32, {4}, std::vector<uint8_t>(15)), kpr::Error);
    EXPECT_THROW(w.add_tensor("t", 99, {4}, std::vector<uint8_t>(16)), kpr::Error);
    EXPECT_THROW(w.add_tensor("t", KPR_TYPE_F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)), kpr::Error);
    EXPECT_THROW(w.add_tensor("t", KPR_TYPE_F32, {4, 0}, std::vector<uint8_t>()), kpr::Error);
    w.add_tensor("t", KPR_TYPE_F32, {4}, std::vector<uint8_t>(16));
    EXPECT_THROW(w.add_tensor("t", KPR_TYPE_F32, {4}, std::vector<uint8_t>(16)), kpr::Error);
    gguf::Array mixed{gguf::ValueType::U8, {gguf::Value::u8(1), gguf::Value::u16(2)}};
    EXPECT_THROW(w.add_array("mixed", mixed), kpr::Error);
}

// ---- a file that lies ---------------------------------------------------------------------------------

class GgufReject : public ::testing::Test {
protected:
    ScratchDir dir{"reject"};
    std::string save(const Bytes &b, const std::string &name = "model.gguf") {
        const std::string p = dir.file(name);
        b.save(p);
        return p;
    }
};

TEST_F(GgufReject, NotAFile) {
    const std::string p = dir.file("missing.gguf");
    expect_rejected(p, {"cannot open"});
    expect_rejected(dir.path().string(), {"not a regular file"});
}

TEST_F(GgufReject, EmptyFile) { expect_rejected(save(Bytes{}), {"header", "'magic'", "past the end"}); }

TEST_F(GgufReject, BadMagic) {
    Bytes b;
    b.raw("GGML").u32(3).u64(0).u64(0);
    expect_rejected(save(b), {"header", "'magic'", "not a GGUF file"});
}

TEST_F(GgufReject, UnsupportedVersion) {
    expect_rejected(save(header(0, 0, 1)), {"header", "'version'", "= 1"});
    expect_rejected(save(header(0, 0, 0x03000000u)), {"'version'", "big-endian"});
}

TEST_F(GgufReject, TruncatedHeader) {
    Bytes b;
    b.raw("GGUF").u32(3).u32(0); // tensor_count cut in half
    expect_rejected(save(b), {"header", "'tensor_count'", "past the end of the file (size 12)"});
}

TEST_F(GgufReject, HugeKvCount) {
    expect_rejected(save(header(0, uint64_t{1} << 60)), {"header", "'kv_count'", "1152921504606846976", "cannot fit"});
}

TEST_F(GgufReject, HugeTensorCount) {
    expect_rejected(save(header(~uint64_t{0}, 0)), {"header", "'tensor_count'", "cannot fit"});
}

TEST_F(GgufReject, KeyLengthPastEof) {
    Bytes b = header(0, 1);
    b.u64(1000000).raw("abcdefghijklmnopqrstuvwxyz");
    expect_rejected(save(b), {"key #0", "'key'", "string length 1000000", "past the end of the file"});
}

TEST_F(GgufReject, StringValueLengthPastEof) {
    Bytes b = header(0, 1);
    b.str("general.name").u32(8).u64(~uint64_t{0} - 3).raw("x");
    expect_rejected(save(b), {"key 'general.name'", "'value'", "string length", "past the end"});
}

TEST_F(GgufReject, HugeArrayCount) {
    Bytes b = header(0, 1);
    b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(uint64_t{1} << 60).str("a");
    expect_rejected(save(b), {"key 'tokenizer.ggml.tokens'", "'value count'", "cannot fit"});
}

TEST_F(GgufReject, TruncatedValue) {
    Bytes b = header(0, 1);
    b.str("k").u32(10).u32(7); // u64 cut short
    expect_rejected(save(b), {"key 'k'", "'value'", "past the end"});
}

TEST_F(GgufReject, UnknownValueType) {
    Bytes b = header(0, 1);
    b.str("k").u32(13).u64(0);
    expect_rejected(save(b), {"key 'k'", "'type' = 13"});
    Bytes c = header(0, 1);
    c.str("k").u32(9).u32(99).u64(0);
    expect_rejected(save(c), {"key 'k'", "'value element type' = 99"});
}

TEST_F(GgufReject, ArraysNestedTooDeep) {
    Bytes b = header(0, 1);
    b.str("deep").u32(9);
    for (int i = 0; i < 40; ++i) b.u32(9).u64(1);
    b.u32(0).u64(0);
    expect_rejected(save(b), {"key 'deep'", "nests arrays deeper"});
}

TEST_F(GgufReject, DuplicateKey) {
    Bytes b = header(0, 2);
    b.str("k").u32(4).u32(1).str("k").u32(4).u32(2);
    expect_rejected(save(b), {"key 'k'", "'key'", "duplicated"});
}

TEST_F(GgufReject, BadAlignment) {
    Bytes b = header(0, 1);
    b.str("general.alignment").u32(4).u32(48);
    expect_rejected(save(b), {"key 'general.alignment'", "not a power of two"});
    Bytes c = header(0, 1);
    c.str("general.alignment").u32(10).u64(32);
    expect_rejected(save(c), {"key 'general.alignment'", "'type'", "u64"});
}

TEST_F(GgufReject, TooManyDims) {
    Bytes b = header(1, 0);
    tensor_info(b, "blk.0.attn_q.weight", {32, 1, 1, 1, 1}, KPR_TYPE_F32, 0);
    expect_rejected(save(b), {"tensor 'blk.0.attn_q.weight'", "'n_dims' = 5"});
}

TEST_F(GgufReject, ZeroDimension) {
    Bytes b = header(1, 0);
    tensor_info(b, "w", {32, 0}, KPR_TYPE_F32, 0);
    expect_rejected(save(b), {"tensor 'w'", "'ne[1]' is 0"});
}

TEST_F(GgufReject, OverflowingDimensions) {
    Bytes b = header(1, 0);
    tensor_info(b, "w", {uint64_t{1} << 32, uint64_t{1} << 32}, KPR_TYPE_F32, 0);
    expect_rejected(save(b), {"tensor 'w'", "'ne[1]'", "overflow"});
    // Elements fit, bytes do not.
    Bytes c = header(1, 0);
    tensor_info(c, "w", {uint64_t{1} << 31, uint64_t{1} << 31}, KPR_TYPE_F32, 0);
    expect_rejected(save(c), {"tensor 'w'", "'ne'", "overflows"});
}

TEST_F(GgufReject, UnknownType) {
    Bytes b = header(1, 0);
    tensor_info(b, "w", {32, 2}, 99, 0);
    expect_rejected(save(b), {"tensor 'w'", "'type' = 99", "not a known GGML type"});
}

TEST_F(GgufReject, RaggedRow) {
    Bytes b = header(1, 0);
    tensor_info(b, "w", {48, 2}, KPR_TYPE_Q4_K, 0);
    expect_rejected(save(b), {"tensor 'w'", "'ne[0]' = 48", "q4_K block size 256"});
}

TEST_F(GgufReject, MisalignedOffset) {
    Bytes b = header(1, 0);
    tensor_info(b, "w", {4}, KPR_TYPE_F32, 8);
    b.pad_to(32).zeros(64);
    expect_rejected(save(b), {"tensor 'w'", "'offset' = 8", "alignment 32"});
}

TEST_F(GgufReject, DataPastEof) {
    Bytes b = header(1, 0);
    tensor_info(b, "blk.0.attn_q.weight", {4096, 1024}, KPR_TYPE_Q8_0, 4096);
    b.pad_to(32).zeros(100);
    const std::string p = save(b);
    const uint64_t size = b.b.size();
    expect_rejected(p, {"tensor 'blk.0.attn_q.weight'", "data [offset 4096, 4456448 bytes]",
                        "runs past the end of the file (size " + std::to_string(size) + ")"});
    // An offset that overflows when added to the data section's start.
    Bytes c = header(1, 0);
    tensor_info(c, "w", {4}, KPR_TYPE_F32, ~uint64_t{0} - 31);
    c.pad_to(32).zeros(16);
    expect_rejected(save(c), {"tensor 'w'", "runs past the end"});
}

TEST_F(GgufReject, DuplicateTensorName) {
    Bytes b = header(2, 0);
    tensor_info(b, "w", {4}, KPR_TYPE_F32, 0);
    tensor_info(b, "w", {4}, KPR_TYPE_F32, 32);
    b.pad_to(32).zeros(64);
    expect_rejected(save(b), {"tensor 'w'", "'name'", "duplicated"});
}

TEST_F(GgufReject, OverlappingTensors) {
    Bytes b = header(2, 0);
    tensor_info(b, "a", {16}, KPR_TYPE_F32, 0);
    tensor_info(b, "b", {4}, KPR_TYPE_F32, 32);
    b.pad_to(32).zeros(64);
    expect_rejected(save(b), {"tensor 'b'", "overlaps tensor 'a'"});
}

TEST_F(GgufReject, TensorInfoTruncated) {
    Bytes b = header(1, 0);
    b.str("w").u32(1).u64(32).u32(0).u32(0); // the offset cut in half
    expect_rejected(save(b), {"tensor 'w'", "'offset'", "past the end"});
}

TEST_F(GgufReject, EveryTruncationOfAValidFileFailsCleanly) {
    gguf::Writer w;
    for (const auto &[k, v] : all_metadata()) w.add(k, v);
    w.add_tensor("a", KPR_TYPE_Q8_0, {64, 2}, std::vector<uint8_t>(136, 1));
    w.add_tensor("b", KPR_TYPE_F16, {8}, std::vector<uint8_t>(16, 2));
    const std::string full = dir.file("full.gguf");
    w.write(full);
    std::vector<uint8_t> bytes(std::filesystem::file_size(full));
    {
        std::ifstream in(full, std::ios::binary);
        in.read(reinterpret_cast<char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    const std::string cut = dir.file("cut.gguf");
    // The last tensor ends before the final padding: cuts inside the padding still parse.
    const gguf::File ref(full);
    const uint64_t needed = static_cast<uint64_t>(ref.tensor("b").data - ref.bytes()) + 16;
    for (size_t n = 0; n < bytes.size(); ++n) {
        Bytes b;
        b.b.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        b.save(cut);
        if (n >= needed) {
            EXPECT_NO_THROW(gguf::File f(cut)) << n;
            continue;
        }
        const std::string msg = error_of(cut);
        ASSERT_EQ(msg.rfind(cut + ": ", 0), 0u) << "cut at " << n << ": " << msg;
    }
}

TEST_F(GgufReject, RandomCorruptionNeverCrashes) {
    gguf::Writer w;
    for (const auto &[k, v] : all_metadata()) w.add(k, v);
    w.add_tensor("a", KPR_TYPE_Q4_K, {256, 2}, std::vector<uint8_t>(288, 1));
    const std::string full = dir.file("full.gguf");
    w.write(full);
    std::vector<uint8_t> bytes(std::filesystem::file_size(full));
    {
        std::ifstream in(full, std::ios::binary);
        in.read(reinterpret_cast<char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    const uint64_t meta_end = gguf::File(full).data_offset();
    std::mt19937_64 rng(1234);
    const std::string bad = dir.file("bad.gguf");
    int rejected = 0;
    for (int iter = 0; iter < 2000; ++iter) {
        Bytes b;
        b.b = bytes;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            const size_t at = rng() % meta_end;
            b.b[at] = static_cast<uint8_t>(rng());
        }
        b.save(bad);
        try {
            gguf::File f(bad);
            for (const gguf::Tensor &t : f.tensors()) ASSERT_LE(t.data + t.bytes, f.bytes() + f.size());
        } catch (const kpr::Error &e) {
            ++rejected;
            ASSERT_EQ(std::string(e.what()).rfind(bad + ": ", 0), 0u) << e.what();
        }
    }
    EXPECT_GT(rejected, 100);
}

// ---- the metadata value limit ------------------------------------------------------------------------

// An element deep in an array is still named exactly (the names are built only for the message).
TEST_F(GgufReject, ArrayElementNamedInTheMessage) {
    Bytes b = header(0, 1);
    b.str("k").u32(9).u32(8).u64(3).str("a").str("b").u64(1000).raw("x");
    expect_rejected(save(b), {"key 'k'", "'value[2]' string length 1000", "past the end"});
    Bytes c = header(0, 1);
    c.str("n").u32(9).u32(9).u64(2).u32(0).u64(1).u8(7).u32(8).u64(2).str("x").u64(500).raw("y");
    expect_rejected(save(c), {"key 'n'", "'value[1][1]' string length 500", "past the end"});
}

// A u8 array takes one byte per element in the file but a whole Value in memory: a file of one huge array
// must be refused before it is decoded, naming the file and the key.
TEST_F(GgufReject, MetadataValuesOverTheLimit) {
    const uint64_t over = gguf::kMaxMetadataValues + 1;
    Bytes b = header(0, 1);
    b.str("tokenizer.ggml.token_type").u32(9).u32(0).u64(over).zeros(static_cast<size_t>(over));
    expect_rejected(save(b), {"key 'tokenizer.ggml.token_type'", "'value count' = 16777217",
                              "limit of 16777216 values"});

    // The limit is on the whole file: an array of arrays counts its elements and theirs.
    Bytes c = header(0, 1);
    c.str("nested").u32(9).u32(9).u64(2); // value[0], value[1]: 3 values with the key's own
    c.u32(0).u64(gguf::kMaxMetadataValues - 2).zeros(static_cast<size_t>(gguf::kMaxMetadataValues));
    expect_rejected(save(c), {"key 'nested'", "'value[0] count' = 16777214", "(3 before this one"});
}

// A tokenizer as large as real ones (Gemma 3's 262,144 tokens with scores and types, and merges) reads.
TEST(Gguf, ReadsARealisticallyLargeTokenizer) {
    ScratchDir dir("bigtok");
    const uint32_t n_tokens = 262144, n_merges = 300000;
    gguf::Array tokens{gguf::ValueType::String, {}}, scores{gguf::ValueType::F32, {}},
        types{gguf::ValueType::I32, {}}, merges{gguf::ValueType::String, {}};
    for (uint32_t i = 0; i < n_tokens; ++i) {
        tokens.items.push_back(gguf::Value::string("tok" + std::to_string(i)));
        scores.items.push_back(gguf::Value::f32(-static_cast<float>(i)));
        types.items.push_back(gguf::Value::i32(1));
    }
    for (uint32_t i = 0; i < n_merges; ++i) merges.items.push_back(gguf::Value::string("a" + std::to_string(i) + " b"));
    gguf::Writer w;
    w.add_string("general.architecture", "test");
    w.add_array("tokenizer.ggml.tokens", std::move(tokens));
    w.add_array("tokenizer.ggml.scores", std::move(scores));
    w.add_array("tokenizer.ggml.token_type", std::move(types));
    w.add_array("tokenizer.ggml.merges", std::move(merges));
    const std::string path = dir.file("tok.gguf");
    w.write(path);
    gguf::File f(path);
    EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").items.size(), n_tokens);
    EXPECT_EQ(*f.get_array("tokenizer.ggml.tokens").items[12345].as_string(), "tok12345");
    EXPECT_EQ(f.get_array("tokenizer.ggml.scores").items.size(), n_tokens);
    EXPECT_EQ(f.get_array("tokenizer.ggml.token_type").items.size(), n_tokens);
    EXPECT_EQ(f.get_array("tokenizer.ggml.merges").items.size(), n_merges);
}
