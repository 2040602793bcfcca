// JSON text that never fails on bytes that are not UTF-8.
//
// Strings in kpr's JSON come from files (tensor names, metadata) and from providers (reasons, self-test
// messages), and nothing guarantees they are UTF-8; nlohmann's plain dump() throws type_error 316 on the
// first bad byte, an error that names neither the file nor the string. Every dump in core/ goes through
// this instead: a bad byte becomes U+FFFD and the output stays valid JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace kpr {

// `indent` as nlohmann's dump: -1 one line, 0 newlines only, N spaces per level.
inline std::string json_text(const nlohmann::json &j, int indent = -1) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace kpr
