#!/usr/bin/env bash
# Prints every `labkit` command's --help, `labkit show` of each recipe and its variants, and `labkit check`,
# so a structural change can be compared byte for byte (issue 24): tools/cli_snapshot.sh > before.txt.
set -u
cd "$(dirname "$0")/.."
LK=${LABKIT:-.venv/bin/labkit}
export COLUMNS=110
cmds=$($LK --help | sed -n 's/^ *{\(.*\)}$/\1/p' | head -1 | tr ',' ' ')
echo "== labkit --help"; $LK --help
for c in $cmds; do echo "== labkit $c --help"; $LK "$c" --help 2>&1; done
for r in recipes/*/; do
  r=$(basename "$r")
  echo "== labkit show $r"; $LK show "$r" 2>&1
  echo "== labkit show $r --json"; $LK show "$r" --json 2>&1
done
echo "== labkit show dsv41 --spec dspark"; $LK show dsv41 --spec dspark 2>&1
echo "== labkit show dsv41 --staging local-view"; $LK show dsv41 --staging local-view 2>&1
echo "== labkit check"; $LK check 2>&1; echo "exit $?"
echo "== labkit recipes"; $LK recipes 2>&1
