// kpr plan: which provider serves an op, and why.
#include "cli.hpp"

#include <iostream>

namespace kpr::cli {

Command add_plan(CLI::App &root, Globals &g) {
    struct Args {
        std::string type, op = "gemv", device, provider, model;
        uint64_t rows = 0, cols = 0;
        uint32_t ncols = 1, experts = 0, used = 0, x_slots = 1;
        bool explain = false, json = false;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand("plan", "negotiate an op: the winning provider and, with --explain, every answer");
    sub->add_option("--model", a->model, "plan every weight tensor of a GGUF model instead of one op");
    sub->add_option("--type", a->type, "weight type as ggml names it: q8_0, q4_K, iq3_xxs, f16, ...");
    sub->add_option("--rows", a->rows, "output rows (ne1)")->check(CLI::PositiveNumber);
    sub->add_option("--cols", a->cols, "input columns, K (ne0)")->check(CLI::PositiveNumber);
    sub->add_option("--ncols", a->ncols, "activation columns, 1..8 (default 1)");
    sub->add_option("--op", a->op, "gemv (default) or gemv_grouped")->check(CLI::IsMember({"gemv", "gemv_grouped"}));
    sub->add_option("--experts", a->experts, "gemv_grouped: stacked experts");
    sub->add_option("--experts-used", a->used, "gemv_grouped: experts used per column");
    sub->add_option("--x-slots", a->x_slots, "gemv_grouped: 1 (x broadcast) or experts-used (x per slot)");
    sub->add_option("--device", a->device, "cpu (default), cuda:N, or the simulated device");
    sub->add_option("--provider", a->provider, "ask only this provider");
    sub->add_option("--simulate-device", g.simulate,
                    "negotiate for a GPU kpr is not running on: p100, p40, gtx1080, v100, t4, a100, rtx3090, l4, h100, h200, or a TOML device file");
    sub->add_flag("--explain", a->explain, "show every provider's answer and the reason");
    sub->add_flag("--json", a->json, "one JSON object: provider (or null), device, answers");
    return {sub, [&g, a] {
                if (!a->model.empty()) {
                    if (!a->type.empty() || a->rows || a->cols)
                        throw Error("plan: give either --model or --type/--rows/--cols, not both", 2);
                    return plan_model(g, a->model, a->ncols, a->device, a->json);
                }
                if (a->type.empty() || !a->rows || !a->cols) throw Error("plan: --type, --rows and --cols are required (or --model)", 2);
                uint32_t type = parse_type(a->type);
                kpr_op_desc op;
                if (a->op == "gemv_grouped") {
                    if (!a->experts || !a->used) throw Error("--op gemv_grouped needs --experts and --experts-used", 2);
                    op = gemv_grouped(type, a->rows, a->cols, a->ncols, a->experts, a->used, a->x_slots);
                } else {
                    op = gemv(type, a->rows, a->cols, a->ncols);
                }
                Runtime rt = make_runtime(g);
                std::string dev = a->device;
                if (dev.empty()) dev = g.simulate.empty() ? "cpu" : rt.devices().back().id;
                auto plan = rt.plan(op, dev, a->provider);
                if (a->json) {
                    std::cout << plan->to_json() << "\n";
                } else if (a->explain || !plan->ok()) {
                    std::cout << plan->explain();
                } else {
                    std::cout << fmt::format("{} on {}: {}\n", describe(op), dev, plan->decision());
                }
                if (!plan->ok() && !a->json)
                    std::cerr << fmt::format("kpr: error: nothing serves {} on {}\n", describe(op), dev);
                return plan->ok() ? 0 : 1;
            }};
}

static const bool add_plan_registered = register_command(30, add_plan);

} // namespace kpr::cli
