#!/usr/bin/env bash
# scripts/check-layering against copies of this tree with one rule broken each: the tree as it is
# passes; a torch-free folder's file that links torch, a torch/ file in the core's list, a
# torch-free folder's file the core does not compile, and a "../" include (in src/ or in tests/) each
# fail, naming the file.
set -uo pipefail
src=${TRAINBOX_SOURCE_DIR:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
fresh() {  # a copy of what check-layering reads
  rm -rf "$tmp/t" && mkdir "$tmp/t" && cp -r "$src"/{CMakeLists.txt,cmake,src,include,tools} "$tmp/t/"
}
check() {  # check NAME WANTED_RC PATTERN (grep -E in the output)
  "$src/scripts/check-layering" "$tmp/t" >"$tmp/out" 2>&1
  local rc=$?
  if [[ $rc != "$2" ]] || ! grep -qE -- "$3" "$tmp/out"; then
    echo "FAIL $1: exit $rc (wanted $2), output:"; cat "$tmp/out"; fail=1
  else
    echo "ok   $1"
  fi
}
fresh
check "the tree as it is" 0 "no \"\.\./\" include"
fresh
printf '#include <trainbox/util/strings.h>\n#include <ATen/ATen.h>\n' >>"$tmp/t/src/io/sha256.cpp"
check "io/ file reaching torch" 1 "src/io/sha256.cpp is torch-free but reaches torch"
fresh
sed -i 's|src/io/onnx.cpp|src/io/onnx.cpp src/io/torch/pt.cpp|' "$tmp/t/CMakeLists.txt"
check "torch/ file in the core" 1 "src/io/torch/pt.cpp is compiled into the torch-free core, but its path says torch"
fresh
sed -i 's|src/models/gpt.cpp|src/models/gpt.cpp src/env/extra.cpp|' "$tmp/t/cmake/torch.cmake"
printf '#include <torch/torch.h>\n' >"$tmp/t/src/env/extra.cpp"
check "torch-linked file in env/" 1 "src/env/extra.cpp is in a torch-free folder but the torch-linked library compiles it"
fresh
sed -i 's| src/util/cpu_features.cpp||' "$tmp/t/CMakeLists.txt"
check "torch-free folder's file left out of the core" 1 "src/util/cpu_features.cpp is in a torch-free folder but neither"
fresh
sed -i '1i #include "../data/config.h"' "$tmp/t/src/train/optim.cpp"
check '"../" include' 1 'src/train/optim.cpp includes "\.\./data/config.h", a private header of another folder'
fresh
mkdir -p "$tmp/t/tests/unit/torch" && printf '#include "../temp_dir.h"\n' >"$tmp/t/tests/unit/torch/test_x.cpp"
check '"../" include in a test' 1 'tests/unit/torch/test_x.cpp includes "\.\./temp_dir.h"; fix: put the folder on'
exit $fail
