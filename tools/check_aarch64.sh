#!/usr/bin/env bash
# The arm-cpu profile under qemu-user aarch64: Debian's qemu-user-static, an aarch64 Python 3.11 from
# Debian's arm64 .debs and PyPI's aarch64 wheels (the versions of the x86 venv's), all in a throw-away
# prefix under build/aarch64/ (downloads cached; rm -r build/aarch64 to start again). Prints the
# providers the aarch64 onnxruntime wheel has, doctor and detection under emulation, builds the demo
# detector for arm-cpu in fp32 and INT8, runs pipelines/demo.yaml on arm-cpu under emulation and on
# x86-cpu natively, compares the two results, and runs the same engine on the same tensors on both.
# Times every step. Too slow for CI (inference under qemu's TCG is 150-300x slower than natively; a
# whole run takes about 30 minutes on 2 cores): it checks that the aarch64 wheels and kernels give the
# same answers, not speed. Everything it prints also lands in build/aarch64/check.log.
#
# Usage: tools/check_aarch64.sh        (root installs qemu-user-static when missing)
#   FRAMES=100       frames of the demo video, 300 in `make demo`
#   CALIB_FRAMES=40  frames of the INT8 calibration video (every 4th held out for the accuracy gate)
#   QEMU_CPU=cortex-a76   the emulated CPU (Raspberry Pi 5, RK3588); `qemu-aarch64-static -cpu help`
#   X86_PYTHON=.venv/bin/python   the native interpreter with the SDK's [cpu] deps (`make demo` makes it)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
A=$REPO/build/aarch64
ROOT=$A/root
SITE=$A/site
FRAMES=${FRAMES:-100}
CALIB_FRAMES=${CALIB_FRAMES:-40}
export QEMU_CPU=${QEMU_CPU:-cortex-a76}
X86_PYTHON=${X86_PYTHON:-$REPO/.venv/bin/python}
EMU=$ROOT/usr/bin/python3-qemu
mkdir -p "$A"
exec > >(tee "$A/check.log") 2>&1

STEPS=()
step() { # step NAME COMMAND...: run it, print its time and exit status, go on either way
  local name=$1 t0 t1 rc
  shift
  echo
  echo "=== $name"
  t0=$(date +%s.%N)
  "$@"
  rc=$?
  t1=$(date +%s.%N)
  local dt
  dt=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
  echo "--- $name: ${dt} s, exit $rc"
  STEPS+=("$(printf '%-52s %8s s  exit %s' "$name" "$dt" "$rc")")
  return 0
}
die() { echo "check_aarch64: $*" >&2; exit 1; }
arm() { PYTHONPATH="$SITE:$REPO" EDGE_SDK_CACHE_DIR="$A/engine-cache-arm" "$EMU" "$@"; }
x86() { PYTHONPATH="$REPO" EDGE_SDK_CACHE_DIR="$A/engine-cache-x86" "$X86_PYTHON" "$@"; }

[ "$(uname -m)" = x86_64 ] || die "this host is $(uname -m); the script emulates aarch64 on x86_64"
[ -x "$X86_PYTHON" ] || die "no $X86_PYTHON: run 'make demo' first (venv with the SDK's [cpu] deps) or set X86_PYTHON"

install_qemu() {
  command -v qemu-aarch64-static >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "qemu-aarch64-static missing: sudo apt-get install qemu-user-static"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null
}

# Debian's arm64 python3.11 and its dependency closure, resolved by apt against an empty dpkg status
# in a private apt tree (the host's dpkg and apt lists are left alone), unpacked with dpkg -x.
make_prefix() {
  local apt=$A/apt
  if [ ! -x "$ROOT/usr/bin/python3.11" ]; then
    mkdir -p "$apt"/{state/lists/partial,cache/archives/partial,etc/parts,etc/prefs}
    : > "$apt/state/status"
    local mirror=${APT_MIRROR:-http://deb.debian.org}
    cat > "$apt/etc/sources.list" <<EOF
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror/debian bookworm main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror/debian bookworm-updates main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror/debian-security bookworm-security main
EOF
    local opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Debug::NoLocking=1
      -o Dir::State="$apt/state" -o Dir::State::status="$apt/state/status" -o Dir::Cache="$apt/cache"
      -o Dir::Etc::SourceList="$apt/etc/sources.list" -o Dir::Etc::SourceParts="$apt/etc/parts"
      -o Dir::Etc::Preferences="$apt/etc/prefs/none" -o Dir::Etc::PreferencesParts="$apt/etc/prefs")
    apt-get "${opts[@]}" -qq update || return 1
    apt-get "${opts[@]}" -qq -y -d --no-install-recommends install python3.11 libstdc++6 >/dev/null || return 1
    rm -rf "$ROOT.partial" && mkdir -p "$ROOT.partial"
    for deb in "$apt"/cache/archives/*.deb; do dpkg -x "$deb" "$ROOT.partial" || return 1; done
    rm -rf "$ROOT" && mv "$ROOT.partial" "$ROOT"
  fi
  # qemu-user passes /proc through from the host, so /proc/cpuinfo is the x86 one, and the cpuinfo
  # library in onnxruntime's aarch64 wheel dereferences NULL on it (SIGSEGV at import). With -L,
  # qemu opens an absolute path inside the prefix first: give it what a Cortex-A76 kernel reports.
  mkdir -p "$ROOT/proc"
  rm -f "$ROOT/proc/sys/kernel/arch"  # /proc/sys/kernel/arch as qemu-user gives it: the host kernel's
  for ((i = 0; i < $(nproc); i++)); do
    printf 'processor\t: %d\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n' "$i"
  done > "$ROOT/proc/cpuinfo"
  # multiprocessing (spawn) re-executes sys.executable; an aarch64 ELF cannot be exec'd without
  # binfmt_misc, so sys.executable is this wrapper (qemu -0 sets argv[0], Python takes it from there).
  cat > "$EMU" <<EOF
#!/bin/sh
exec qemu-aarch64-static -cpu "\${QEMU_CPU:-cortex-a76}" -L "$ROOT" -0 "$EMU" "$ROOT/usr/bin/python3.11" "\$@"
EOF
  chmod +x "$EMU"
}

# PyPI's aarch64 wheels of the SDK's runtime deps ([cpu] extra, + onnxscript as the x86 venv has it),
# pinned to the versions the x86 venv runs, so the comparison differs only in the architecture.
install_wheels() {
  local reqs
  reqs=$("$X86_PYTHON" - <<'PY'
import importlib.metadata as m
names = ["onnxruntime", "opencv-python-headless", "numpy", "onnx", "onnxscript", "onnx-ir", "pydantic",
         "pyyaml", "click", "rich", "filelock", "paho-mqtt", "cryptography"]
for name in names:
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        pass
PY
) || return 1
  echo "$reqs" | tr '\n' ' '
  echo
  if [ -f "$SITE/.requirements" ] && [ "$(cat "$SITE/.requirements")" = "$reqs" ]; then
    echo "(installed before, same versions)"
    return 0
  fi
  local plat=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
    --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux_2_27_aarch64
    --platform manylinux_2_28_aarch64 --platform any)
  # shellcheck disable=SC2086
  "$X86_PYTHON" -m pip download -q -d "$A/wheels" "${plat[@]}" $reqs 2>&1 | grep -v "is ignored: it is neither" || true
  rm -rf "$SITE"
  # shellcheck disable=SC2086
  "$X86_PYTHON" -m pip install -q --no-index --find-links "$A/wheels" --target "$SITE" "${plat[@]}" $reqs || return 1
  echo "$reqs" > "$SITE/.requirements"
}

versions() {
  qemu-aarch64-static --version | head -1
  echo "emulated CPU: $QEMU_CPU"
  echo "x86: $("$X86_PYTHON" -c 'import platform, onnxruntime, cv2, numpy; print(platform.machine(), "Python", platform.python_version(), "onnxruntime", onnxruntime.__version__, "opencv", cv2.__version__, "numpy", numpy.__version__)')"
  local deb wheel
  for deb in "$A"/apt/cache/archives/python3.11-minimal_*.deb; do echo "aarch64 Debian python: ${deb##*/}"; done
  echo "aarch64 wheels:"
  for wheel in "$A"/wheels/{onnxruntime,opencv,numpy,onnx-,onnx_ir,onnxscript}*.whl; do
    if [ -f "$wheel" ]; then echo "  ${wheel##*/}"; fi
  done
}

providers() {
  arm - <<'PY'
import platform
import onnxruntime as ort
print("platform.machine():", platform.machine(), "| /proc/sys/kernel/arch:", open("/proc/sys/kernel/arch").read().strip())
print("onnxruntime", ort.__version__, "get_available_providers():", ort.get_available_providers())
print("XNNPACK available:", "XnnpackExecutionProvider" in ort.get_available_providers())
PY
  arm -m edge_sdk.backends.onnxruntime.providers
}

detect_as_is() {
  arm -m edge_sdk.cli.main doctor
  echo "profiles detect: $(arm -m edge_sdk.cli.main profiles detect 2>&1 | tr '\n' ' ')"
}

# A real aarch64 kernel says aarch64 in /proc/sys/kernel/arch; give the prefix that file so the SDK
# sees what a board shows (detection, device identity, reduce_range: auto). Runs still name the profile.
detect_as_board() {
  mkdir -p "$ROOT/proc/sys/kernel" && echo aarch64 > "$ROOT/proc/sys/kernel/arch"
  echo "profiles detect: $(arm -m edge_sdk.cli.main profiles detect 2>&1 | tr '\n' ' ')"
  arm -m edge_sdk.cli.main doctor 2>&1 | grep -E "arch|detected profile|arm-cpu"
}

demo_video() {
  local video=$A/demo-$FRAMES.mp4
  [ -f "$video" ] || "$X86_PYTHON" tools/make_demo_video.py "$video" --frames "$FRAMES" || return 1
  [ -f "$A/calib-$CALIB_FRAMES.mp4" ] ||
    "$X86_PYTHON" tools/make_demo_video.py "$A/calib-$CALIB_FRAMES.mp4" --frames "$CALIB_FRAMES" || return 1
  # pipelines/demo.yaml with its paths pointing into build/aarch64 (build/demo stays untouched)
  for side in arm x86; do
    sed -e 's#path: \.\./models/#path: ../../models/#' -e "s#uri: \.\./build/demo/demo.mp4#uri: demo-$FRAMES.mp4#" \
      -e "s#path: \.\./build/demo/#path: run-$side/#" pipelines/demo.yaml > "$A/demo-$side.yaml"
  done
  diff pipelines/demo.yaml "$A/demo-arm.yaml" | grep '^>'
  return 0
}

build() { # build SIDE(arm|x86) PROFILE [build options]: one engine, with the int8 range/accuracy facts its manifest has
  local side=$1 profile=$2 out
  shift 2
  out=$("$side" -m edge_sdk.cli.main build models/ssdlite_mobilenet_v2_person.onnx --profile "$profile" \
    --pipeline "$A/demo-$side.yaml" "$@" 2>&1)
  local rc=$?
  echo "$out"
  local dir
  dir=$(echo "$out" | sed -n 's/^\(built\|cached\): \(.*\) ([0-9.]* s)$/\2/p' | head -1)
  BUILT=$dir
  if [ -n "$dir" ]; then
    "$X86_PYTHON" - "$dir/manifest.json" <<'PY'
import json, sys
manifest = json.load(open(sys.argv[1]))
facts, int8 = manifest.get("facts", {}), manifest.get("facts", {}).get("int8")
print("  manifest: device", manifest.get("key", {}).get("device_identity"), "| providers", facts.get("providers_used"))
if int8 is not None:
    print("  manifest: int8 reduce_range", int8.get("reduce_range"), "| accuracy", int8.get("accuracy", {}).get("matched_boxes"))
if "equivalence" in facts:  # the equivalence gate, where the SDK has it
    gate = facts["equivalence"] or {}
    print("  manifest: equivalence gate", "passed" if gate.get("passed") else "FAILED", gate.get("summary"), f"({gate.get('seconds')} s)")
PY
  fi
  return $rc
}

xnnpack_session() { # ask for XNNPACK anyway: what does a session end up with?
  arm - "$1" <<'PY'
import sys
import warnings
import onnxruntime as ort
warnings.simplefilter("ignore")
ort.set_default_logger_severity(3)
session = ort.InferenceSession(sys.argv[1], providers=["XnnpackExecutionProvider", "CPUExecutionProvider"])
print("session asked for XNNPACK, CPU; runs on:", session.get_providers())
PY
}

# The profile's INT8 gate allows 1 point; if it refused, build once more allowing 10, to have an
# INT8 engine for the same-input check (and to show what the equivalence gate, where there is one, says).
int8_loosened() {
  if [ -n "$BUILT" ]; then echo "(the profile's gate passed: nothing to do)"; return 0; fi
  build "$@" --max-drop 10
}

same_input() { # the demo's engines, run natively and under emulation on the same tensors
  local engines=() dir
  for dir in "${ARM_ENGINES[@]}"; do engines+=("$dir/model.optimized.onnx"); done
  [ ${#engines[@]} -gt 0 ] || { echo "no arm-cpu engine was built"; return 1; }
  echo "engines: ${ARM_ENGINES[*]##*/}"
  rm -f "$A/same-x86.npz" "$A/same-arm.npz"
  x86 tools/aarch64/same_input.py run "$A/demo-$FRAMES.mp4" "$A/same-x86.npz" "$A/same-x86.npz" "${engines[@]}" &&
    arm tools/aarch64/same_input.py run "$A/demo-$FRAMES.mp4" "$A/same-x86.npz" "$A/same-arm.npz" "${engines[@]}" &&
    x86 tools/aarch64/same_input.py compare "$A/same-x86.npz" "$A/same-arm.npz"
}

run_demo() { # run_demo SIDE(arm|x86) PROFILE
  rm -rf "$A/run-$1" && mkdir -p "$A/run-$1"
  "$1" -m edge_sdk.cli.main run "$A/demo-$1.yaml" --profile "$2" --json > "$A/run-$1.json" 2> "$A/run-$1.err"
  local rc=$?
  grep -v '^demo #' "$A/run-$1.err" | tail -5
  "$X86_PYTHON" - "$A/run-$1.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
summary = json.loads(text[text.index("{\n"):]) if "{\n" in text else {}
keys = ("frames", "seconds", "fps", "latency_p50_ms", "engine_built", "engine_seconds")
print("  summary:", {k: summary.get(k) for k in keys}, "| mean infer ms:", summary.get("stage_mean_ms", {}).get("infer"))
PY
  return $rc
}

step "qemu-user-static" install_qemu
step "aarch64 prefix (Debian arm64 python3.11)" make_prefix
step "aarch64 wheels (PyPI)" install_wheels
step "versions" versions
step "providers under emulation" providers
step "doctor, detect under qemu-user as is" detect_as_is
step "detect with a board's /proc/sys/kernel/arch" detect_as_board
step "demo video ($FRAMES frames) and calibration video ($CALIB_FRAMES), natively" demo_video
ARM_ENGINES=()
INT8=(--precision int8 --calib "$A/calib-$CALIB_FRAMES.mp4")
step "arm-cpu fp32 build (emulated)" build arm arm-cpu --precision fp32
[ -z "$BUILT" ] || ARM_ENGINES+=("$BUILT")
step "arm-cpu XNNPACK session check (emulated)" xnnpack_session "$REPO/models/ssdlite_mobilenet_v2_person.onnx"
step "arm-cpu int8 build (emulated)" build arm arm-cpu "${INT8[@]}"
step "arm-cpu int8 build, --max-drop 10 (emulated)" int8_loosened arm arm-cpu "${INT8[@]}"
[ -z "$BUILT" ] || ARM_ENGINES+=("$BUILT")
step "arm-cpu demo run (emulated)" run_demo arm arm-cpu
step "x86-cpu fp32 build (native)" build x86 x86-cpu --precision fp32
step "x86-cpu int8 build (native)" build x86 x86-cpu "${INT8[@]}"
step "x86-cpu int8 build, --max-drop 10 (native)" int8_loosened x86 x86-cpu "${INT8[@]}"
step "x86-cpu demo run (native)" run_demo x86 x86-cpu
step "x86-cpu vs arm-cpu results" x86 tools/aarch64/compare_results.py "$A/run-x86/results.jsonl" "$A/run-arm/results.jsonl"
step "same engine, same tensors: x86 vs aarch64" same_input

echo
echo "=== steps"
printf '%s\n' "${STEPS[@]}"
