#!/usr/bin/env bash
# Run every ```bash block of README.md for real, in order, in a fresh clone of this repository (for a
# maintainer; CI runs tests/test_readme.py instead, which runs the CPU-cheap commands and parses the rest).
#
#   scripts/readme_commands.sh [--keep] [--skip REGEX] [--list]
#
#   --keep        keep the temporary clone (its path is printed)
#   --skip REGEX  skip the commands that match REGEX (grep -E), e.g. --skip 'postgresql|ci/run'
#   --list        print the commands (block number, command) and exit
#
# The clone is of HEAD (commit first: uncommitted changes are not in it). The first command runs
# scripts/setup.sh in the clone (a new .venv); every command runs from the clone's root with that
# .venv/bin first on PATH, one after another in one shell (so `URL=…` lines carry on). Without
# nvidia-smi the commands that name `--device cuda` are skipped (said so); the PostgreSQL commands need
# the database their URL names. Exit status: 1 when any command failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
keep=0 skip="" list=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --skip) skip="$2"; shift ;;
    --list) list=1 ;;
    *) echo "usage: $0 [--keep] [--skip REGEX] [--list]" >&2; exit 2 ;;
  esac
  shift
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/foxhunt-readme.XXXXXX")
# One line per command: "<block number><TAB><command>" (continuation lines joined), from the ```bash blocks.
awk '
  /^```bash[[:space:]]*$/ { n++; inb = 1; next }
  inb && /^```[[:space:]]*$/ { inb = 0; next }
  inb {
    line = $0
    if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, " ", line); buf = buf line; next }
    buf = buf line
    if (buf ~ /[^[:space:]]/) printf "%d\t%s\n", n, buf
    buf = ""
  }
' "$root/README.md" > "$tmp/commands.tsv"

if [ "$list" = 1 ]; then
  cat "$tmp/commands.tsv"
  rm -rf "$tmp"
  exit 0
fi

git clone -q "$root" "$tmp/foxhunt" || { echo "git clone failed" >&2; exit 1; }
cd "$tmp/foxhunt"
export PATH="$tmp/foxhunt/.venv/bin:$PATH"   # the clone's venv, once its block 1 has made it
has_cuda=0
command -v nvidia-smi >/dev/null 2>&1 && has_cuda=1

failed=() passed=() skipped=()
i=0
while IFS=$'\t' read -r block cmd; do
  i=$((i + 1))
  label="block $block, command $i"
  if [ -n "$skip" ] && grep -Eq -- "$skip" <<<"$cmd"; then skipped+=("$i (--skip)"); continue; fi
  if [ "$has_cuda" = 0 ] && grep -q -- "--device cuda" <<<"$cmd"; then skipped+=("$i (needs CUDA)"); continue; fi
  echo "== $label: $cmd"
  t0=$(date +%s)
  eval "$cmd" > "$tmp/command_$i.log" 2>&1 < /dev/null   # in this shell: NAME=value lines carry on
  rc=$?
  if [ "$rc" -eq 0 ]; then
    passed+=("$i ($(( $(date +%s) - t0 )) s)")
  else
    failed+=("$i (exit $rc, log $tmp/command_$i.log)")
    tail -n 20 "$tmp/command_$i.log"
  fi
done < "$tmp/commands.tsv"

echo
echo "passed:  ${passed[*]:-none}"
echo "skipped: ${skipped[*]:-none}"
echo "failed:  ${failed[*]:-none}"
if [ "$keep" = 1 ] || [ ${#failed[@]} -gt 0 ]; then echo "clone and logs kept in $tmp"; else rm -rf "$tmp"; fi
[ ${#failed[@]} -eq 0 ]
