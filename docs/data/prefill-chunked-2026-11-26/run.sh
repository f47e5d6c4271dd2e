#!/bin/bash
# usage: runbench2.sh OUTDIR BIN_BEFORE BIN_AFTER ROUNDS
out=$1; before=$2; after=$3; rounds=${4:-3}
mkdir -p $out
{ date -u; lscpu | grep -E '^(Model name|CPU\(s\))'; echo "vector flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|f16c|avx512[a-z_0-9]*|amx_[a-z0-9]+)$' | tr '\n' ' ')"; } > $out/machine.txt
declare -A DIR=([rwkv7-0.1b]=/tmp/rwkvchunk/rwkv7-0.1b [mamba2-130m]=/tmp/fs-mamba2-130m/mamba2-130m)
declare -A GGUF=([rwkv7-0.1b]=/tmp/fs-rwkv7-01b/model-f32.gguf [mamba2-130m]=/tmp/fs-mamba2-130m/model-f32.gguf)
for r in $(seq 1 $rounds); do
  for m in rwkv7-0.1b mamba2-130m; do
    for which in before after; do
      bin=$before; [[ $which == after ]] && bin=$after
      echo "$(date -u +%H:%M:%S) round $r $m $which uptime: $(uptime)" | tee -a $out/log.txt
      FLATSTATE_BENCH_COMPARE_MODELS=${DIR[$m]} FLATSTATE_BENCH_COMPARE_PREFILL=512,4096 \
        $bin --benchmark_filter="Prefill/$m/f32/threads:1/" --benchmark_format=json \
        --benchmark_out=$out/$m-$which.r$r.json --benchmark_out_format=json > $out/$m-$which.r$r.txt 2>&1
    done
    echo "$(date -u +%H:%M:%S) round $r $m llama.cpp uptime: $(uptime)" | tee -a $out/log.txt
    /work/llamacpp/llama.cpp/build/bin/llama-bench -m ${GGUF[$m]} -p 512,4096 -n 0 -t 1 -r 1 -o json > $out/$m-llama.r$r.json 2>>$out/llama.err
  done
done
echo "$(date -u +%H:%M:%S) end uptime: $(uptime)" | tee -a $out/log.txt
