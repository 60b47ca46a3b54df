#!/usr/bin/env bash
# Checks that every file under src/ includes only its own layer and the layers below it
# (docs/design.md, "Layers of the code"), and that inside src/policy one paper's folder (or
# baselines/) never includes another's: a folder includes the top of policy/, policy/common/
# and itself; common/ the top and itself; the top only itself. Run by ctest as `layers`;
# prints each bad include and exits 1 if there is one.
set -euo pipefail
src=${1:-"$(dirname "$0")/../src"}

# Lowest first; a layer may include any layer before it.
order=(core io text kernels model policy tiers engine trace sim serve cli)

rank() {
  local i
  for i in "${!order[@]}"; do
    if [ "${order[$i]}" = "$1" ]; then echo "$i"; return; fi
  done
  echo -1
}

# The folder of a path under policy/: "" for the top, else its first subfolder.
policy_folder() {
  local rest=${1#policy/}
  case "$rest" in */*) echo "${rest%%/*}" ;; *) echo "" ;; esac
}

bad=0
while IFS= read -r file; do
  rel=${file#"$src"/}
  layer=${rel%%/*}
  own=$(rank "$layer")
  if [ "$own" -lt 0 ]; then
    echo "check-layers: $rel is in no known layer (add it to the order)"
    bad=1
    continue
  fi
  while IFS= read -r inc; do
    target=${inc%%/*}
    r=$(rank "$target")
    [ "$r" -lt 0 ] && continue  # Not a layer of src/ (e.g. hwy/).
    if [ "$r" -gt "$own" ]; then
      echo "check-layers: $rel ($layer) includes $inc from the higher layer $target"
      bad=1
    fi
    if [ "$layer" = policy ] && [ "$target" = policy ]; then
      from=$(policy_folder "$rel")
      to=$(policy_folder "$inc")
      if [ -n "$to" ] && [ "$to" != "$from" ] && { [ "$to" != common ] || [ -z "$from" ]; }; then
        echo "check-layers: $rel (policy/$from) includes $inc from the folder policy/$to"
        bad=1
      fi
    fi
  done < <(sed -n 's/^#include "\([a-z_]*\/[^"]*\)".*/\1/p' "$file")
done < <(find "$src" -name '*.h' -o -name '*.cc' | sort)
if [ "$bad" -eq 0 ]; then
  echo "check-layers: every include points down (${order[*]}); no policy folder includes another's"
fi
exit "$bad"
