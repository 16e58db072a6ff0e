#!/usr/bin/env bash
# Compiles every public header of hitch on its own (one translation unit per header, included twice) with the
# given compiler at -Wall -Wextra -Werror: a header must include what it uses and compile warning-free with every
# compiler users have. Headers under cuda/ need the CUDA toolkit's headers and are checked when they are found.
#   scripts/check-headers.sh [compiler] [jobs]       e.g. scripts/check-headers.sh clang++ 2
set -euo pipefail
cxx="${1:-c++}"
jobs="${2:-$(nproc)}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v "$cxx" >/dev/null || { echo "check-headers: compiler '$cxx' not found" >&2; exit 1; }

mpi_flags=""
if command -v mpicxx >/dev/null; then mpi_flags="$(mpicxx -show | tr ' ' '\n' | grep -E '^-I' | tr '\n' ' ')"; fi
cuda_flags=""
for dir in /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include; do
  [[ -f "$dir/cuda_runtime.h" ]] && { cuda_flags="-I$dir"; break; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$top/include"
mapfile -t headers < <(find hitch -name '*.hpp' | sort)
[[ -z "$cuda_flags" ]] && mapfile -t headers < <(printf '%s\n' "${headers[@]}" | grep -v '^hitch/cuda/')

check_one() {
  local header="$1" tu="$work/$(echo "$1" | tr '/.' '__').cpp"
  printf '#include "%s"\n#include "%s"\nint main() { return 0; }\n' "$header" "$header" >"$tu"
  # shellcheck disable=SC2086
  if ! out="$("$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I"$top/include" $mpi_flags $cuda_flags "$tu" 2>&1)"; then
    printf 'FAIL %s\n%s\n' "$header" "$out" | head -n 25
    return 1
  fi
}
export -f check_one
export cxx top work mpi_flags cuda_flags
failed=0
printf '%s\n' "${headers[@]}" | xargs -P "$jobs" -I{} bash -c 'check_one "$@"' _ {} >"$work/log" 2>&1 || failed=1
cat "$work/log"
count=${#headers[@]}
bad=$(grep -c '^FAIL ' "$work/log" || true)
echo "check-headers ($("$cxx" --version | head -n 1)): $((count - bad)) of $count headers compile on their own"
[[ $failed -eq 0 && $bad -eq 0 ]]
