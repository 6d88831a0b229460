#!/usr/bin/env bash
# `make bench`'s scripts at two revisions, side by side: each script runs at BASE, then at this
# checkout, one after the other, so both see the same machine load. For restructurings that must
# change no figure a user sees. Prints where the outputs are; compare them by hand.
#
# Usage: tools/bench/revisions.sh BASE [script ...]   (default: every script `make bench` runs)
# Needs the venv (`make .venv/.test`) and the demo video (`make build/demo/demo.mp4`).
set -euo pipefail
base=${1:?usage: tools/bench/revisions.sh BASE [script ...]}
shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
scripts=("$@")
if [ ${#scripts[@]} -eq 0 ]; then
    mapfile -t scripts < <(sed -n 's|^\t$(BIN)/python tools/bench/\([a-z0-9_]*\)\.py.*|\1|p' "$repo/Makefile")
fi
out="$repo/build/bench-revisions"
worktree=$(mktemp -d /tmp/edge-sdk-bench-base.XXXXXX)
trap 'git -C "$repo" worktree remove --force "$worktree" >/dev/null 2>&1 || true' EXIT
git -C "$repo" worktree add --quiet --detach "$worktree" "$base"
mkdir -p "$out/base" "$out/head" "$worktree/build/demo"
# The base reads the same demo video and models; it keeps its own engine cache.
cp "$repo/build/demo/demo.mp4" "$worktree/build/demo/demo.mp4"
for script in "${scripts[@]}"; do
    for side in base head; do
        root=$([ "$side" = base ] && echo "$worktree" || echo "$repo")
        echo "== $script at $side ($(git -C "$root" rev-parse --short HEAD))"
        (cd "$root" && PYTHONPATH="$root" "$repo/.venv/bin/python" "tools/bench/$script.py") \
            > "$out/$side/$script.txt" 2>&1 || echo "   (exit $?; see $out/$side/$script.txt)"
    done
done
echo "outputs: $out/base/*.txt and $out/head/*.txt"
