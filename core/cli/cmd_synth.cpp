// kpr synth: a GGUF shaped like a real model, filled with random valid blocks.
#include "cli.hpp"

#include <kpr/bench.hpp>
#include <kpr/formats.hpp>

#include <chrono>
#include <iostream>
#include <sstream>

namespace kpr::cli {

Command add_synth(CLI::App &root, Globals &) {
    struct Args {
        std::string shape = "tiny", types = "q8_0", output;
        int layers = 0, threads = 0;
        uint64_t seed = 1;
        bool list = false;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand(
        "synth", "write a GGUF with a real model family's tensor names and shapes, filled with random valid blocks");
    sub->add_option("--shape", a->shape, "model family: " + fmt::format("{}", fmt::join(bench::synth_shapes(), ", ")) +
                                             " (default tiny)");
    sub->add_option("--types", a->types,
                    "weight types by role, comma-separated: [0] attention and FFN gate/up, [1] FFN down, [2] output head "
                    "and embeddings; a missing role takes the last one given (default q8_0)");
    sub->add_option("-o,--output", a->output, "the GGUF file to write (required unless --list)");
    sub->add_flag("--list", a->list, "print the metadata and tensors as JSON instead of writing the file");
    sub->add_option("--layers", a->layers, "fewer (or more) layers than the family has, to keep files small")
        ->check(CLI::Range(1, 1000));
    sub->add_option("--seed", a->seed, "random seed (default 1)");
    sub->add_option("--threads", a->threads, "threads filling blocks (default: up to 8)");
    return {sub, [a] {
                bench::SynthOptions o;
                o.shape = a->shape;
                o.layers = a->layers;
                o.seed = a->seed;
                o.threads = a->threads;
                o.dry_run = a->list;
                if (a->output.empty() && !a->list) throw Error("synth: -o FILE.gguf is required (or --list)", 2);
                std::stringstream ss(a->types);
                std::string t;
                while (std::getline(ss, t, ','))
                    if (!t.empty()) o.types.push_back(parse_type(t));
                if (a->list) {
                    bench::SynthSummary s = bench::synth_model(o, a->output);
                    nlohmann::json j = {{"architecture", s.architecture}, {"layers", s.layers}, {"bytes", s.bytes},
                                        {"metadata", nlohmann::json::object()}, {"tensors", nlohmann::json::array()}};
                    for (auto &[k, v] : s.metadata) j["metadata"][k] = v;
                    for (auto &t : s.tensor_list)
                        j["tensors"].push_back({{"name", t.name}, {"type", formats::type_name(t.type)}, {"ne", t.ne}, {"bytes", t.bytes}});
                    std::cout << json_text(j, 1) << "\n";
                    return 0;
                }
                auto t0 = std::chrono::steady_clock::now();
                bench::SynthSummary s = bench::synth_model(o, a->output);
                double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                std::cout << fmt::format("{}: {} ({}), {} layers, {} tensors, {} of weights, written in {:.1f} s\n", a->output,
                                         a->shape, s.architecture, s.layers, s.tensors, human_bytes(s.bytes), sec);
                return 0;
            }};
}

static const bool add_synth_registered = register_command(65, add_synth);

} // namespace kpr::cli
