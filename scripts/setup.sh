# Sourced by scripts/run and scripts/test: install what is missing, configure, build.
# Environment: KPR_BUILD_DIR (default <repo>/build), KPR_PRESET (default "default"),
#              KPR_CUDA_ARCHS (passed to CMake when set), KPR_JOBS (default: all cores).
set -euo pipefail

KPR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KPR_PRESET="${KPR_PRESET:-default}"
KPR_BUILD_DIR="${KPR_BUILD_DIR:-$KPR_ROOT/build}"
KPR_JOBS="${KPR_JOBS:-$(nproc)}"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Debian 12 packages kpr builds and tests with. Nothing else is downloaded. (xz-utils: scripts/device-pack and
# scripts/device-ab, whose ctest makes an archive.)
KPR_PACKAGES=(cmake ninja-build g++ pkg-config python3 xz-utils
              libboost-dev libtomlplusplus-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
              libgtest-dev libgmock-dev libbenchmark-dev)

kpr_install_packages() {
  local missing=()
  for p in "${KPR_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "packages: all ${#KPR_PACKAGES[@]} present"
    return
  fi
  say "packages: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

kpr_configure_and_build() {
  local extra=()
  [ -n "${KPR_CUDA_ARCHS:-}" ] && extra+=("-DKPR_CUDA_ARCHS=${KPR_CUDA_ARCHS}")
  # nvcc is optional; put the usual toolkit location on PATH so CMake can find it when installed.
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  say "configure: preset '$KPR_PRESET' into $KPR_BUILD_DIR"
  cmake -S "$KPR_ROOT" -B "$KPR_BUILD_DIR" --preset "$KPR_PRESET" "${extra[@]}"
  say "build: $KPR_JOBS jobs"
  cmake --build "$KPR_BUILD_DIR" -j "$KPR_JOBS"
}
