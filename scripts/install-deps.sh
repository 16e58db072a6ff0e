#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/packages.txt that are missing. Idempotent: nothing already
# installed is installed again, and apt-get is not run at all when everything is present. As a non-root user it
# prints the exact command to run and fails. With --demo, only what make demo needs (not the packages marked
# test-only: the second compiler, the formatter's venv, the benchmarks' peers).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  --demo) demo=1 ;;
  '') demo=0 ;;
  *) echo "usage: scripts/install-deps.sh [--demo]" >&2; exit 2 ;;
esac
mapfile -t wanted < <(sed -e 's/#.*//' "$here/packages.txt" | awk -v demo="$demo" 'NF && !(demo && $2 == "test-only") { print $1 }')

missing=()
for pkg in "${wanted[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "hitch: all ${#wanted[@]} required Debian packages are installed"
  exit 0
fi

command="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "hitch: missing Debian packages: ${missing[*]}" >&2
  echo "hitch: run as root:  apt-get update && $command" >&2
  exit 1
fi

echo "hitch: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when they are absent or older than a day.
if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -n 1)" ]]; then
  apt-get update -q
fi
$command
