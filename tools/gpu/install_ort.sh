#!/usr/bin/env bash
# On the NVIDIA host (the device tool), once per machine: onnxruntime-gpu from the parts staged in
# $HOME/stage (DEVELOPERS notes: ../shared/tools/prepare-gpu-wheels.sh) into $HOME/ortsite, and the SDK's
# small wheels (.gpu/wheels/*.whl: pydantic, paho-mqtt, cryptography and what they need) into $HOME/site.
# A warm machine keeps both, and then this does nothing. verify.sh and suite.sh call it; they put
# $HOME/ortsite (which shadows the host's CPU onnxruntime) and $HOME/site on sys.path.
# Exit status 1 when it cannot (no parts, no checksum, checksum mismatch), with one line saying why.
# ORT_SHA256 names the checksum file (default .gpu/ort/ort.sha256 in the checkout), ORT_WHEELS the
# wheel folder (default .gpu/wheels), ORT_PYTHON the interpreter whose pip installs them (python3).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sums=${ORT_SHA256:-$root/.gpu/ort/ort.sha256}
wheels=${ORT_WHEELS:-$root/.gpu/wheels}
if [ -d "$HOME/ortsite/onnxruntime" ]; then
  exit 0
fi
if ! compgen -G "$HOME/stage/ort.part*" >/dev/null; then
  echo "install_ort: no onnxruntime-gpu parts in $HOME/stage (copy each .gpu/ort/cN/ort.partNN there first)" >&2
  exit 1
fi
if [ ! -f "$sums" ]; then
  echo "install_ort: no checksum file $sums (carry .gpu/ort/ort.sha256)" >&2
  exit 1
fi
cat "$HOME"/stage/ort.part* > "$HOME/ort.tar.xz"
echo "$(cut -d' ' -f1 "$sums")  $HOME/ort.tar.xz" | sha256sum -c || exit 1
rm -rf "$HOME/ortsite.partial" && mkdir -p "$HOME/ortsite.partial" &&
  tar -xJf "$HOME/ort.tar.xz" -C "$HOME/ortsite.partial" || exit 1
rm -rf "$HOME/ortsite" && mv "$HOME/ortsite.partial" "$HOME/ortsite" && rm -f "$HOME/ort.tar.xz"
if compgen -G "$wheels/*.whl" >/dev/null; then
  "${ORT_PYTHON:-python3}" -m pip install -q --no-index --no-deps --target "$HOME/site" "$wheels"/*.whl || exit 1
fi
