// GGUF v3 writer: everything in memory order, written to a temporary of its own, then renamed over `path`.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include "../util/atomic_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <unistd.h>

namespace kpr::gguf {
namespace {

// Bytes to an open stream, counting the offset; errors name `name_` (the file being written).
class Out {
public:
    Out(std::FILE *f, const std::string &name) : name_(name), f_(f) {
        if (!f_) throw Error(name_ + ": internal error: no stream to write the GGUF file to");
    }
    void bytes(const void *p, uint64_t n) {
        if (n && std::fwrite(p, 1, static_cast<size_t>(n), f_) != n)
            throw Error(name_ + ": write failed at offset " + std::to_string(pos_) + ": " + std::strerror(errno));
        pos_ += n;
    }
    template <typename T>
    void pod(T v) {
        bytes(&v, sizeof v);
    }
    void str(const std::string &s) {
        pod<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void pad_to(uint64_t alignment) {
        static const uint8_t zeros[256] = {};
        uint64_t pad = (alignment - pos_ % alignment) % alignment;
        while (pad) {
            const uint64_t k = pad < sizeof zeros ? pad : sizeof zeros;
            bytes(zeros, k);
            pad -= k;
        }
    }
    uint64_t pos() const { return pos_; }

private:
    std::string name_;
    std::FILE *f_ = nullptr;
    uint64_t pos_ = 0;
};

void write_value(Out &o, const Value &v) {
    std::visit(
        [&](const auto &x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, bool>) {
                o.pod<uint8_t>(x ? 1 : 0);
            } else if constexpr (std::is_same_v<T, std::string>) {
                o.str(x);
            } else if constexpr (std::is_same_v<T, Array>) {
                o.pod<uint32_t>(static_cast<uint32_t>(x.type));
                o.pod<uint64_t>(x.items.size());
                for (const Value &e : x.items) write_value(o, e);
            } else {
                o.pod<T>(x);
            }
        },
        v.v);
}

void check_array(const std::string &key, const Value &v) {
    const Array *a = v.as_array();
    if (!a) return;
    for (size_t i = 0; i < a->items.size(); ++i) {
        if (a->items[i].type() != a->type)
            throw Error("gguf writer: key '" + key + "': element " + std::to_string(i) + " is " +
                        value_type_name(static_cast<uint32_t>(a->items[i].type())) + ", the array holds " +
                        value_type_name(static_cast<uint32_t>(a->type)));
        check_array(key, a->items[i]);
    }
}

} // namespace

void Writer::set_alignment(uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        throw Error("gguf writer: alignment " + std::to_string(alignment) + " is not a power of two");
    alignment_ = alignment;
    auto it = kv_index_.find("general.alignment");
    if (it != kv_index_.end())
        kvs_[it->second].value = Value::u32(alignment);
    else if (alignment != kDefaultAlignment)
        add("general.alignment", Value::u32(alignment));
}

void Writer::add(std::string key, Value value) {
    if (kv_index_.count(key)) throw Error("gguf writer: key '" + key + "' added twice");
    check_array(key, value);
    if (key == "general.alignment") {
        const auto *u = std::get_if<uint32_t>(&value.v);
        if (!u || *u == 0 || (*u & (*u - 1)) != 0)
            throw Error("gguf writer: key 'general.alignment' must be a u32 power of two, got " +
                        value_type_name(static_cast<uint32_t>(value.type())) + " " + value.to_string());
        alignment_ = *u;
    }
    kv_index_.emplace(key, kvs_.size());
    kvs_.push_back(KV{std::move(key), std::move(value)});
}

uint64_t Writer::checked_bytes(const std::string &name, uint32_t type, const std::vector<uint64_t> &ne) const {
    const std::string where = "gguf writer: tensor '" + name + "'";
    if (tensor_index_.count(name)) throw Error(where + " added twice");
    const formats::TypeInfo *ti = formats::type_info(type);
    if (!ti) throw Error(where + ": type " + std::to_string(type) + " is not a known GGML type");
    if (ne.empty() || ne.size() > kMaxDims)
        throw Error(where + ": " + std::to_string(ne.size()) + " dimensions (1.." + std::to_string(kMaxDims) + ")");
    for (size_t d = 0; d < ne.size(); ++d)
        if (ne[d] == 0) throw Error(where + ": ne[" + std::to_string(d) + "] is 0");
    if (ne[0] % ti->block_size != 0)
        throw Error(where + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " + ti->name +
                    " block size " + std::to_string(ti->block_size));
    uint64_t bytes = formats::row_bytes(type, ne[0]);
    for (size_t d = 1; d < ne.size(); ++d)
        if (__builtin_mul_overflow(bytes, ne[d], &bytes)) throw Error(where + ": byte size overflows 64 bits");
    return bytes;
}

void Writer::add_pending(PendingTensor t) {
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
}

void Writer::add_tensor(std::string name, uint32_t type, std::vector<uint64_t> ne, std::vector<uint8_t> data) {
    const uint64_t bytes = checked_bytes(name, type, ne);
    if (data.size() != bytes)
        throw Error("gguf writer: tensor '" + name + "': " + std::to_string(data.size()) + " bytes given, " +
                    formats::type_name(type) + " of this shape needs " + std::to_string(bytes));
    PendingTensor t{std::move(name), type, std::move(ne), bytes, std::move(data), nullptr, {}};
    add_pending(std::move(t));
}

void Writer::add_tensor_view(std::string name, uint32_t type, std::vector<uint64_t> ne, const void *data,
                             uint64_t bytes) {
    const uint64_t need = checked_bytes(name, type, ne);
    if (bytes != need)
        throw Error("gguf writer: tensor '" + name + "': " + std::to_string(bytes) + " bytes given, " +
                    formats::type_name(type) + " of this shape needs " + std::to_string(need));
    if (!data) throw Error("gguf writer: tensor '" + name + "': null data");
    PendingTensor t{std::move(name), type, std::move(ne), bytes, {}, static_cast<const uint8_t *>(data), {}};
    add_pending(std::move(t));
}

void Writer::add_tensor_generated(std::string name, uint32_t type, std::vector<uint64_t> ne,
                                  std::function<void(uint8_t *, uint64_t)> fill) {
    const uint64_t bytes = checked_bytes(name, type, ne);
    if (!fill) throw Error("gguf writer: tensor '" + name + "': no fill function");
    PendingTensor t{std::move(name), type, std::move(ne), bytes, {}, nullptr, std::move(fill)};
    add_pending(std::move(t));
}

void Writer::write(const std::string &path) const {
    // A temporary of our own (unique name, O_EXCL), renamed over `path` once complete.
    util::TempFile tmp(path);
    write_stream(tmp.stream(), path);
    tmp.commit();
}

void Writer::write_stream(std::FILE *out, const std::string &name) const {
    Out o(out, name);
    o.pod<uint32_t>(0x46554747u); // "GGUF"
    o.pod<uint32_t>(3);
    o.pod<uint64_t>(tensors_.size());
    o.pod<uint64_t>(kvs_.size());
    for (const KV &kv : kvs_) {
        o.str(kv.key);
        o.pod<uint32_t>(static_cast<uint32_t>(kv.value.type()));
        write_value(o, kv.value);
    }
    uint64_t offset = 0;
    for (const PendingTensor &t : tensors_) {
        o.str(t.name);
        o.pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
        for (uint64_t d : t.ne) o.pod<uint64_t>(d);
        o.pod<uint32_t>(t.type);
        o.pod<uint64_t>(offset);
        offset += (t.bytes + alignment_ - 1) / alignment_ * alignment_;
    }
    o.pad_to(alignment_);
    std::vector<uint8_t> buf;
    for (const PendingTensor &t : tensors_) {
        if (t.fill) {
            buf.assign(static_cast<size_t>(t.bytes), 0);
            t.fill(buf.data(), t.bytes);
            o.bytes(buf.data(), t.bytes);
        } else {
            o.bytes(t.view ? t.view : t.owned.data(), t.bytes);
        }
        o.pad_to(alignment_);
    }
}

} // namespace kpr::gguf
