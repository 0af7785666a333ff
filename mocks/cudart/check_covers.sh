#!/bin/sh
# check_covers.sh PLUGIN MOCK: every symbol PLUGIN takes from libcudart.so.13
# (undefined, version node libcudart.so.13) must be defined by MOCK under
# that node; prints the missing ones and fails otherwise.
set -eu
plugin=$1 mock=$2
for f in "$plugin" "$mock"; do
  [ -r "$f" ] || { echo "check_covers: cannot read $f" >&2; exit 2; }
done
need=$(nm -D --undefined-only "$plugin" | sed -n 's/.* \([A-Za-z_][A-Za-z0-9_]*\)@libcudart\.so\.13$/\1/p' | sort -u)
have=$(nm -D --defined-only "$mock" | sed -n 's/.* \([A-Za-z_][A-Za-z0-9_]*\)@@libcudart\.so\.13$/\1/p' | sort -u)
missing=$(printf '%s\n' "$need" | grep -vxF -e "$(printf '%s\n' "$have")" || true)
if [ -z "$need" ]; then
  echo "check_covers: $plugin takes nothing from libcudart.so.13 (not linked -cudart shared?)" >&2
  exit 1
fi
if [ -n "$missing" ]; then
  echo "check_covers: the mock lacks what $(basename "$plugin") needs from libcudart.so.13:" >&2
  printf '  %s\n' $missing >&2
  exit 1
fi
echo "check_covers: all $(printf '%s\n' "$need" | wc -l) libcudart.so.13 symbols of $(basename "$plugin") are mocked"
