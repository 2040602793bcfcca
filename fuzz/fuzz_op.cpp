// libFuzzer target: the op description the CLI builds from its arguments (`kpr plan --type T --rows R
// --cols C --ncols N [--op gemv_grouped --experts E --experts-used U --x-slots S]`): the type name through
// kpr::formats::type_from_name, the numbers into a kpr_op_desc, then kpr::validate, describe and
// weight_bytes. The first byte picks the form: text fields ("q4_K 4096 4096 3 8 2 1"), or a raw
// kpr_op_desc (as a provider or an engine could hand one over).
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/runtime.hpp>

#include <cstring>
#include <sstream>
#include <string>

namespace {

void check(const kpr_op_desc &op) {
    try {
        kpr::validate(op);
        // A valid op has a size that fits, is non-zero, and matches the per-row size.
        uint64_t b = kpr::weight_bytes(op);
        uint64_t row = kpr::formats::row_bytes(op.weight_type, op.cols);
        if (b == 0 || row == 0 || b % row) __builtin_trap();
    } catch (const kpr::Error &) {
    }
    (void)kpr::describe(op);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    if (data[0] & 1) {
        kpr_op_desc op{};
        std::memcpy(&op, data + 1, std::min(size - 1, sizeof op));
        check(op);
        return 0;
    }
    std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
    std::istringstream in(text);
    std::string type;
    in >> type;
    auto t = kpr::formats::type_from_name(type);
    if (t) {
        const char *back = kpr::formats::type_info(*t) ? kpr::formats::type_info(*t)->name : nullptr;
        if (!back || !kpr::formats::type_from_name(back) || *kpr::formats::type_from_name(back) != *t) __builtin_trap();
    }
    unsigned long long rows = 0, cols = 0, ncols = 1, experts = 0, used = 0, slots = 1;
    in >> rows >> cols >> ncols >> experts >> used >> slots;
    kpr_op_desc op = experts ? kpr::gemv_grouped(t ? *t : 0xffffu, rows, cols, uint32_t(ncols), uint32_t(experts),
                                                 uint32_t(used), uint32_t(slots))
                             : kpr::gemv(t ? *t : 0xffffu, rows, cols, uint32_t(ncols));
    check(op);
    return 0;
}
