set terminal pngcairo size 960,600 noenhanced font 'DejaVu Sans,10'
set output '/tmp/flatstate-gpu-run/out/sweep/memory_vs_context.png'
set title 'Per-session memory vs context (state_bytes: linear state or softmax KV blocks)'
set xlabel 'context (tokens)'
set ylabel 'MiB per session'
set grid
set key below
set datafile missing 'NaN'
set logscale x 2
set format x '%.0f'
set logscale y 10
$d0 << EOD
1024 0.0703735
4096 0.0703735
16384 0.0703735
65536 0.0703735
EOD
$d1 << EOD
1024 4.0625
4096 16.0625
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 title 'shakespeare-linear-elu (linear_elu)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 title 'shakespeare-softmax (softmax)'
