#!/usr/bin/env bash
# Make the checkout small enough for the GPU machine, and put it back.
#
# The device tool sends the whole working tree (tracked files, untracked ones git does not ignore,
# and the carried paths) and refuses more than 64 MiB; the bundled artifacts and corpora alone are
# about 145 MB. A GPU run needs none of them: lab/turn_mil_curve_payload.py and
# lab/turn_labels_payload.py pack what it reads into an ignored folder that the call carries.
#
#   lab/gpu_stage.sh out [STASH]    move the large tracked folders to STASH (default /tmp/gpu_stash),
#                                   then print what would travel, in bytes
#   lab/gpu_stage.sh back [STASH]   move them back; fails loudly if the tree is not as committed
#
# Do not commit between `out` and `back`: git would record the folders as deleted.
set -euo pipefail
cd "$(dirname "$0")/.."
stash="${2:-/tmp/gpu_stash}"
folders=(src/guardian/resources/intent_model src/guardian/resources/turn_model data/conversations
         data/mentalmanip data/faceacts data/chatbot lab/data tests/data)
case "${1:-}" in
  out)
    for f in "${folders[@]}"; do
      if [[ -e "$stash/$f" ]]; then echo "$stash/$f exists: run '$0 back' first" >&2; exit 1; fi
    done
    for f in "${folders[@]}"; do mkdir -p "$stash/$(dirname "$f")"; mv "$f" "$stash/$f"; done
    # du skips (and complains about) the tracked files just moved away: that is the point
    tracked=$( (git ls-files -z | xargs -0 du -cb 2>/dev/null || true) | tail -1 | cut -f1)
    untracked=$( (git ls-files -o --exclude-standard -z | xargs -0 -r du -cb 2>/dev/null || true) | tail -1 | cut -f1)
    echo "travels without carried paths: $((tracked + ${untracked:-0})) bytes (limit 67108864 with them)"
    ;;
  back)
    for f in "${folders[@]}"; do [[ -e "$stash/$f" ]] && mv "$stash/$f" "$f"; done
    if [[ -n "$(git status --porcelain -- "${folders[@]}")" ]]; then
      echo "the restored folders differ from HEAD: git status" >&2; exit 1
    fi
    echo "restored"
    ;;
  *) echo "usage: $0 out|back [STASH]" >&2; exit 2 ;;
esac
