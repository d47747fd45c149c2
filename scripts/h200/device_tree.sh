#!/usr/bin/env bash
# The device tool ships the checkout's tracked and untracked-not-ignored files, at most 64 MiB with the carry;
# raw/ alone is over that (68 MB of sealed runs, append-only, so it only grows). No device command needs raw/
# (runs are written on the device and brought home with unpack.py), so for the length of a device call it is
# taken out of what travels WITHOUT touching a file in it: its paths leave the index (a staged deletion that
# only `git commit` with no paths would commit) and /raw/ goes into .git/info/exclude.
#
#   scripts/h200/device_tree.sh hide      before the calls: prints what would travel
#   scripts/h200/device_tree.sh restore   right after: the index and exclude file as they were
#   scripts/h200/device_tree.sh status
# Commit nothing between hide and restore, or commit with explicit paths only (`git commit -- PATHS`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
exclude=$(git rev-parse --git-path info/exclude)
hidden() { grep -qxF /raw/ "$exclude" 2>/dev/null; }
travels() { git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1; }
case ${1:-status} in
  hide)
    hidden && { echo "raw/ is hidden already"; exit 0; }
    git rm -r -q --cached raw
    echo /raw/ >>"$exclude"
    echo "raw/ hidden from the device copy; what travels now: $(($(travels) / 1024)) KiB (+ the carry)" ;;
  restore)
    git reset -q -- raw
    if hidden; then sed -i '\#^/raw/$#d' "$exclude"; fi
    echo "raw/ restored in the index; git status shows $(git status --short -- raw | wc -l) changed raw paths" ;;
  status)
    if hidden; then echo "hidden"; else echo "not hidden"; fi
    echo "what travels: $(($(travels) / 1024)) KiB (+ the carry)" ;;
  *) echo "usage: $0 hide|restore|status" >&2; exit 2 ;;
esac
