#!/bin/bash
# usage: D=DIR scripts/bench-dawn.sh FRAMES: native bench-lm, then the wasm build's benchLm on Dawn, same GPU
# DIR holds: inferencelayer (the native release binary), pkg/ (`wasm-pack build --release
# --target nodejs`), bench-dawn.mjs, node.xz (a Node binary), webgpu/ (the `webgpu` npm
# package's index.js and package.json) and dawn.node.xz (its dist/linux-x64/dawn.node), for a
# machine with neither Node nor a network. Results go to $OUT (native.json, dawn.json).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
J=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $J ] && export VK_DRIVER_FILES=$J
export XDG_RUNTIME_DIR=/tmp
D=${D:-.bench/dawn}
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2"; }
date -u | tee $OUT/env.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a $OUT/env.txt
ls /usr/local/nvidia/share/vulkan/icd.d/ /usr/share/vulkan/icd.d/ /etc/vulkan/icd.d/ 2>&1 | tee -a $OUT/env.txt
unxz $D/node.xz /tmp/node && chmod +x /tmp/node && /tmp/node --version | tee -a $OUT/env.txt
mkdir -p /tmp/webgpu/dist/linux-x64 && cp $D/webgpu/* /tmp/webgpu/ && unxz $D/dawn.node.xz /tmp/webgpu/dist/linux-x64/dawn.node
echo "== native bench-lm"
( time $D/inferencelayer bench-lm --frames $1 --profile 0 --json > $OUT/native.json 2> $OUT/native.err ) 2>&1
tail -3 $OUT/native.err; python3 -c "import json;d=json.load(open('$OUT/native.json'));print(d['adapter']);print('native step_ms',d['step_ms']);print('native cpu',d['cpu_encode_submit_ms'])"
echo "== wasm benchLm on Dawn"
( time timeout 400 /tmp/node $D/bench-dawn.mjs $D/pkg /tmp/webgpu $1 10 $OUT/native.json > $OUT/dawn.json 2> $OUT/dawn.err ) 2>&1
echo "rc=$?"; tail -30 $OUT/dawn.err; cat $OUT/dawn.json
date -u
