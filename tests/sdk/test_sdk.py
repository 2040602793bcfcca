#!/usr/bin/env python3
"""The installed SDK, end to end (ctest label `cli`; see tests/sdk/CMakeLists.txt).

1. `cmake --install` kpr's build tree into a fresh prefix outside the build tree, and check the layout,
   that `<prefix>/bin/kpr` needs nothing but libc/libm/libstdc++/libgcc at run time, and that it finds
   its providers with no environment variable and no configuration.
2. Configure and build examples/provider_template as a separate CMake project against the installed
   package only (find_package(kpr) with CMAKE_PREFIX_PATH = the prefix); check the module exports one
   dynamic symbol, kpr_provider_entry.
3. Point the installed `kpr` at the template's build folder through a TOML file and check `kpr providers`
   lists it, `kpr plan` picks it for q8_0 gemv when it is enabled and preferred (priority, force) and not
   when it is disabled, it declines what it does not claim, and `kpr selftest --provider example_q8` runs
   and passes its cases.
4. An engine-side consumer: a program linking kpr::core (CMake) and one built with pkg-config, both
   running a GEMV through the template provider and checking it against the core's reference.
5. `cmake --install` of the template into the prefix: the plain `kpr` now finds it with no configuration.
The core is never rebuilt: the installed libkpr.a and kpr, and the build tree's kpr, are hashed before
and after.

Usage: test_sdk.py --build-dir B --source-dir S --cmake CMAKE --generator G --cxx CXX [--keep]
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

FAILURES = []
TEMPLATE = "example_q8"


def log(msg):
    print(msg, flush=True)


def check(cond, what, detail=""):
    if cond:
        log(f"  ok   {what}")
    else:
        log(f"  FAIL {what}" + (f"\n{detail}" if detail else ""))
        FAILURES.append(what)
    return cond


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KPR_")}
    for k in ("CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH", "kpr_DIR", "kpr_ROOT", "KPR_ROOT"):
        env.pop(k, None)
    env.update(extra or {})
    return env


def run(argv, env=None, cwd=None, ok=True, timeout=300):
    p = subprocess.run(argv, env=env or clean_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if ok and p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(argv)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def under(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([path, root]) == root


def providers_json(kpr, args=(), env=None):
    p = run([kpr, *args, "--no-gpu", "providers", "--json"], env=env)
    return {e["name"]: e for e in json.loads(p.stdout) if e["state"] == "loaded"}, json.loads(p.stdout)


def plan_json(kpr, config, type_, rows=4096, cols=4096, ncols=1):
    args = [kpr, "--no-gpu"] + (["--config", config] if config else []) + [
        "plan", "--type", type_, "--rows", str(rows), "--cols", str(cols), "--ncols", str(ncols), "--json"]
    p = run(args, ok=False)
    return json.loads(p.stdout), p


def answer(plan, name):
    for a in plan["answers"]:
        if a["provider"] == name:
            return a
    return None


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--cmake", default="cmake")
    ap.add_argument("--generator", default="")
    ap.add_argument("--cxx", default="")
    ap.add_argument("--keep", action="store_true", help="keep the temporary prefix and builds")
    a = ap.parse_args()

    os.umask(0o022)  # the core refuses provider files or folders writable by group or others
    build = os.path.realpath(a.build_dir)
    src = os.path.realpath(a.source_dir)
    tmp = tempfile.mkdtemp(prefix="kpr-sdk-")
    try:
        if under(tmp, build) or under(tmp, src):
            raise RuntimeError(f"the temporary folder {tmp} must lie outside the source and build trees")
        prefix = os.path.join(tmp, "prefix")
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        gen = ["-G", a.generator] if a.generator else []
        cxx = [f"-DCMAKE_CXX_COMPILER={a.cxx}"] if a.cxx else []
        build_kpr = os.path.join(build, "bin", "kpr")
        before_build_kpr = sha(build_kpr)

        # ---- 1. install ---------------------------------------------------------------------------------
        log(f"[1] cmake --install {build} --prefix {prefix}")
        run([a.cmake, "--install", build, "--prefix", prefix])
        kpr = os.path.join(prefix, "bin", "kpr")
        for rel in ["bin/kpr", "lib/libkpr.a", "lib/kpr/providers/libkpr_generic_cpu.so",
                    "include/kpr/provider.h", "include/kpr/ggml_blocks.h", "include/kpr/runtime.hpp",
                    "include/kpr/config.hpp", "include/kpr/formats.hpp", "include/kpr/gguf.hpp",
                    "include/kpr/error.hpp", "lib/cmake/kpr/kprConfig.cmake", "lib/cmake/kpr/kprConfigVersion.cmake",
                    "lib/cmake/kpr/kprTargets.cmake", "lib/cmake/kpr/KprProvider.cmake",
                    "lib/cmake/kpr/kpr_provider.map", "lib/pkgconfig/kpr.pc"]:
            check(os.path.isfile(os.path.join(prefix, rel)), f"installed {rel}")
        check(not any(f.endswith(".so") for f in os.listdir(os.path.join(prefix, "lib"))),
              "no shared library of the core in <prefix>/lib (the core is static)")
        targets = open(os.path.join(prefix, "lib/cmake/kpr/kprTargets.cmake")).read()
        leaked = [d for d in ("Boost::", "tomlplusplus", "spdlog", "fmt::", "nlohmann") if d in targets]
        check(not leaked, "kpr::core's exported interface names none of its build-only dependencies", str(leaked))
        ldd = run(["ldd", kpr], ok=False).stdout
        allowed = ("linux-vdso", "libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "ld-linux", "libpthread.so", "libdl.so")
        extra = [l.strip() for l in ldd.splitlines() if l.strip() and not any(x in l for x in allowed)]
        check(not extra, "installed kpr needs only libc, libm, libstdc++ and libgcc_s at run time", "\n".join(extra))
        installed_hashes = {p: sha(os.path.join(prefix, p)) for p in ("lib/libkpr.a", "bin/kpr")}

        loaded, _ = providers_json(kpr)
        g = loaded.get("generic_cpu")
        check(g is not None, "installed kpr (no environment, no config) loads generic_cpu", json.dumps(loaded, indent=1))
        if g:
            check(under(g["file"], prefix), "... from <prefix>/lib/kpr/providers, not from the build tree",
                  f"file: {g['file']}")

        # ---- 2. the template, against the installed package only -----------------------------------------
        log("[2] examples/provider_template as a project of its own")
        tpl_build = os.path.join(work, "template-build")
        run([a.cmake, "-S", os.path.join(src, "examples", "provider_template"), "-B", tpl_build, *gen, *cxx,
             "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}"])
        cache = open(os.path.join(tpl_build, "CMakeCache.txt")).read()
        kpr_dir = [l.split("=", 1)[1] for l in cache.splitlines() if l.startswith("kpr_DIR:")]
        check(kpr_dir and os.path.realpath(kpr_dir[0]) == os.path.realpath(os.path.join(prefix, "lib/cmake/kpr")),
              "find_package(kpr) found the installed package", str(kpr_dir))
        run([a.cmake, "--build", tpl_build, "-j2"])
        module = os.path.join(tpl_build, "providers", f"libkpr_{TEMPLATE}.so")
        check(os.path.isfile(module), f"built {module}")
        syms = run(["nm", "-D", "--defined-only", module]).stdout.split()
        names = [s for s in syms if not all(c in "0123456789abcdefABCDEF" for c in s) and len(s) > 1]
        check(names == ["kpr_provider_entry"], "the module exports kpr_provider_entry and nothing else", str(names))
        needed = run(["readelf", "-d", module]).stdout
        check("libkpr" not in needed, "the module links nothing of the core")

        # ---- 3. the installed kpr, pointed at the template through TOML --------------------------------------
        log("[3] installed kpr + a TOML file naming the template's folder")
        provdir = os.path.dirname(module)
        base = f'[runtime]\nprovider_paths = ["{provdir}"]\n'
        cfg_plain = write(os.path.join(work, "plain.toml"), base)
        cfg_prio = write(os.path.join(work, "priority.toml"), base + f"\n[providers.{TEMPLATE}]\npriority = 10\n")
        cfg_force = write(os.path.join(work, "force.toml"), base + f"\n[providers.{TEMPLATE}]\nforce = true\n")
        cfg_off = write(os.path.join(work, "disabled.toml"),
                        base + f"\n[providers.{TEMPLATE}]\nenabled = false\npriority = 10\n")

        loaded, everything = providers_json(kpr, ["--config", cfg_plain])
        e = loaded.get(TEMPLATE)
        check(e is not None, f"kpr providers lists {TEMPLATE} as loaded", json.dumps(everything, indent=1))
        if e:
            check(os.path.realpath(e["file"]) == os.path.realpath(module), "... from the template's build folder", e["file"])
            check(e["abi"] == "1.0" and e["version"] == "0.1.0", "... with ABI 1.0 and its own version", str(e))
            check([o["name"] for o in e["options"]] == ["accumulator"], "... and its declared option")
        check("generic_cpu" in loaded, "generic_cpu still loads")

        plan, p = plan_json(kpr, cfg_plain, "q8_0")
        ans = answer(plan, TEMPLATE) or {}
        check(plan["provider"] == "generic_cpu" and ans.get("state") == "accepted" and ans.get("score") == 50,
              "enabled, no preference: it accepts with score 50 and the baseline (score 100) wins", p.stdout)

        plan, p = plan_json(kpr, cfg_prio, "q8_0")
        check(plan["provider"] == TEMPLATE, "priority = 10: plan picks it for q8_0 gemv", p.stdout)
        plan, p = plan_json(kpr, cfg_prio, "q8_0", rows=37, cols=96, ncols=8)
        check(plan["provider"] == TEMPLATE, "priority = 10: ... and for 37x96 ncols 8", p.stdout)
        plan, p = plan_json(kpr, cfg_prio, "q4_0")
        ans = answer(plan, TEMPLATE) or {}
        check(plan["provider"] == "generic_cpu" and ans.get("state") == "declined" and "q8_0" in ans.get("reason", ""),
              "priority = 10: q4_0 is declined with a reason and served by generic_cpu", p.stdout)

        plan, p = plan_json(kpr, cfg_force, "q8_0")
        check(plan["provider"] == TEMPLATE and (answer(plan, TEMPLATE) or {}).get("forced"),
              "force = true: plan picks it", p.stdout)

        plan, p = plan_json(kpr, cfg_off, "q8_0")
        ans = answer(plan, TEMPLATE) or {}
        check(plan["provider"] == "generic_cpu" and ans.get("state") == "disabled",
              "enabled = false (even with priority): not picked, reported disabled", p.stdout)
        loaded, everything = providers_json(kpr, ["--config", cfg_off])
        check(any(x["name"] == TEMPLATE and x["state"] == "disabled" for x in everything),
              "kpr providers shows it disabled", json.dumps(everything, indent=1))

        p = run([kpr, "--no-gpu", "--config", cfg_plain, "selftest", "--provider", TEMPLATE, "--device", "cpu", "--json"],
                ok=False)
        try:
            st = json.loads(p.stdout)
            results = st["results"] if isinstance(st, dict) else st
        except (ValueError, KeyError) as ex:
            results = []
            check(False, "kpr selftest --json output parses", f"{ex}\n{p.stdout}\n{p.stderr}")
        mine = [r for r in results if r.get("provider") == TEMPLATE]
        check(p.returncode == 0 and len(mine) == 4 and all(r["result"] in ("pass", "passed") for r in mine),
              f"kpr selftest --provider {TEMPLATE}: its 4 cases ran and passed",
              f"exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        check(all(r.get("provider") == TEMPLATE for r in results), "... and only its cases ran")

        # ---- 4. engine side: kpr::core through CMake and through pkg-config -----------------------------------
        log("[4] a program linking the installed core (CMake kpr::core, and pkg-config)")
        cons_build = os.path.join(work, "consumer-build")
        run([a.cmake, "-S", os.path.join(src, "tests", "sdk", "consumer"), "-B", cons_build, *gen, *cxx,
             "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}"])
        run([a.cmake, "--build", cons_build, "-j2"])
        p = run([os.path.join(cons_build, "kpr_sdk_consumer"), provdir], ok=False)
        check(p.returncode == 0 and "consumer ok" in p.stdout, "kpr::core consumer runs a q8_0 gemv through the template",
              p.stdout + p.stderr)

        if shutil.which("pkg-config") is None:
            log("  skip pkg-config consumer: no pkg-config on PATH")
        else:
            pc_env = clean_env({"PKG_CONFIG_PATH": os.path.join(prefix, "lib", "pkgconfig")})
            flags = run(["pkg-config", "--cflags", "--libs", "kpr"], env=pc_env).stdout.split()
            pdir = run(["pkg-config", "--variable=providerdir", "kpr"], env=pc_env).stdout.strip()
            check(os.path.realpath(pdir) == os.path.realpath(os.path.join(prefix, "lib/kpr/providers")),
                  "pkg-config providerdir is <prefix>/lib/kpr/providers", pdir)
            exe = os.path.join(work, "pc_consumer")
            compiler = a.cxx or "c++"
            run([compiler, "-std=c++20", "-O1", os.path.join(src, "tests", "sdk", "consumer", "main.cpp"), "-o", exe, *flags])
            p = run([exe, provdir], ok=False)
            check(p.returncode == 0 and "consumer ok" in p.stdout, "pkg-config consumer runs too", p.stdout + p.stderr)

        # ---- 5. install the template into the prefix: found with no configuration ---------------------------
        log("[5] cmake --install the template into kpr's prefix")
        run([a.cmake, "--install", tpl_build, "--prefix", prefix])
        loaded, everything = providers_json(kpr)
        e = loaded.get(TEMPLATE)
        check(e is not None and under(e["file"], os.path.join(prefix, "lib", "kpr", "providers")),
              "installed next to generic_cpu, plain `kpr providers` finds it", json.dumps(everything, indent=1))

        # ---- the core was not rebuilt ----------------------------------------------------------------------------
        check(all(sha(os.path.join(prefix, p)) == h for p, h in installed_hashes.items()),
              "installed libkpr.a and kpr unchanged")
        check(sha(build_kpr) == before_build_kpr, "the build tree's kpr unchanged (the core was not rebuilt)")
    finally:
        if a.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    if FAILURES:
        log(f"\n{len(FAILURES)} check(s) failed:\n  " + "\n  ".join(FAILURES))
        return 1
    log("\nall checks passed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
