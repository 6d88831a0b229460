#!/usr/bin/env bash
# The whole test suite on the offline NVIDIA host (no network, no apt, the SDK not installed), from the
# checkout's root:
#   tools/gpu/suite.sh prepare   here, with PyPI and apt: .gpu/wheels (cp312 wheels) and
#                                .gpu/mosquitto/mosquitto.tar.xz (Debian's Mosquitto with its libraries;
#                                unpacked in .gpu/mosquitto-build); `prepare wheels|mosquitto` does one
#   tools/gpu/suite.sh setup     there: only the setup below (a bench then runs in $SUITE_VENV)
#   tools/gpu/suite.sh           there, carrying .gpu/wheels, .gpu/mosquitto and .gpu/ort/ort.sha256,
#                                in the warm session where verify.sh (or install_ort.sh) installed
#                                onnxruntime-gpu; without it the host's CPU onnxruntime runs the tests.
# What the host lacks and the tests need, and how it gets it:
# - the `edge-sdk` console script beside sys.executable: a venv ($SUITE_VENV, default $HOME/venv) made
#   from the host's python3 with --system-site-packages; a .pth file puts $HOME/ortsite, $HOME/site and
#   the checkout in front of its site-packages and adds the host python's own site-packages after them
#   (the host's python3 is itself a venv, whose packages --system-site-packages does not reach); an
#   editable install when hatchling and editables are there, else a launcher of edge_sdk.cli.entry:main
#   like pip's.
# - pydantic, paho-mqtt, cryptography (and the rest of pyproject's runtime and test needs the host has
#   too old or not at all): pip install --no-index from .gpu/wheels, resolved against what the host has,
#   so its numpy, onnx, torch... stay. Not carried: ruff, mypy, types-PyYAML (lint, no test runs them) and
#   imageio-ffmpeg (68 MB; its tests skip, as do those needing rtsp-server-perl).
# - mosquitto (tools/harness/broker.py finds it on PATH): a wrapper that sets LD_LIBRARY_PATH to the carried
#   libraries for Mosquitto alone (Debian's libssl and libcrypto stay out of Python and CUDA's way).
# Then pytest -q -rs (sequential: pytest-xdist is no test dependency) under `timeout 540`, the log in
# $OUT/suite.txt and $OUT/junit.xml, the setup in $OUT/setup.txt; it prints the counts, the failures,
# the skip reasons and the time. Arguments go to pytest (`tools/gpu/suite.sh -k broker`); SUITE_TESTS
# picks tests (space-separated; default: pyproject's testpaths), SUITE_TIMEOUT (540 s) bounds pytest,
# SUITE_ARCH (uname -m) names the host's architecture for wheel tags and library folders,
# SUITE_SHARDS (1) runs that many pytest processes side by side over the test files,
# SUITE_PYTHON (python3) is the host interpreter, SUITE_VENV the venv, SUITE_WHEELS (.gpu/wheels) the wheels.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
wheels=${SUITE_WHEELS:-$root/.gpu/wheels}
# The Debian/wheel architecture of the host the suite runs on (the NVIDIA host is x86_64 like this one).
arch=${SUITE_ARCH:-$(uname -m)}
multiarch=$arch-linux-gnu
# Library folders of an unpacked Debian root: lib_dirs ROOT
lib_dirs() { echo "$1/usr/lib/$multiarch:$1/lib/$multiarch"; }
mosquitto_tar=$root/.gpu/mosquitto/mosquitto.tar.xz

# Missing on the host: with their dependencies, into .gpu/wheels (install_ort.sh puts these in $HOME/site).
RUNTIME_WHEELS=("paho-mqtt>=2.0" "cryptography>=42" cffi pycparser annotated-types typing-inspection "zstandard>=0.22")
# pydantic and the pydantic-core it pins are added by `prepare`.
# What the GPU benchmarks read and the host lacks: NVML's Python binding (tools/bench/gpu_pipeline.py).
BENCH_WHEELS=(nvidia-ml-py)
# The host has these; the newest small wheels go to .gpu/wheels/fallback in case its versions are too old.
FALLBACK_WHEELS=("pyyaml>=6.0" "click>=8.1" "rich>=13" markdown-it-py mdurl "filelock>=3.12"
  "prometheus-client>=0.17" "pytest>=8" pluggy iniconfig packaging "pytest-timeout>=2.2" "hypothesis>=6.100"
  sortedcontainers attrs typing-extensions "onnxscript>=0.5" onnx-ir "networkx>=3.0")
NOT_CARRIED=(ruff mypy types-PyYAML imageio-ffmpeg)
# The broker and its password tool, as paths inside an unpacked Debian root (the first is the broker).
MOSQUITTO_TOOLS=(usr/sbin/mosquitto usr/bin/mosquitto_passwd)
# Debian bookworm's Mosquitto 2.0.11 and every library it loads but glibc (checked with ldd by `prepare`).
MOSQUITTO_DEBS=(mosquitto libwrap0 libsystemd0 libdlt2 libssl3 libcap2 libnsl2 libgcrypt20 liblzma5 libzstd1
  liblz4-1 libtirpc3 libgpg-error0 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1)

prepare_wheels() {
  local py=${SUITE_PREPARE_PYTHON:-python3} core
  # the same platforms as ../shared/tools/prepare-gpu-wheels.sh, so both pick the same files
  local plat=(--only-binary=:all: --python-version "${SUITE_PYTHON_VERSION:-3.12}" --implementation cp
    --platform "manylinux_2_34_$arch" --platform "manylinux_2_28_$arch"
    --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" --platform any)
  rm -rf "$wheels" && mkdir -p "$wheels/fallback"
  "$py" -m pip download -q --no-deps "${plat[@]}" -d "$wheels" "pydantic>=2.5" "${RUNTIME_WHEELS[@]}" "${BENCH_WHEELS[@]}"
  core=$(unzip -p "$wheels"/pydantic-*.whl '*/METADATA' |
    sed -n 's/^Requires-Dist: *\(pydantic[-_]core\) *\([=<>!~][^;]*\).*/\1\2/p' | tr -d ' ')
  "$py" -m pip download -q --no-deps "${plat[@]}" -d "$wheels" "${core:-pydantic-core}"
  "$py" -m pip download -q --no-deps "${plat[@]}" -d "$wheels/fallback" "${FALLBACK_WHEELS[@]}"
  du -sh "$wheels"
}

prepare_mosquitto() {
  local build=$root/.gpu/mosquitto-build outside version
  local libs
  libs=$(lib_dirs "$build/unpacked")
  rm -rf "$build" && mkdir -p "$build/debs" "$(dirname "$mosquitto_tar")"
  (cd "$build/debs" && apt-get download "${MOSQUITTO_DEBS[@]}")
  for deb in "$build"/debs/*.deb; do dpkg -x "$deb" "$build/unpacked"; done
  (cd "$build/unpacked" && rm -rf usr/share etc lib/systemd usr/bin/mosquitto_ctrl "usr/lib/$multiarch/engines-3" \
    "usr/lib/$multiarch/ossl-modules" "usr/lib/$multiarch/krb5" "usr/lib/$multiarch"/mosquitto_*.so)
  # soname links become the files they name
  find "$build/unpacked" -type l | while read -r link; do mv -f "$(dirname "$link")/$(readlink "$link")" "$link"; done
  local tools=("${MOSQUITTO_TOOLS[@]/#/$build/unpacked/}")
  outside=$(LD_LIBRARY_PATH=$libs ldd "${tools[@]}" |
    awk '/=>/ {print $1, $3}' | grep -v "$build/unpacked" | grep -Ev '^(libc|libm|libresolv|libpthread|libdl|librt)\.so' || true)
  [ -z "$outside" ] || { echo "prepare: mosquitto also loads, from this system: $outside" >&2; return 1; }
  version=$(LD_LIBRARY_PATH=$libs "${tools[0]}" -h 2>&1 | head -1 || true)
  echo "$version" | grep -q "^mosquitto version" || { echo "prepare: mosquitto -h says: $version" >&2; return 1; }
  echo "$version"
  tar -C "$build/unpacked" -cJf "$mosquitto_tar" .
  du -sh "$mosquitto_tar"
}

if [ "${1:-}" = prepare ]; then
  set -e
  case "${2:-all}" in
    wheels) prepare_wheels ;;
    mosquitto) prepare_mosquitto ;;
    all) prepare_wheels && prepare_mosquitto ;;
    *) echo "usage: $0 prepare [wheels|mosquitto|all]" >&2; exit 2 ;;
  esac
  exit
fi

cd "$root" || exit 1
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
venv=${SUITE_VENV:-$HOME/venv}
# resolved before the venv's bin goes first on PATH (its python3 is not the host's)
host_python=$(command -v "${SUITE_PYTHON:-python3}") || { echo "no ${SUITE_PYTHON:-python3}"; exit 1; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
unset PYTHONPATH PYTHONHOME
export PATH=$venv/bin:$HOME/mosquitto/bin:$PATH  # the venv's python and edge-sdk, the Mosquitto wrappers
{
  echo "== onnxruntime-gpu"
  ORT_WHEELS=$wheels ORT_PYTHON=$host_python bash tools/gpu/install_ort.sh || echo "WARNING: no onnxruntime-gpu in \$HOME/ortsite; the host's own onnxruntime runs the tests"

  echo "== venv $venv from $host_python ($("$host_python" -c 'import sys; print(sys.executable, sys.version.split()[0])'))"
  # the host python's site-packages (it may itself be a venv, which --system-site-packages does not reach)
  host_sites=$("$host_python" -c 'import sys; print(repr([p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]))')
  rm -rf "$venv"
  "$host_python" -m venv --system-site-packages "$venv" 2>/dev/null ||
    { rm -rf "$venv" && "$host_python" -m venv --system-site-packages --without-pip "$venv"; } || exit 1
  vpy=$venv/bin/python
  purelib=$("$vpy" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  front=()
  for dir in "$HOME/ortsite" "$HOME/site" "$root"; do [ -d "$dir" ] && front+=("$dir"); done
  front_repr=$("$vpy" -c 'import sys; print(repr(sys.argv[1:]))' "${front[@]}")
  # site runs the .pth line at every start: the front folders go before the first site-packages, the
  # host's own site-packages (with their .pth files) after the venv's
  cat > "$purelib/_edge_sdk_suite_path.py" <<PY
"""sys.path of the venv tools/gpu/suite.sh made for the tests."""
import site
import sys

FRONT = $front_repr
HOST_SITES = $host_sites
_at = next((n for n, p in enumerate(sys.path) if p.endswith(("site-packages", "dist-packages"))), len(sys.path))
sys.path[_at:_at] = [p for p in FRONT if p not in sys.path]
for _site in HOST_SITES:
    site.addsitedir(_site)
PY
  echo "import _edge_sdk_suite_path" > "$purelib/00-edge-sdk-suite.pth"

  echo "== pyproject's runtime and test requirements (from $wheels)"
  mapfile -t requirements < <("$vpy" - "${NOT_CARRIED[@]}" <<'PY'
import re, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
skip = {name.lower() for name in sys.argv[1:]}
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    if re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower() not in skip:
        print(requirement)
PY
)
  links=(--find-links "$wheels")
  [ -d "$wheels/fallback" ] && links+=(--find-links "$wheels/fallback")
  if ! "$vpy" -m pip install -q --no-index "${links[@]}" "${requirements[@]}"; then
    echo "WARNING: they do not install together; one at a time:"
    for requirement in "${requirements[@]}"; do
      "$vpy" -m pip install -q --no-index "${links[@]}" "$requirement" >/dev/null 2>&1 || echo "  cannot install $requirement"
    done
  fi
  for name in "${NOT_CARRIED[@]}"; do
    "$vpy" -m pip show -q "$name" >/dev/null 2>&1 || echo "  not carried: $name"
  done

  echo "== edge-sdk console script"
  # (hatchling's editable wheel of this project needs `editables`: it force-includes device_profiles)
  if "$vpy" -c 'import hatchling, editables' 2>/dev/null &&
    "$vpy" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1; then
    echo "editable install (hatchling)"
  else
    printf '%s\n' "#!$vpy" "import sys" "from edge_sdk.cli.entry import main" "if __name__ == '__main__':" \
      "    sys.argv[0] = sys.argv[0].removesuffix('.exe')" "    sys.exit(main())" > "$venv/bin/edge-sdk"
    chmod +x "$venv/bin/edge-sdk"
    # the plugin seams (edge-sdk offload, the offload: section) are found by entry point: declare them
    "$vpy" - "$purelib" <<'PY'
import sys, tomllib
from pathlib import Path
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
info = Path(sys.argv[1]) / f"{project['name'].replace('-', '_')}-0+checkout.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: 0+checkout\n")
groups = project.get("entry-points", {})
(info / "entry_points.txt").write_text(
    "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()) + "\n" for group, points in groups.items())
)
PY
    echo "launcher $venv/bin/edge-sdk and the entry points (hatchling and editables are not both here, or the editable install failed)"
  fi

  echo "== mosquitto"
  mosquitto_root=""
  if [ -f "$mosquitto_tar" ]; then
    mosquitto_root=$HOME/mosquitto/root
    rm -rf "$mosquitto_root" && mkdir -p "$mosquitto_root" && tar -xJf "$mosquitto_tar" -C "$mosquitto_root"
  fi
  if [ -n "$mosquitto_root" ]; then
    mkdir -p "$HOME/mosquitto/bin"
    for tool in "${MOSQUITTO_TOOLS[@]}"; do
      printf '%s\n' '#!/bin/sh' \
        "LD_LIBRARY_PATH=$(lib_dirs "$mosquitto_root") exec $mosquitto_root/$tool \"\$@\"" \
        > "$HOME/mosquitto/bin/$(basename "$tool")"
      chmod +x "$HOME/mosquitto/bin/$(basename "$tool")"
    done
  else
    echo "WARNING: no $mosquitto_tar; the broker tests skip or fail"
  fi
  echo "mosquitto: $(command -v mosquitto || echo none) $(mosquitto -h 2>&1 | head -1)"

  echo "== what the tests will import"
  "$vpy" - <<'PY'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("edge_sdk", "onnxruntime", "onnx", "numpy", "cv2", "pydantic", "paho.mqtt", "cryptography", "pytest", "torch"):
    try:
        module = importlib.import_module(name)
        print(f"  {name} {getattr(module, '__version__', '')} {module.__file__}")
    except Exception as exc:
        print(f"  {name}: {type(exc).__name__}: {exc}")
try:
    import onnxruntime
    print("  providers", onnxruntime.get_available_providers())
except Exception:
    pass
PY
  echo "edge-sdk --help: $("$venv/bin/edge-sdk" --help 2>&1 | head -1)"
} 2>&1 | tee "$OUT/setup.txt"
vpy=$venv/bin/python  # (the braces ran in a subshell)
[ -x "$venv/bin/edge-sdk" ] || { echo "setup failed: no $venv/bin/edge-sdk (see $OUT/setup.txt)"; exit 1; }
[ "${1:-}" = setup ] && exit 0  # the venv, edge-sdk and mosquitto for a bench (tools/gpu/h200_offload.sh)

echo "== pytest ${SUITE_TESTS:-(whole suite)}, log in $OUT/suite.txt"
started=$(date +%s)
# SIGINT first: pytest then still writes its summary and the junit file
# shellcheck disable=SC2086  # SUITE_TESTS is a word list
shards=${SUITE_SHARDS:-1}
if [ "$shards" -gt 1 ] && [ -z "${SUITE_TESTS:-}" ]; then
  # SUITE_SHARDS pytest processes side by side, test files dealt round-robin (many cores, a short lease)
  mapfile -t files < <(find tests -name 'test_*.py' | sort)
  for ((i = 0; i < shards; i++)); do
    shard=()
    for ((j = i; j < ${#files[@]}; j += shards)); do shard+=("${files[j]}"); done
    timeout -s INT -k 20 "${SUITE_TIMEOUT:-540}" "$vpy" -m pytest -q -rs -p no:cacheprovider \
      --junitxml="$OUT/junit-$i.xml" "$@" "${shard[@]}" > "$OUT/suite-$i.txt" 2>&1 &
  done
  status=0
  for job in $(jobs -p); do wait "$job" || status=$?; done
  cat "$OUT"/suite-*.txt > "$OUT/suite.txt"
else
  timeout -s INT -k 20 "${SUITE_TIMEOUT:-540}" "$vpy" -m pytest -q -rs -p no:cacheprovider \
    --junitxml="$OUT/junit.xml" "$@" ${SUITE_TESTS:-} > "$OUT/suite.txt" 2>&1
  status=$?
fi
seconds=$(($(date +%s) - started))
[ "$status" = 124 ] && echo "pytest ran past ${SUITE_TIMEOUT:-540} s and was interrupted"
"$vpy" - "$OUT"/junit*.xml <<'PY'
import collections, sys, xml.etree.ElementTree as ET
cases = []
for report in sys.argv[1:]:
    try:
        cases += list(ET.parse(report).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as exc:
        print(f"no junit report {report} ({exc})")
outcome = collections.Counter()
skips = collections.Counter()
failed = []
for case in cases:
    name = f"{case.get('classname')}::{case.get('name')}"
    for kind in ("failure", "error", "skipped"):
        found = case.find(kind)
        if found is not None:
            break
    else:
        outcome["passed"] += 1
        continue
    outcome[{"failure": "failed", "error": "errors"}.get(kind, kind)] += 1
    message = (found.get("message") or "").strip().splitlines()
    if kind == "skipped":
        skips[message[0] if message else "?"] += 1
    else:
        failed.append(f"  {kind.upper()} {name}: {message[0][:200] if message else ''}")
print(", ".join(f"{n} {k}" for k, n in sorted(outcome.items())))
print("\n".join(failed[:80]))
print("skipped, by reason:")
for reason, n in skips.most_common():
    print(f"  {n:3d} {reason[:220]}")
PY
echo "pytest: $(grep -h ' in [0-9.]*s' "$OUT"/suite*.txt | tail -n "$shards" | tr '\n' ' ')"
echo "exit status $status, $seconds s"
exit "$status"
