#!/usr/bin/env bash
# Formats hitch's C++ sources with .clang-format, or checks them (--check: lists the files that differ, exits 1).
# The formatter is pinned (clang-format 18.1.8 from PyPI, in a virtual environment under .cache/): distributions
# ship different versions, and versions before 18 lay out requires-clauses badly.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version=18.1.8
venv="${HITCH_FORMAT_VENV:-$top/.cache/clang-format-$version}"
if [[ ! -x "$venv/bin/clang-format" ]]; then
  python3 -m venv "$venv" >/dev/null
  "$venv/bin/pip" install --quiet --disable-pip-version-check "clang-format==$version"
fi
cd "$top"
mapfile -t files < <(git ls-files 'include/*.hpp' 'include/*.cuh' 'tests/*.cpp' 'tests/*.hpp' 'tests/*.cu' \
  'examples/*.cpp' 'examples/*.hpp' 'bench/*.cpp' 'bench/*.hpp' 'bench/*.cu' | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
if [[ "${1:-}" == "--check" ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$venv/bin/clang-format" --dry-run -Werror "$f" >/dev/null 2>&1; then echo "not formatted: $f"; bad=1; fi
  done
  [[ $bad -eq 0 ]] && echo "format-check: ${#files[@]} files formatted as .clang-format says"
  exit $bad
fi
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 16 "$venv/bin/clang-format" -i
echo "format: ${#files[@]} files"
