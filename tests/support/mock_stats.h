// Counters a mock provider keeps about how the core drives it. Each mock library exports
// `kpr_mock_stats()`; a test reaches the instance the core loaded with dlopen(file, RTLD_NOLOAD) + dlsym
// (see kpr_test::mock_stats in test_support.hpp).
#pragma once

#include <atomic>
#include <cstdint>

struct KprMockStats {
    std::atomic<int> entries{0};     // kpr_provider_entry calls
    std::atomic<int> inits{0};
    std::atomic<int> queries{0};
    std::atomic<int> prepares{0};
    std::atomic<int> runs{0};
    std::atomic<int> releases{0};
    std::atomic<int> selftest_gets{0};
    // A slot beyond the table's struct_size was called (the core must never do that).
    std::atomic<int> short_table_violations{0};
    // What the core offered in the handshake.
    std::atomic<uint32_t> offer_min{0}, offer_max{0};
    std::atomic<int> host_ok{0};      // the offer carried a host API with a log callback
    std::atomic<uint64_t> last_prepared_bytes{0};
};

#define KPR_MOCK_STATS_SYMBOL "kpr_mock_stats"
typedef KprMockStats *(*kpr_mock_stats_fn)(void);
