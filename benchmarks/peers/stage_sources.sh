#!/usr/bin/env bash
# Stages the cuBQL and cudaKDTree sources that benchmarks/peers_nearest.py compiles its driver
# (benchmarks/peers/cubql_cukd_driver.cu) against, for a machine without internet: each is exported from a
# git repository as a plain tree holding only what the driver's compilation reads (the libraries' headers and
# their LICENSE; no .git, samples, tests, docs or data), with a file COMMIT (first word: the exported commit;
# then where it came from), which peers_nearest.py records in its JSON.
#
#   benchmarks/peers/stage_sources.sh [CUBQL_REPO [CUDAKDTREE_REPO]]
#
# CUBQL_REPO, CUDAKDTREE_REPO: a git checkout or a bare repository of github.com/NVIDIA/cuBQL and
# github.com/ingowald/cudaKDTree (defaults: the mirrors the `fetch` tool makes, /work/.mirror/NVIDIA+cuBQL/repo
# and /work/.mirror/ingowald+cudaKDTree/repo). Environment: CUBQL_REV, CUDAKDTREE_REV (default HEAD);
# STAGE_DIR (default .carry/peers of this checkout; /.carry/ is git-ignored and can be carried to the device).
#
# Result: STAGE_DIR/cuBQL/{cuBQL/**/*.h, LICENSE, COMMIT} and STAGE_DIR/cudaKDTree/{cukd/**/*.h, LICENSE, COMMIT};
# those two folders are replaced, nothing else in STAGE_DIR is touched. Then, from the checkout's root:
#   python3 benchmarks/peers_nearest.py --cubql-src .carry/peers/cuBQL --cudakdtree-src .carry/peers/cudaKDTree ...
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cubql_repo="${1:-/work/.mirror/NVIDIA+cuBQL/repo}"
cukd_repo="${2:-/work/.mirror/ingowald+cudaKDTree/repo}"
stage="${STAGE_DIR:-$root/.carry/peers}"

# export REPO REV NAME PATHSPEC...: DIR/NAME <- the files of REV matching the pathspecs, plus COMMIT
export_tree() {
  local repo="$1" rev="$2" name="$3"
  shift 3
  git -C "$repo" rev-parse --git-dir >/dev/null 2>&1 || { echo "$repo: not a git repository" >&2; exit 1; }
  local commit date origin
  commit="$(git -C "$repo" rev-parse --verify "$rev^{commit}")"
  date="$(git -C "$repo" log -1 --format=%cI "$commit")"
  origin="$(git -C "$repo" config --get remote.origin.url || true)"
  rm -rf "${stage:?}/$name"
  mkdir -p "$stage/$name"
  git -C "$repo" archive --format=tar "$commit" -- "$@" | tar -x -C "$stage/$name"
  printf '%s\ncommitted %s; exported from %s%s by benchmarks/peers/stage_sources.sh on %s\n' "$commit" "$date" \
    "$(cd "$repo" && pwd)" "${origin:+ (origin $origin)}" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$stage/$name/COMMIT"
  echo "$name: $commit ($date), $(find "$stage/$name" -type f | wc -l) files, $(du -sk "$stage/$name" | cut -f1) KiB"
}

mkdir -p "$stage"
export_tree "$cubql_repo" "${CUBQL_REV:-HEAD}" cuBQL ':(glob)cuBQL/**/*.h' LICENSE
export_tree "$cukd_repo" "${CUDAKDTREE_REV:-HEAD}" cudaKDTree ':(glob)cukd/**/*.h' LICENSE
test -f "$stage/cuBQL/cuBQL/bvh.h" && test -f "$stage/cudaKDTree/cukd/builder.h" ||
  { echo "the export lacks cuBQL/bvh.h or cukd/builder.h" >&2; exit 1; }
echo "staged in $stage: $(du -sk "$stage/cuBQL" "$stage/cudaKDTree" | awk '{s += $1} END {print s}') KiB in all"
