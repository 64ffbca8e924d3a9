set terminal svg size 900,500 dynamic enhanced font 'sans,12' background rgb 'white'
set output 'intervene_per_point.svg'
set title 'Effect of ablating each source family, per routing point (wrapped standard)'
set xlabel 'routing point (even: attention, odd: MLP, last: final aggregation)'
set ylabel 'mean KL [nats]'
set logscale y
set format y '10^{%L}'
set yrange [1e-5:*]
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set key top left
set grid y
plot 'intervene_per_point.dat' using 2:xtic(1) title 'embedding', '' using 3 title 'current', '' using 4 title 'history'
