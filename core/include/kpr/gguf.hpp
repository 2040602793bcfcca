// kpr/gguf.hpp -- GGUF v2/v3 reader (memory-mapped, every field checked) and atomic v3 writer.
//
// The reader trusts nothing in the file: every count, length, dimension, offset and size is checked
// against the file size with overflow-safe arithmetic before it is used, and nothing is allocated from
// an unchecked count. A file that lies is rejected with a kpr::Error whose one-line message names the
// file, the key or tensor, and the field.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include <kpr/provider.h>

namespace kpr::gguf {

// GGUF metadata value types; the numbers are the file's.
enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
    String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12
};
// "u8", "i8", ..., "string", "array", "u64", "i64", "f64"; "type#N" for an unknown one.
std::string value_type_name(uint32_t type);

struct Value;

// An array value: its element type (kept even when empty) and the elements, each of that type.
struct Array {
    ValueType type = ValueType::U8;
    std::vector<Value> items;
};
bool operator==(const Array &a, const Array &b);

struct Value {
    // The alternative's index equals the ValueType number.
    using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                                 Array, uint64_t, int64_t, double>;
    Storage v;

    ValueType type() const { return static_cast<ValueType>(v.index()); }

    static Value u8(uint8_t x) { return {Storage(std::in_place_index<0>, x)}; }
    static Value i8(int8_t x) { return {Storage(std::in_place_index<1>, x)}; }
    static Value u16(uint16_t x) { return {Storage(std::in_place_index<2>, x)}; }
    static Value i16(int16_t x) { return {Storage(std::in_place_index<3>, x)}; }
    static Value u32(uint32_t x) { return {Storage(std::in_place_index<4>, x)}; }
    static Value i32(int32_t x) { return {Storage(std::in_place_index<5>, x)}; }
    static Value f32(float x) { return {Storage(std::in_place_index<6>, x)}; }
    static Value boolean(bool x) { return {Storage(std::in_place_index<7>, x)}; }
    static Value string(std::string x) { return {Storage(std::in_place_index<8>, std::move(x))}; }
    static Value array(Array x) { return {Storage(std::in_place_index<9>, std::move(x))}; }
    static Value u64(uint64_t x) { return {Storage(std::in_place_index<10>, x)}; }
    static Value i64(int64_t x) { return {Storage(std::in_place_index<11>, x)}; }
    static Value f64(double x) { return {Storage(std::in_place_index<12>, x)}; }
    // An array of `type` built from values of that type (throws kpr::Error on a mismatch).
    static Value array_of(ValueType type, std::vector<Value> items);

    bool is_integer() const; // u8..i64 (not bool)
    // The value as a number when it is an integer of any width that fits; nullopt otherwise.
    std::optional<uint64_t> as_u64() const;
    std::optional<int64_t> as_i64() const;
    // Any integer or float type.
    std::optional<double> as_f64() const;
    const std::string *as_string() const { return std::get_if<std::string>(&v); }
    const Array *as_array() const { return std::get_if<Array>(&v); }
    const bool *as_bool() const { return std::get_if<bool>(&v); }
    // A short rendering for messages and dumps ("3", "\"llama\"", "[u32 x 4]").
    std::string to_string() const;

    bool operator==(const Value &o) const;
};

struct KV {
    std::string key;
    Value value;
};

struct Tensor {
    std::string name;
    uint32_t type;           // GGML type id
    std::vector<uint64_t> ne; // ne[0] is the contiguous dimension
    uint64_t offset;         // relative to the data section, as stored in the file
    uint64_t bytes;          // row_bytes(type, ne[0]) * ne[1] * ...
    const uint8_t *data;     // into the mapping; valid while the File lives

    uint64_t elements() const;
};

// A weight tensor seen as an op: rows = ne1, cols = ne0, n_experts = ne2 (1 for a 2-D tensor).
struct TensorOp {
    uint32_t type;
    uint64_t rows;
    uint64_t cols;
    uint32_t n_experts;
    bool grouped() const { return n_experts > 1; }
};
// Throws kpr::Error (naming `file` and the tensor) unless the tensor has 1 to 3 dimensions (a 4th of 1 is
// allowed; a 1-D tensor is one row, since ggml drops trailing dimensions of 1).
TensorOp tensor_op(const Tensor &t, std::string_view file = {});
// The op descriptor for `op` with `ncols` activation columns; 3-D tensors give KPR_OP_GEMV_GROUPED.
kpr_op_desc make_op_desc(const TensorOp &op, uint32_t ncols, uint32_t n_used = 1, uint32_t x_slots = 1);

inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
// The most metadata values one file may hold, counting every array element (nested arrays too) and every
// key's value. Each decoded value takes about 40 bytes of memory whatever its size in the file (a u8 array
// element is one byte there), so this bounds the reader's memory at about 700 MB. Real models stay far below:
// the largest tokenizers hold about 262k tokens, with scores, token types and merges about a million values.
// A file past it is rejected with a kpr::Error naming the file and the key.
inline constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24; // 16,777,216

class File {
public:
    // Maps `path` read-only and parses it. Throws kpr::Error.
    static File open(const std::string &path);
    explicit File(const std::string &path);
    File(File &&o) noexcept;
    File &operator=(File &&o) noexcept;
    File(const File &) = delete;
    File &operator=(const File &) = delete;
    ~File();

    const std::string &path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; } // absolute offset of the data section
    uint64_t size() const { return size_; }
    const uint8_t *bytes() const { return base_; }

    const std::vector<KV> &metadata() const { return kvs_; }
    const Value *find(std::string_view key) const;
    // Typed getters: throw kpr::Error naming the file and key when missing or of the wrong type.
    // get_u64 / get_i64 accept any integer type whose value fits; get_f64 any number.
    std::string get_string(std::string_view key) const;
    uint64_t get_u64(std::string_view key) const;
    int64_t get_i64(std::string_view key) const;
    double get_f64(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    const Array &get_array(std::string_view key) const;
    // As above, `def` when the key is missing (still throws on a wrong type).
    std::string get_string_or(std::string_view key, std::string def) const;
    uint64_t get_u64_or(std::string_view key, uint64_t def) const;
    double get_f64_or(std::string_view key, double def) const;

    const std::vector<Tensor> &tensors() const { return tensors_; }
    const Tensor *find_tensor(std::string_view name) const;
    // Throws kpr::Error naming the file and the tensor when absent.
    const Tensor &tensor(std::string_view name) const;

private:
    File() = default;
    void parse();
    void unmap() noexcept;

    std::string path_;
    const uint8_t *base_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<KV> kvs_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<Tensor> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

// Writes GGUF v3. Metadata and tensors are written in the order added. write() is atomic: it writes a
// new temporary next to `path` (a unique name, created with O_EXCL, so no existing file is truncated)
// and renames it over `path`, removing that temporary on any failure.
class Writer {
public:
    // Power of two; stored as the u32 key general.alignment (default 32, then not written).
    void set_alignment(uint32_t alignment);
    uint32_t alignment() const { return alignment_; }

    // Throws kpr::Error on a duplicate key.
    void add(std::string key, Value value);
    void add_u8(std::string key, uint8_t v) { add(std::move(key), Value::u8(v)); }
    void add_i8(std::string key, int8_t v) { add(std::move(key), Value::i8(v)); }
    void add_u16(std::string key, uint16_t v) { add(std::move(key), Value::u16(v)); }
    void add_i16(std::string key, int16_t v) { add(std::move(key), Value::i16(v)); }
    void add_u32(std::string key, uint32_t v) { add(std::move(key), Value::u32(v)); }
    void add_i32(std::string key, int32_t v) { add(std::move(key), Value::i32(v)); }
    void add_f32(std::string key, float v) { add(std::move(key), Value::f32(v)); }
    void add_bool(std::string key, bool v) { add(std::move(key), Value::boolean(v)); }
    void add_string(std::string key, std::string v) { add(std::move(key), Value::string(std::move(v))); }
    void add_u64(std::string key, uint64_t v) { add(std::move(key), Value::u64(v)); }
    void add_i64(std::string key, int64_t v) { add(std::move(key), Value::i64(v)); }
    void add_f64(std::string key, double v) { add(std::move(key), Value::f64(v)); }
    void add_array(std::string key, Array a) { add(std::move(key), Value::array(std::move(a))); }

    // A tensor of `type` with dims `ne` (1..4, each > 0; ne[0] a multiple of the block). `bytes` must be
    // row_bytes(type, ne[0]) * ne[1] * ...; throws kpr::Error naming the tensor otherwise, or on a
    // duplicate name.
    void add_tensor(std::string name, uint32_t type, std::vector<uint64_t> ne, std::vector<uint8_t> data);
    // Not copied: `data` must stay valid until write() returns.
    void add_tensor_view(std::string name, uint32_t type, std::vector<uint64_t> ne, const void *data,
                         uint64_t bytes);
    // Filled at write time into a buffer of the tensor's size (one tensor in memory at a time).
    void add_tensor_generated(std::string name, uint32_t type, std::vector<uint64_t> ne,
                              std::function<void(uint8_t *dst, uint64_t bytes)> fill);

    size_t tensor_count() const { return tensors_.size(); }
    void write(const std::string &path) const;
    // The same bytes to an open stream, without flushing, closing or renaming it: for a caller that
    // manages its own temporary (kpr requant). Errors name `name`.
    void write_stream(std::FILE *out, const std::string &name) const;

private:
    struct PendingTensor {
        std::string name;
        uint32_t type;
        std::vector<uint64_t> ne;
        uint64_t bytes;
        std::vector<uint8_t> owned;
        const uint8_t *view = nullptr;
        std::function<void(uint8_t *, uint64_t)> fill;
    };
    uint64_t checked_bytes(const std::string &name, uint32_t type, const std::vector<uint64_t> &ne) const;
    void add_pending(PendingTensor t);

    uint32_t alignment_ = kDefaultAlignment;
    std::vector<KV> kvs_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<PendingTensor> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

} // namespace kpr::gguf
