// GGUF reader: read-only memory map, every field checked against the file size.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <sstream>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kpr::gguf {

std::string value_type_name(uint32_t type) {
    static const char *const names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    if (type < 13) return names[type];
    return "type#" + std::to_string(type);
}

// ---- Value ------------------------------------------------------------------------------------------

Value Value::array_of(ValueType type, std::vector<Value> items) {
    for (size_t i = 0; i < items.size(); ++i)
        if (items[i].type() != type)
            throw Error("gguf array: element " + std::to_string(i) + " is " +
                        value_type_name(static_cast<uint32_t>(items[i].type())) + ", the array holds " +
                        value_type_name(static_cast<uint32_t>(type)));
    return array(Array{type, std::move(items)});
}

bool Value::is_integer() const {
    switch (type()) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
    default: return false;
    }
}

std::optional<uint64_t> Value::as_u64() const {
    return std::visit(
        [](const auto &x) -> std::optional<uint64_t> {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
                if constexpr (std::is_signed_v<T>)
                    if (x < 0) return std::nullopt;
                return static_cast<uint64_t>(x);
            } else {
                return std::nullopt;
            }
        },
        v);
}

std::optional<int64_t> Value::as_i64() const {
    return std::visit(
        [](const auto &x) -> std::optional<int64_t> {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
                if constexpr (std::is_same_v<T, uint64_t>)
                    if (x > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
                return static_cast<int64_t>(x);
            } else {
                return std::nullopt;
            }
        },
        v);
}

std::optional<double> Value::as_f64() const {
    return std::visit(
        [](const auto &x) -> std::optional<double> {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
                return static_cast<double>(x);
            else
                return std::nullopt;
        },
        v);
}

std::string Value::to_string() const {
    return std::visit(
        [](const auto &x) -> std::string {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, bool>) {
                return x ? "true" : "false";
            } else if constexpr (std::is_same_v<T, std::string>) {
                std::string s = "\"";
                s += x.size() > 60 ? x.substr(0, 57) + "..." : x;
                return s + "\"";
            } else if constexpr (std::is_same_v<T, Array>) {
                return "[" + value_type_name(static_cast<uint32_t>(x.type)) + " x " + std::to_string(x.items.size()) +
                       "]";
            } else if constexpr (std::is_floating_point_v<T>) {
                std::ostringstream o;
                o.precision(std::is_same_v<T, float> ? 9 : 17);
                o << x;
                return o.str();
            } else {
                return std::to_string(static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(x));
            }
        },
        v);
}

bool operator==(const Array &a, const Array &b) { return a.type == b.type && a.items == b.items; }

bool Value::operator==(const Value &o) const { return v == o.v; }

uint64_t Tensor::elements() const {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    return n;
}

// ---- tensor -> op -------------------------------------------------------------------------------------

TensorOp tensor_op(const Tensor &t, std::string_view file) {
    const std::string where = (file.empty() ? std::string() : std::string(file) + ": ") + "tensor '" + t.name + "'";
    // ggml drops trailing dimensions of 1, so a one-row matrix is stored 1-D.
    if (t.ne.empty()) throw Error(where + ": field 'n_dims' is 0; a weight matrix needs 1 to 3 dimensions");
    if (t.ne.size() == 4 && t.ne[3] != 1)
        throw Error(where + ": field 'ne[3]' = " + std::to_string(t.ne[3]) + "; a weight tensor has at most 3 dimensions");
    TensorOp op{t.type, t.ne.size() >= 2 ? t.ne[1] : 1, t.ne[0], 1};
    if (t.ne.size() >= 3) {
        if (t.ne[2] > UINT32_MAX) throw Error(where + ": field 'ne[2]' = " + std::to_string(t.ne[2]) + " experts is too many");
        op.n_experts = static_cast<uint32_t>(t.ne[2]);
    }
    return op;
}

kpr_op_desc make_op_desc(const TensorOp &op, uint32_t ncols, uint32_t n_used, uint32_t x_slots) {
    kpr_op_desc d{};
    d.struct_size = sizeof(kpr_op_desc);
    d.kind = op.grouped() ? KPR_OP_GEMV_GROUPED : KPR_OP_GEMV;
    d.weight_type = op.type;
    d.ncols = ncols;
    d.rows = op.rows;
    d.cols = op.cols;
    d.n_experts = op.n_experts;
    d.n_used = op.grouped() ? n_used : 1;
    d.x_slots = op.grouped() ? x_slots : 1;
    return d;
}

// ---- the parser ------------------------------------------------------------------------------------

namespace {

constexpr int kMaxArrayDepth = 16;

uint64_t min_value_bytes(uint32_t type) {
    switch (static_cast<ValueType>(type)) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: case ValueType::String: return 8;
    case ValueType::Array: return 12;
    }
    return 1;
}

// The name of a metadata field ("value", "value[3]", "value[3][0]"), spelt out only when a message needs
// it: an array of millions of elements must not build millions of strings.
struct FieldName {
    const std::string *base = nullptr; // the top-level name (parent == nullptr)
    const FieldName *parent = nullptr; // the array this is an element of
    uint64_t index = 0;
    std::string str() const { return parent ? parent->str() + "[" + std::to_string(index) + "]" : *base; }
};

inline std::string field_str(const std::string &s) { return s; }
inline std::string field_str(const FieldName &f) { return f.str(); }

class Cursor {
public:
    Cursor(const std::string &file, const uint8_t *base, uint64_t size) : file_(file), base_(base), size_(size) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }
    uint64_t values() const { return values_; }
    [[noreturn]] void fail(const std::string &where, const std::string &what) const {
        throw Error(file_ + ": " + where + ": " + what);
    }

    template <typename F>
    void need(uint64_t n, const std::string &where, const F &field, const char *suffix = "") const {
        if (n > remaining())
            fail(where, "field '" + field_str(field) + suffix + "' (" + std::to_string(n) + " bytes at offset " +
                            std::to_string(pos_) + ") runs past the end of the file (size " + std::to_string(size_) +
                            ")");
    }

    template <typename T, typename F>
    T read(const std::string &where, const F &field, const char *suffix = "") {
        need(sizeof(T), where, field, suffix);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    template <typename F>
    std::string read_string(const std::string &where, const F &field) {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>(where, field, " length");
        if (len > remaining())
            fail(where, "field '" + field_str(field) + "' string length " + std::to_string(len) + " at offset " +
                            std::to_string(at) + " runs past the end of the file (size " + std::to_string(size_) + ")");
        std::string s(reinterpret_cast<const char *>(base_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

    // A count of elements at least `min_each` bytes long each must fit in what is left of the file.
    template <typename F>
    void check_count(uint64_t count, uint64_t min_each, const std::string &where, const F &field,
                     const char *suffix = "") const {
        if (count > remaining() / min_each)
            fail(where, "field '" + field_str(field) + suffix + "' = " + std::to_string(count) + " cannot fit in the " +
                            std::to_string(remaining()) + " bytes left of the file (size " + std::to_string(size_) +
                            "; each entry needs at least " + std::to_string(min_each) + " bytes)");
    }

    // Counts `n` more decoded metadata values against kMaxMetadataValues (each costs about 40 bytes of
    // memory however small it is in the file).
    template <typename F>
    void add_values(uint64_t n, const std::string &where, const F &field, const char *suffix = "") {
        if (n > kMaxMetadataValues - values_)
            fail(where, "field '" + field_str(field) + suffix + "' = " + std::to_string(n) +
                            " takes the file's metadata past kpr's limit of " + std::to_string(kMaxMetadataValues) +
                            " values in all (" + std::to_string(values_) +
                            " before this one; real models have about a million at most)");
        values_ += n;
    }

    Value read_value(uint32_t type, const std::string &where, const FieldName &field, int depth) {
        switch (static_cast<ValueType>(type)) {
        case ValueType::U8: return Value::u8(read<uint8_t>(where, field));
        case ValueType::I8: return Value::i8(read<int8_t>(where, field));
        case ValueType::U16: return Value::u16(read<uint16_t>(where, field));
        case ValueType::I16: return Value::i16(read<int16_t>(where, field));
        case ValueType::U32: return Value::u32(read<uint32_t>(where, field));
        case ValueType::I32: return Value::i32(read<int32_t>(where, field));
        case ValueType::F32: return Value::f32(read<float>(where, field));
        case ValueType::Bool: return Value::boolean(read<uint8_t>(where, field) != 0);
        case ValueType::String: return Value::string(read_string(where, field));
        case ValueType::U64: return Value::u64(read<uint64_t>(where, field));
        case ValueType::I64: return Value::i64(read<int64_t>(where, field));
        case ValueType::F64: return Value::f64(read<double>(where, field));
        case ValueType::Array: {
            if (depth >= kMaxArrayDepth)
                fail(where, "field '" + field.str() + "' nests arrays deeper than " + std::to_string(kMaxArrayDepth));
            const uint32_t et = read<uint32_t>(where, field, " element type");
            if (et > 12)
                fail(where, "field '" + field.str() + " element type' = " + std::to_string(et) +
                                " is not a GGUF value type");
            const uint64_t n = read<uint64_t>(where, field, " count");
            check_count(n, min_value_bytes(et), where, field, " count");
            add_values(n, where, field, " count");
            Array a;
            a.type = static_cast<ValueType>(et);
            // n is bounded by the file size and by kMaxMetadataValues, so this can be reserved at once.
            a.items.reserve(static_cast<size_t>(n));
            for (uint64_t i = 0; i < n; ++i) {
                const FieldName element{nullptr, &field, i};
                a.items.push_back(read_value(et, where, element, depth + 1));
            }
            return Value::array(std::move(a));
        }
        }
        fail(where, "field '" + field.str() + " type' = " + std::to_string(type) + " is not a GGUF value type");
    }

private:
    const std::string &file_;
    const uint8_t *base_;
    uint64_t size_;
    uint64_t pos_ = 0;
    uint64_t values_ = 0; // metadata values decoded so far, array elements included
};

std::string quoted(const std::string &s) {
    std::string out = "'";
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "'";
}

} // namespace

File File::open(const std::string &path) { return File(path); }

File::File(const std::string &path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throw Error(path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
        void *p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            throw Error(path + ": cannot map " + std::to_string(size_) + " bytes: " + std::strerror(e));
        }
        base_ = static_cast<const uint8_t *>(p);
    }
    ::close(fd);
    try {
        parse();
    } catch (...) {
        unmap();
        throw;
    }
}

File::File(File &&o) noexcept { *this = std::move(o); }

File &File::operator=(File &&o) noexcept {
    if (this != &o) {
        unmap();
        path_ = std::move(o.path_);
        base_ = std::exchange(o.base_, nullptr);
        size_ = std::exchange(o.size_, 0);
        version_ = o.version_;
        alignment_ = o.alignment_;
        data_offset_ = o.data_offset_;
        kvs_ = std::move(o.kvs_);
        kv_index_ = std::move(o.kv_index_);
        tensors_ = std::move(o.tensors_);
        tensor_index_ = std::move(o.tensor_index_);
    }
    return *this;
}

File::~File() { unmap(); }

void File::unmap() noexcept {
    if (base_) ::munmap(const_cast<uint8_t *>(base_), static_cast<size_t>(size_));
    base_ = nullptr;
}

void File::parse() {
    Cursor c(path_, base_, size_);
    const std::string hdr = "header";
    const uint32_t magic = c.read<uint32_t>(hdr, "magic");
    if (magic != 0x46554747u) { // "GGUF" little-endian
        char buf[96];
        std::snprintf(buf, sizeof buf, "field 'magic' is 0x%08x, not \"GGUF\": not a GGUF file", magic);
        c.fail(hdr, buf);
    }
    version_ = c.read<uint32_t>(hdr, "version");
    if (version_ != 2 && version_ != 3) {
        if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3)
            c.fail(hdr, "field 'version' is byte-swapped: big-endian GGUF files are not supported");
        c.fail(hdr, "field 'version' = " + std::to_string(version_) + " is not supported (2 or 3)");
    }
    const uint64_t n_tensors = c.read<uint64_t>(hdr, "tensor_count");
    const uint64_t n_kv = c.read<uint64_t>(hdr, "kv_count");
    // Each key/value needs at least 8 (key length) + 4 (type) + 1 bytes, each tensor info 8 + 4 + 4 + 8.
    c.check_count(n_kv, 13, hdr, "kv_count");
    c.check_count(n_tensors, 24, hdr, "tensor_count");

    kvs_.reserve(static_cast<size_t>(std::min<uint64_t>(n_kv, 4096)));
    for (uint64_t i = 0; i < n_kv; ++i) {
        const std::string at = "key #" + std::to_string(i);
        std::string key = c.read_string(at, "key");
        const std::string where = "key " + quoted(key);
        const uint32_t type = c.read<uint32_t>(where, "type");
        if (type > 12) c.fail(where, "field 'type' = " + std::to_string(type) + " is not a GGUF value type");
        static const std::string kValue = "value";
        c.add_values(1, where, kValue);
        Value v = c.read_value(type, where, FieldName{&kValue}, 0);
        if (kv_index_.count(key))
            c.fail(where, "field 'key' is duplicated (first seen as key #" + std::to_string(kv_index_[key]) + ")");
        kv_index_.emplace(key, kvs_.size());
        kvs_.push_back(KV{std::move(key), std::move(v)});
    }

    if (const Value *a = find("general.alignment")) {
        const auto *u = std::get_if<uint32_t>(&a->v);
        if (!u)
            c.fail("key 'general.alignment'", "field 'type' is " + value_type_name(static_cast<uint32_t>(a->type())) +
                                                  ", expected u32");
        if (*u == 0 || (*u & (*u - 1)) != 0)
            c.fail("key 'general.alignment'", "field 'value' = " + std::to_string(*u) + " is not a power of two");
        alignment_ = *u;
    }

    tensors_.reserve(static_cast<size_t>(std::min<uint64_t>(n_tensors, 4096)));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        const std::string at = "tensor #" + std::to_string(i);
        Tensor t{};
        t.name = c.read_string(at, "name");
        const std::string where = "tensor " + quoted(t.name);
        const uint32_t n_dims = c.read<uint32_t>(where, "n_dims");
        if (n_dims > kMaxDims)
            c.fail(where, "field 'n_dims' = " + std::to_string(n_dims) + " exceeds the maximum " + std::to_string(kMaxDims));
        t.ne.resize(n_dims);
        uint64_t elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const std::string f = "ne[" + std::to_string(d) + "]";
            t.ne[d] = c.read<uint64_t>(where, f);
            if (t.ne[d] == 0) c.fail(where, "field '" + f + "' is 0");
            if (t.ne[d] > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(elements, t.ne[d], &elements) ||
                elements > static_cast<uint64_t>(INT64_MAX))
                c.fail(where, "field '" + f + "' = " + std::to_string(t.ne[d]) + " makes the element count overflow");
        }
        t.type = c.read<uint32_t>(where, "type");
        const formats::TypeInfo *ti = formats::type_info(t.type);
        if (!ti) c.fail(where, "field 'type' = " + std::to_string(t.type) + " is not a known GGML type");
        const uint64_t ne0 = n_dims ? t.ne[0] : 1;
        if (ne0 % ti->block_size != 0)
            c.fail(where, "field 'ne[0]' = " + std::to_string(ne0) + " is not a multiple of the " + ti->name +
                              " block size " + std::to_string(ti->block_size));
        uint64_t bytes = (ne0 / ti->block_size);
        bool ovf = __builtin_mul_overflow(bytes, static_cast<uint64_t>(ti->block_bytes), &bytes);
        for (uint32_t d = 1; d < n_dims && !ovf; ++d) ovf = __builtin_mul_overflow(bytes, t.ne[d], &bytes);
        if (ovf) c.fail(where, "field 'ne' gives a byte size that overflows 64 bits");
        t.bytes = bytes;
        t.offset = c.read<uint64_t>(where, "offset");
        if (tensor_index_.count(t.name))
            c.fail(where, "field 'name' is duplicated (first seen as tensor #" + std::to_string(tensor_index_[t.name]) + ")");
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment.
    const uint64_t end_info = c.pos();
    uint64_t padded = 0;
    if (__builtin_add_overflow(end_info, alignment_ - 1, &padded))
        c.fail("header", "data section offset overflows");
    data_offset_ = padded / alignment_ * alignment_;

    for (Tensor &t : tensors_) {
        const std::string where = "tensor " + quoted(t.name);
        if (t.offset % alignment_ != 0)
            c.fail(where, "field 'offset' = " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                              std::to_string(alignment_));
        uint64_t begin = 0, end = 0;
        if (__builtin_add_overflow(data_offset_, t.offset, &begin) || __builtin_add_overflow(begin, t.bytes, &end) ||
            end > size_)
            c.fail(where, "data [offset " + std::to_string(t.offset) + ", " + std::to_string(t.bytes) +
                              " bytes] runs past the end of the file (size " + std::to_string(size_) + ")");
        t.data = base_ + begin;
    }

    // No two tensors may share bytes.
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
        const Tensor &prev = tensors_[order[k - 1]];
        const Tensor &cur = tensors_[order[k]];
        if (prev.offset + prev.bytes > cur.offset)
            c.fail("tensor " + quoted(cur.name), "data [offset " + std::to_string(cur.offset) + ", " +
                                                     std::to_string(cur.bytes) + " bytes] overlaps tensor " +
                                                     quoted(prev.name) + " [offset " + std::to_string(prev.offset) +
                                                     ", " + std::to_string(prev.bytes) + " bytes]");
    }
}

// ---- lookups -----------------------------------------------------------------------------------------

const Value *File::find(std::string_view key) const {
    auto it = kv_index_.find(std::string(key));
    return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

namespace {
[[noreturn]] void wrong_type(const std::string &file, std::string_view key, const Value &v, const char *want) {
    throw Error(file + ": key '" + std::string(key) + "': field 'type' is " +
                value_type_name(static_cast<uint32_t>(v.type())) + " (" + v.to_string() + "), expected " + want);
}
} // namespace

#define KPR_GGUF_REQUIRE(key)                                                                                     \
    const Value *v = find(key);                                                                                   \
    if (!v) throw Error(path_ + ": key '" + std::string(key) + "' is missing")

std::string File::get_string(std::string_view key) const {
    KPR_GGUF_REQUIRE(key);
    if (const std::string *s = v->as_string()) return *s;
    wrong_type(path_, key, *v, "string");
}
uint64_t File::get_u64(std::string_view key) const {
    KPR_GGUF_REQUIRE(key);
    if (auto x = v->as_u64()) return *x;
    wrong_type(path_, key, *v, "a non-negative integer");
}
int64_t File::get_i64(std::string_view key) const {
    KPR_GGUF_REQUIRE(key);
    if (auto x = v->as_i64()) return *x;
    wrong_type(path_, key, *v, "an integer that fits i64");
}
double File::get_f64(std::string_view key) const {
    KPR_GGUF_REQUIRE(key);
    if (auto x = v->as_f64()) return *x;
    wrong_type(path_, key, *v, "a number");
}
bool File::get_bool(std::string_view key) const {
    KPR_GGUF_REQUIRE(key);
    if (const bool *b = v->as_bool()) return *b;
    wrong_type(path_, key, *v, "bool");
}
const Array &File::get_array(std::string_view key) const {
    KPR_GGUF_REQUIRE(key);
    if (const Array *a = v->as_array()) return *a;
    wrong_type(path_, key, *v, "array");
}
#undef KPR_GGUF_REQUIRE

std::string File::get_string_or(std::string_view key, std::string def) const {
    return find(key) ? get_string(key) : def;
}
uint64_t File::get_u64_or(std::string_view key, uint64_t def) const { return find(key) ? get_u64(key) : def; }
double File::get_f64_or(std::string_view key, double def) const { return find(key) ? get_f64(key) : def; }

const Tensor *File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const Tensor &File::tensor(std::string_view name) const {
    if (const Tensor *t = find_tensor(name)) return *t;
    throw Error(path_ + ": tensor '" + std::string(name) + "' is not in the file");
}

} // namespace kpr::gguf
