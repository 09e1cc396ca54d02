#!/bin/bash
# usage: D=DIR W=hash|fast scripts/bench-dawn.sh FRAMES: every stage (Mimi encode and decode,
# the LM step, the whole full-duplex frame) natively (`bench`, `bench-lm --mimi`), then the
# same stages from the wasm build on Dawn (`scripts/bench-dawn.mjs`), on the same GPU, and
# the ratios (wasm / native) per stage.
# DIR holds: inferencelayer (the native release binary), pkg/ (`wasm-pack build --release
# --target nodejs`), bench-dawn.mjs, node.xz (a Node binary), webgpu/ (the `webgpu` npm
# package's index.js and package.json) and dawn.node.xz (its dist/linux-x64/dawn.node), for a
# machine with neither Node nor a network (`scripts/side-by-side.sh prepare` packs it). W
# picks the synthetic LM's generator (default fast: the same bits natively and on wasm, a
# fraction of the hash rule's build time on wasm's one thread). Results go to $OUT
# (native-mimi.json, native-lm.json, dawn.json). `scripts/side-by-side.sh run` runs it,
# then Kyutai's reference on the same GPU.
. "$(dirname "$0")/gpu-env.sh"
D=${D:-.bench/dawn}
W=${W:-fast}
N=${1:-200}
SEED=20261129
MIMI=/tmp/mimi-synthetic.safetensors
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2"; }
date -u | tee $OUT/env.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a $OUT/env.txt
unxz $D/node.xz /tmp/node && chmod +x /tmp/node && /tmp/node --version | tee -a $OUT/env.txt
mkdir -p /tmp/webgpu/dist/linux-x64 && cp $D/webgpu/* /tmp/webgpu/ && unxz $D/dawn.node.xz /tmp/webgpu/dist/linux-x64/dawn.node
echo "== synthetic Mimi at the released geometry"
$D/inferencelayer synthetic-checkpoint $MIMI 2>&1 | tail -1
echo "== native bench (Mimi), $N frames"
( time $D/inferencelayer bench --checkpoint $MIMI --frames $N --profile 0 --json > $OUT/native-mimi.json 2> $OUT/native-mimi.err ) 2>&1 | grep real
tail -2 $OUT/native-mimi.err
echo "== native bench-lm --mimi (LM step, full-duplex frame), $N frames, weights $W"
( time $D/inferencelayer bench-lm --frames $N --profile 0 --seed $SEED --weights $W --mimi $MIMI --json > $OUT/native-lm.json 2> $OUT/native-lm.err ) 2>&1 | grep real
tail -2 $OUT/native-lm.err
echo "== wasm benchMimi and benchLm on Dawn, $N frames"
( time timeout 420 /tmp/node $D/bench-dawn.mjs $D/pkg /tmp/webgpu $N 10 --mimi $MIMI --seed $SEED --weights $W \
    --native-mimi $OUT/native-mimi.json --native-lm $OUT/native-lm.json > $OUT/dawn.json 2> $OUT/dawn.err ) 2>&1 | grep real
echo "rc=${PIPESTATUS[0]}"; tail -20 $OUT/dawn.err
date -u
