// A minimal GGUF (v2/v3) reader for the tests: tensor name -> (type, dims, bytes), every size checked
// against the file. Enough to read the shared reference vectors in tests/data.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kpr_test {

struct GgufTensor {
    uint32_t type = 0;
    std::vector<uint64_t> ne;
    const uint8_t *data = nullptr;
    uint64_t offset = 0;
};

class GgufFile {
public:
    explicit GgufFile(const std::string &path) {
        std::ifstream f(path, std::ios::binary);
        if (!f) throw std::runtime_error("cannot open " + path);
        buf_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        parse();
    }
    const std::map<std::string, GgufTensor> &tensors() const { return tensors_; }
    const GgufTensor *find(const std::string &n) const {
        auto it = tensors_.find(n);
        return it == tensors_.end() ? nullptr : &it->second;
    }

private:
    std::vector<uint8_t> buf_;
    size_t pos_ = 0;
    std::map<std::string, GgufTensor> tensors_;

    void need(uint64_t n) {
        if (n > buf_.size() || pos_ > buf_.size() - n) throw std::runtime_error("gguf: truncated");
    }
    template <typename T> T rd() {
        need(sizeof(T));
        T v;
        std::memcpy(&v, buf_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string str() {
        const uint64_t n = rd<uint64_t>();
        need(n);
        std::string s(reinterpret_cast<const char *>(buf_.data() + pos_), n);
        pos_ += n;
        return s;
    }
    void skip_value(uint32_t t) {
        static const uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (t == 8) {
            str();
        } else if (t == 9) {
            const uint32_t et = rd<uint32_t>();
            const uint64_t n = rd<uint64_t>();
            for (uint64_t i = 0; i < n; ++i) skip_value(et);
        } else if (t < 13) {
            need(sizes[t]);
            pos_ += sizes[t];
        } else {
            throw std::runtime_error("gguf: bad value type");
        }
    }
    void parse() {
        if (rd<uint32_t>() != 0x46554747u) throw std::runtime_error("gguf: bad magic");
        const uint32_t version = rd<uint32_t>();
        if (version < 2 || version > 3) throw std::runtime_error("gguf: unsupported version");
        const uint64_t n_tensors = rd<uint64_t>(), n_kv = rd<uint64_t>();
        uint64_t alignment = 32;
        for (uint64_t i = 0; i < n_kv; ++i) {
            const std::string key = str();
            const uint32_t t = rd<uint32_t>();
            if (key == "general.alignment" && t == 4) alignment = rd<uint32_t>();
            else skip_value(t);
        }
        std::vector<std::pair<std::string, GgufTensor>> infos;
        for (uint64_t i = 0; i < n_tensors; ++i) {
            GgufTensor ti;
            const std::string name = str();
            const uint32_t nd = rd<uint32_t>();
            if (nd > 4) throw std::runtime_error("gguf: too many dims");
            for (uint32_t d = 0; d < nd; ++d) ti.ne.push_back(rd<uint64_t>());
            ti.type = rd<uint32_t>();
            ti.offset = rd<uint64_t>();
            infos.emplace_back(name, ti);
        }
        const uint64_t data_start = (pos_ + alignment - 1) / alignment * alignment;
        for (auto &[name, ti] : infos) {
            if (ti.offset > buf_.size() || data_start > buf_.size() - ti.offset)
                throw std::runtime_error("gguf: tensor out of file");
            ti.data = buf_.data() + data_start + ti.offset;
            tensors_[name] = ti;
        }
    }
};

} // namespace kpr_test
