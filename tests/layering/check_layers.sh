#!/usr/bin/env bash
# The library's folders are layers (docs/architecture.md): a file may include headers of its
# own layer and of the layers below it, never of a layer above.  This test fails on the first
# include that points upward, so the data flow the folder names promise stays true.
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

# Bottom first; folders on one line form one layer (hmem's factory knows the vendor ifaces).
layers=(
  "util"
  "hmem cuda rocr ze neuron synapseai"
  "monitor"
  "nic"
  "cache"
  "registration"
  "core"
  "api"
)
declare -A level
for i in "${!layers[@]}"; do
  for folder in ${layers[$i]}; do level[$folder]=$i; done
done

violations=0
for folder in "${!level[@]}"; do
  while IFS= read -r hit; do
    file=${hit%%:*}
    included=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$hit")
    target=${included%%/*}
    [[ -n ${level[$target]+set} ]] || continue  # a header outside the layers (hmr/hmr.h, ...)
    if (( level[$target] > level[$folder] )); then
      echo "upward include: $file (layer '$folder') includes $included (layer '$target')"
      violations=$((violations + 1))
    fi
  done < <(cd "$root" && grep -rHo '^#include "[^"]*"' "$folder" --include='*.h' --include='*.cpp' --include='*.c' | sed 's/:#/:#/')
done
if (( violations != 0 )); then
  echo "$violations upward include(s): move the code to the layer it belongs to"
  exit 1
fi
echo "layers ok: every include points to the same layer or below"
