set terminal svg size 800,500 dynamic enhanced font 'sans,12' background rgb 'white'
set output 'intervene_mass_vs_kl.svg'
set title 'Routing mass vs causal effect (full)'
set xlabel 'mean routing mass of the family'
set ylabel 'mean KL(p || p_{ablated}) [nats]'
set logscale y
set format y '10^{%L}'
set key top left
set grid
plot for [f=0:2] 'intervene_mass_vs_kl.dat' using ($1==f ? $4 : 1/0):5:6:7 with yerrorbars pt 7 ps 0.8 title word('embedding current history', f+1)
