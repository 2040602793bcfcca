// kpr requant: a copy of a GGUF model with its dense projections converted to Q8_0 (kpr/requant.hpp).
#include "cli.hpp"

#include <kpr/formats.hpp>
#include <kpr/requant.hpp>

#include <iostream>

#include <unistd.h>

namespace kpr::cli {

namespace {

std::string shape_of(const std::vector<uint64_t> &ne) {
    std::string s;
    for (size_t i = ne.size(); i-- > 0;) s += fmt::format("{}{}", s.empty() ? "" : "x", ne[i]);
    return s;
}

const char *shard_action(requant::ShardReport::Action a) {
    switch (a) {
    case requant::ShardReport::Action::Written: return "written";
    case requant::ShardReport::Action::HardLinked: return "hard-linked";
    default: return "copied";
    }
}

} // namespace

Command add_requant(CLI::App &root, Globals &) {
    struct Args {
        std::string input, output;
        std::vector<std::string> match;
        bool copy = false, force = false, json = false;
        unsigned threads = 0;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand(
        "requant", "write a copy of a GGUF model with its dense projections converted to Q8_0 (for sm60_q8)");
    sub->add_option("input", a->input, "the model (a .gguf, or any shard name-0000K-of-0000N.gguf of a split model)")
        ->required();
    sub->add_option("output", a->output,
                    "the new model; for a split model, name-00001-of-0000N.gguf or name.gguf (shards are numbered)")
        ->required();
    sub->add_option("--match", a->match,
                    fmt::format("regex searched in tensor names, repeatable; default: {}", requant::default_pattern()));
    sub->add_flag("--copy", a->copy, "copy shards with nothing to convert instead of hard-linking them");
    sub->add_flag("--force", a->force, "replace existing output files (never the input)");
    sub->add_option("--threads", a->threads, "conversion threads (default: all)");
    sub->add_flag("--json", a->json, "machine-readable report on stdout");
    return {sub, [a] {
                requant::Options o;
                o.match = a->match;
                o.copy = a->copy;
                o.force = a->force;
                o.threads = a->threads;
                requant::install_signal_cleanup();
                const bool tty = isatty(STDERR_FILENO) && !a->json;
                requant::Report r = requant::run(a->input, a->output, o, [&](const requant::TensorReport &t) {
                    if (tty) std::cerr << fmt::format("\r  {} {:60}", t.name, "") << std::flush;
                });
                if (tty) std::cerr << "\r" << std::string(80, ' ') << "\r";
                if (a->json) {
                    nlohmann::json j = {{"input", a->input}, {"output", a->output}, {"converted", r.converted()},
                                        {"tensors", nlohmann::json::array()}, {"shards", nlohmann::json::array()}};
                    for (auto &t : r.tensors)
                        j["tensors"].push_back({{"name", t.name},
                                                {"file", t.file},
                                                {"from", formats::type_name(t.from_type)},
                                                {"to", formats::type_name(t.to_type)},
                                                {"ne", t.ne},
                                                {"converted", t.action == requant::TensorReport::Action::Converted},
                                                {"max_abs", t.max_abs},
                                                {"max_err", t.max_err},
                                                {"rel_error", t.rel_error},
                                                {"note", t.note}});
                    for (auto &s : r.shards)
                        j["shards"].push_back({{"input", s.input}, {"output", s.output}, {"action", shard_action(s.action)},
                                               {"converted", s.converted}, {"note", s.note}});
                    std::cout << json_text(j, 2) << "\n";
                    return 0;
                }
                Table t({"tensor", "from", "to", "shape", "max|w'-w|/max|w|", "note"});
                for (auto &x : r.tensors)
                    t.add({x.name, formats::type_name(x.from_type), formats::type_name(x.to_type), shape_of(x.ne),
                           x.action == requant::TensorReport::Action::Converted ? fmt::format("{:.3e}", x.rel_error) : "-",
                           x.note});
                std::cout << t.str();
                double worst = 0;
                for (auto &x : r.tensors) worst = std::max(worst, x.rel_error);
                std::cout << fmt::format("\n{} tensor(s) converted to q8_0, {} left as they were; worst error {:.3e}\n",
                                         r.converted(), r.tensors.size() - r.converted(), worst);
                for (auto &s : r.shards)
                    std::cout << fmt::format("  {} -> {}: {}{}\n", s.input, s.output, shard_action(s.action),
                                             s.note.empty() ? "" : " (" + s.note + ")");
                return 0;
            }};
}

static const bool add_requant_registered = register_command(45, add_requant);

} // namespace kpr::cli
