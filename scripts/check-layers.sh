#!/usr/bin/env bash
# Checks that every file under src/ includes only its own layer and the layers below it
# (docs/design.md, "Layers of the code"), and that inside src/policy one paper's folder (or
# baselines/) never includes another's: a folder includes the top of policy/, policy/common/
# and itself; common/ the top and itself; the top only itself. Run by ctest as `layers`;
# prints each bad include and exits 1 if there is one.
set -euo pipefail
src=${1:-"$(dirname "$0")/../src"}

# Lowest first; a layer may include any layer before it.
order=(core io text kernels model policy tiers engine dist trace sim serve cli)

# Layer name -> rank, and a policy file's folder (empty at the top of policy/), computed in
# the shell itself: a subshell per include made this check take half a minute.
declare -A rank_of
for i in "${!order[@]}"; do rank_of[${order[$i]}]=$i; done
folder=""
policy_folder() {
  local rest=${1#policy/}
  case "$rest" in */*) folder=${rest%%/*} ;; *) folder="" ;; esac
}

bad=0
# Every file's layer, then every include: "FILE:LAYER/HEADER" lines from one grep.
mapfile -t files < <(find "$src" \( -name '*.h' -o -name '*.cc' \) | sort)
for file in "${files[@]}"; do
  rel=${file#"$src"/}
  if [ -z "${rank_of[${rel%%/*}]:-}" ]; then
    echo "check-layers: $rel is in no known layer (add it to the order)"
    bad=1
  fi
done
while IFS= read -r line; do
  file=${line%%:*}
  inc=${line#*:}
  inc=${inc#\#include \"}
  inc=${inc%%\"*}
  rel=${file#"$src"/}
  layer=${rel%%/*}
  own=${rank_of[$layer]:--1}
  target=${inc%%/*}
  r=${rank_of[$target]:--1}
  [ "$own" -lt 0 ] || [ "$r" -lt 0 ] && continue  # Not a layer of src/ (e.g. hwy/).
  if [ "$r" -gt "$own" ]; then
    echo "check-layers: $rel ($layer) includes $inc from the higher layer $target"
    bad=1
  fi
  if [ "$layer" = policy ] && [ "$target" = policy ]; then
    policy_folder "$rel"
    from=$folder
    policy_folder "$inc"
    to=$folder
    if [ -n "$to" ] && [ "$to" != "$from" ] && { [ "$to" != common ] || [ -z "$from" ]; }; then
      echo "check-layers: $rel (policy/$from) includes $inc from the folder policy/$to"
      bad=1
    fi
  fi
done < <(grep -H '^#include "[a-z_]*/[^"]*"' "${files[@]}" || true)
if [ "$bad" -eq 0 ]; then
  echo "check-layers: every include points down (${order[*]}); no policy folder includes another's"
fi
exit "$bad"
