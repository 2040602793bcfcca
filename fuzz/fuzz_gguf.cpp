// libFuzzer target: the GGUF reader (kpr::gguf::File) on arbitrary bytes, then what kpr does with a file
// it accepted: typed getters, each tensor seen as an op (tensor_op, make_op_desc) whose size must agree
// with the reader's, its bytes read, a row dequantized.
#include "fuzz_util.hpp"

#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kpr_fuzz::MemFile mf(data, size);
    try {
        kpr::gguf::File f = kpr::gguf::File::open(mf.path());
        volatile uint64_t sink = 0;
        for (const auto &kv : f.metadata()) {
            sink = sink + kv.value.to_string().size();
            if (auto *a = kv.value.as_array()) sink = sink + a->items.size();
        }
        (void)f.get_string_or("general.architecture", "");
        (void)f.get_u64_or("general.alignment", 0);
        for (const auto &t : f.tensors()) {
            // The reader promised the bytes lie inside the mapping: touch the first and last.
            if (t.bytes) sink = sink + t.data[0] + t.data[t.bytes - 1];
            if (f.find_tensor(t.name) != &t) __builtin_trap();
            try {
                kpr::gguf::TensorOp top = kpr::gguf::tensor_op(t, f.path());
                kpr_op_desc op = kpr::gguf::make_op_desc(top, 1 + (t.bytes % KPR_MAX_NCOLS));
                // The reader and the op must agree on the size (no overflow: the reader checked it).
                uint64_t row = kpr::formats::row_bytes(op.weight_type, op.cols);
                if (row * op.rows * op.n_experts != t.bytes) __builtin_trap();
                const kpr::formats::TypeInfo *ti = kpr::formats::type_info(t.type);
                if (ti && ti->supported && op.cols <= 4096) {
                    std::vector<float> row(op.cols);
                    kpr::formats::dequantize_row(t.type, t.data, row.data(), op.cols);
                }
            } catch (const kpr::Error &) {
            }
        }
    } catch (const kpr::Error &) {
    }
    return 0;
}
