// Commands over GGUF models: kpr gemv, kpr plan --model.
#include "cli.hpp"

#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>
#include <kpr/memory.hpp>
#include <kpr/npy.hpp>

#include <cmath>
#include <filesystem>
#include <iostream>

namespace kpr::cli {

namespace {

// Experts used per token, from the model's metadata ("<arch>.expert_used_count"), else 2.
uint32_t experts_used(const gguf::File &f, uint32_t n_experts) {
    std::string arch = f.get_string_or("general.architecture", "");
    uint64_t used = f.get_u64_or(arch + ".expert_used_count", 2);
    return (uint32_t)std::max<uint64_t>(1, std::min<uint64_t>(used, n_experts));
}

bool is_weight_matrix(const gguf::Tensor &t) { return t.ne.size() >= 2 && t.ne.size() <= 3 && t.ne[1] > 1; }

} // namespace

Command add_gemv(CLI::App &root, Globals &g) {
    struct Args {
        std::string model, tensor, input, output, device = "cpu", provider, ids;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand("gemv", "y = W . x for one tensor of a GGUF model, through the negotiated provider");
    sub->add_option("--model", a->model, "GGUF file")->required();
    sub->add_option("--tensor", a->tensor, "weight tensor name")->required();
    sub->add_option("--input", a->input, "x: float32 .npy of shape (ncols, cols), ncols 1..8")->required();
    sub->add_option("--output", a->output, "y: float32 .npy written with shape (ncols, rows)")->required();
    sub->add_option("--ids", a->ids, "expert tensors: float32 .npy (ncols, experts_used) of expert ids");
    sub->add_option("--device", a->device, "cpu (default) or cuda:N");
    sub->add_option("--provider", a->provider, "negotiate only with this provider");
    return {sub, [&g, a] {
                // The output replaces its name by rename: refuse a name that is one of the inputs (the same
                // path, another spelling of it, a symlink to it), as kpr requant does.
                {
                    std::error_code ec;
                    const std::filesystem::path out_real = std::filesystem::weakly_canonical(a->output, ec);
                    for (auto &[what, in] : {std::pair<const char *, std::string>{"--model", a->model},
                                             {"--input", a->input}, {"--ids", a->ids}}) {
                        if (in.empty()) continue;
                        std::error_code ec2;
                        if (out_real == std::filesystem::weakly_canonical(in, ec2))
                            throw Error(fmt::format("--output {}: is the {} file {}; kpr gemv never overwrites its inputs",
                                                    a->output, what, in), 2);
                    }
                }
                gguf::File f = gguf::File::open(a->model);
                const gguf::Tensor *t = f.find_tensor(a->tensor);
                if (!t) throw Error(fmt::format("{}: no tensor named '{}' ({} tensors in the file)", a->model, a->tensor,
                                                f.tensors().size()));
                gguf::TensorOp top = gguf::tensor_op(*t, a->model);
                npy::Array x = npy::read(a->input);
                uint64_t ncols = 0, cols = 0;
                if (x.shape.size() == 2) ncols = x.shape[0], cols = x.shape[1];
                else if (x.shape.size() == 1) ncols = 1, cols = x.shape[0];
                else
                    throw Error(fmt::format("{}: x must have shape (ncols, cols) = (1..8, {}), got {} dimensions", a->input,
                                            top.cols, x.shape.size()));
                if (cols != top.cols)
                    throw Error(fmt::format("{}: x has {} columns but tensor '{}' has cols (ne0) = {}", a->input, cols,
                                            a->tensor, top.cols));
                if (ncols < 1 || ncols > KPR_MAX_NCOLS)
                    throw Error(fmt::format("{}: x has {} rows (activation columns); kpr serves 1..{}", a->input, ncols, KPR_MAX_NCOLS));
                uint32_t n_used = 1;
                std::vector<int32_t> ids;
                if (top.grouped()) {
                    if (a->ids.empty())
                        throw Error(fmt::format("tensor '{}' holds {} experts: pass --ids FILE.npy with shape (ncols, experts_used)",
                                                a->tensor, top.n_experts), 2);
                    npy::Array id = npy::read(a->ids);
                    if (id.shape.size() != 2 || id.shape[0] != ncols || id.shape[1] == 0 || id.shape[1] > top.n_experts)
                        throw Error(fmt::format("{}: ids must have shape ({}, 1..{})", a->ids, ncols, top.n_experts));
                    n_used = (uint32_t)id.shape[1];
                    for (float v : id.data) {
                        if (!(v >= 0 && v < top.n_experts) || v != std::floor(v))
                            throw Error(fmt::format("{}: expert id {} is not an integer in [0, {})", a->ids, v, top.n_experts));
                        ids.push_back((int32_t)v);
                    }
                }
                kpr_op_desc op = gguf::make_op_desc(top, (uint32_t)ncols, n_used, 1);
                Runtime rt = make_runtime(g);
                const Device &dev = rt.device(a->device);
                auto plan = rt.plan(op, a->device, a->provider);
                if (!plan->ok()) {
                    std::cerr << plan->explain();
                    throw Error(fmt::format("nothing serves tensor '{}' ({}) on {}", a->tensor, describe(op), a->device));
                }
                uint64_t rows_out = ncols * n_used * top.rows;
                std::vector<float> y(rows_out);
                if (dev.is_cpu()) {
                    PreparedOp p = plan->prepare(t->data, t->bytes);  // read in place from the mapping
                    p.run(x.data.data(), y.data(), (uint32_t)ncols, ids.empty() ? nullptr : ids.data());
                } else {
                    Buffer w(dev, t->bytes), xb(dev, x.data.size() * 4), yb(dev, y.size() * 4), ib(dev, std::max<size_t>(ids.size(), 1) * 4);
                    w.upload(t->data, t->bytes);
                    xb.upload(x.data.data(), x.data.size() * 4);
                    if (!ids.empty()) ib.upload(ids.data(), ids.size() * 4);
                    Stream s(dev);
                    PreparedOp p = plan->prepare(w.data(), t->bytes);
                    p.run(static_cast<const float *>(xb.data()), static_cast<float *>(yb.data()), (uint32_t)ncols,
                          ids.empty() ? nullptr : static_cast<const int32_t *>(ib.data()), s.handle());
                    s.synchronize();
                    yb.download(y.data(), y.size() * 4);
                }
                std::vector<uint64_t> shape = top.grouped() ? std::vector<uint64_t>{ncols, n_used, top.rows}
                                                            : std::vector<uint64_t>{ncols, top.rows};
                npy::write(a->output, shape, y.data());
                std::cerr << fmt::format("{}: {} on {} by {} -> {}\n", a->tensor, describe(op), a->device, plan->provider(), a->output);
                return 0;
            }};
}

int plan_model(const Globals &g, const std::string &model, uint32_t ncols, const std::string &device_in, bool json) {
    gguf::File f = gguf::File::open(model);
    Runtime rt = make_runtime(g);
    std::string device = device_in.empty() ? (g.simulate.empty() ? "cpu" : rt.devices().back().id) : device_in;
    rt.device(device);
    struct Row {
        std::string name, type, shape, provider, reason;
        uint64_t weight = 0, prepared = 0, workspace = 0;
    };
    std::vector<Row> rows;
    std::map<std::string, std::array<uint64_t, 3>> totals;  // provider -> tensors, weight, extra
    size_t unserved = 0;
    for (const gguf::Tensor &t : f.tensors()) {
        if (!is_weight_matrix(t)) continue;
        Row r;
        r.name = t.name;
        r.type = formats::type_name(t.type);
        r.shape = t.ne.size() == 3 ? fmt::format("{}x{}x{}", t.ne[2], t.ne[1], t.ne[0]) : fmt::format("{}x{}", t.ne[1], t.ne[0]);
        r.weight = t.bytes;
        try {
            gguf::TensorOp top = gguf::tensor_op(t, model);
            kpr_op_desc op = gguf::make_op_desc(top, ncols, top.grouped() ? experts_used(f, top.n_experts) : 1, 1);
            auto plan = rt.plan(op, device);
            if (plan->ok()) {
                r.provider = plan->provider();
                for (auto &ans : plan->answers())
                    if (ans.provider == r.provider) r.prepared = ans.prepared_bytes, r.workspace = ans.workspace_bytes;
            } else {
                std::string why;
                for (auto &ans : plan->answers())
                    if (ans.state != AnswerState::Accepted)
                        why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", ans.provider, ans.reason);
                r.reason = why;
            }
        } catch (const Error &e) {
            r.reason = e.what();
        }
        if (r.provider.empty()) ++unserved;
        auto &tot = totals[r.provider.empty() ? "(none)" : r.provider];
        tot[0]++, tot[1] += r.weight, tot[2] += r.prepared + r.workspace;
        rows.push_back(r);
    }
    if (json) {
        nlohmann::json j = {{"model", model}, {"device", device}, {"ncols", ncols}, {"tensors", nlohmann::json::array()}};
        for (auto &r : rows)
            j["tensors"].push_back({{"name", r.name}, {"type", r.type}, {"shape", r.shape},
                                    {"provider", r.provider.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.provider)},
                                    {"weight_bytes", r.weight}, {"prepared_bytes", r.prepared},
                                    {"workspace_bytes", r.workspace}, {"reason", r.reason}});
        j["totals"] = nlohmann::json::object();
        for (auto &[p, t] : totals) j["totals"][p] = {{"tensors", t[0]}, {"weight_bytes", t[1]}, {"extra_bytes", t[2]}};
        j["unserved"] = unserved;
        std::cout << json_text(j, 2) << "\n";
    } else {
        Table tab({"tensor", "type", "shape", "provider", "weights", "prepared+workspace"});
        for (auto &r : rows)
            tab.add({r.name, r.type, r.shape, r.provider.empty() ? "NONE" : r.provider, human_bytes(r.weight),
                     human_bytes(r.prepared + r.workspace)});
        std::cout << fmt::format("{} on {} (ncols {}): {} weight tensors\n", model, device, ncols, rows.size()) << tab.str();
        std::cout << "\ntotals\n";
        for (auto &[p, t] : totals)
            std::cout << fmt::format("  {:<18} {:>4} tensors  {:>10} weights  {:>10} extra\n", p, t[0], human_bytes(t[1]),
                                     human_bytes(t[2]));
        for (auto &r : rows)
            if (r.provider.empty()) std::cout << fmt::format("  unserved {}: {}\n", r.name, r.reason);
    }
    if (unserved) std::cerr << fmt::format("kpr: error: {} tensor(s) of {} have no provider on {}\n", unserved, model, device);
    return unserved ? 1 : 0;
}

static const bool add_gemv_registered = register_command(40, add_gemv);

} // namespace kpr::cli
