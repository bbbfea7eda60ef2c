#!/usr/bin/env bash
# Print the Debian packages of the given scopes (host, runtime, test) from requirements/debian.txt, one
# per line: the one list .ci/run and the Dockerfile install from.
set -euo pipefail
list="$(dirname "$0")/../requirements/debian.txt"
(($#)) || { echo "usage: $0 SCOPE..." >&2; exit 2; }
for scope in "$@"; do
  case "$scope" in host | runtime | test) ;; *) echo "$0: unknown scope '$scope' (host, runtime, test)" >&2; exit 2 ;; esac
done
awk -F'|' -v scopes=" $* " '
  /^[[:space:]]*(#|$)/ { next }
  { name = $1; scope = $2; gsub(/[[:space:]]/, "", name); gsub(/[[:space:]]/, "", scope)
    if (index(scopes, " " scope " ")) print name }' "$list"
