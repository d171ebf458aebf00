# Plots of k8slease-bench's CSV files: gnuplot -e "dir='bench/results'" bench/plots.gp
# Draws handover.png, failover.png, api_load.png, scale.png, http.png and
# crash_report.png in dir, for each CSV file that exists.
if (!exists("dir")) dir = "bench/results"

set terminal pngcairo size 900,560 font "sans,10"
set datafile separator ","
set grid
set key top left

have(f) = int(system("test -s '" . dir . "/" . f . "' && echo 1 || echo 0"))
is(mode) = sprintf("%s", strcol(1)) eq mode

# 1: cumulative distribution of the handover time, one curve per mode
# (watch, poll-only, etcd; a mode without rows, e.g. etcd not installed, draws
# no curve).
if (have("handover.csv")) {
    set output dir . "/handover.png"
    set title "1. Graceful handover: release -> another candidate's OnStartedLeading"
    set xlabel "handover time (ms, log scale)"
    set ylabel "fraction of handovers"
    set logscale x
    set yrange [0:1.02]
    set arrow 1 from 50, graph 0 to 50, graph 1 nohead dashtype 2 lc rgb "red"
    set label 1 "target p99 < 50 ms (watch)" at 50, graph 0.05 offset 0.5,0 tc rgb "red"
    plot dir . "/handover.csv" skip 1 using (is("watch") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "watch", \
         ""                   skip 1 using (is("poll-only") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "poll-only", \
         ""                   skip 1 using (is("etcd") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "etcd", \
         ""                   skip 1 using (is("apiserver-watch") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "kube-apiserver (watch)"
    unset logscale x
    unset arrow 1
    unset label 1
}

# 2: cumulative distribution of the failover time beyond the lease duration
# (etcd: beyond the TTL it granted).
if (have("failover.csv")) {
    set output dir . "/failover.png"
    set title "2. Crash failover: SIGKILL -> new leader's OnStartedLeading, minus lease duration (etcd: TTL)"
    set xlabel "failover time - lease duration (ms)"
    set ylabel "fraction of failovers"
    set yrange [0:1.02]
    set arrow 1 from 100, graph 0 to 100, graph 1 nohead dashtype 2 lc rgb "red"
    set label 1 "target p99 < 100 ms (watch)" at 100, graph 0.05 offset 0.5,0 tc rgb "red"
    plot dir . "/failover.csv" skip 1 using (is("watch") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "watch", \
         ""                   skip 1 using (is("poll-only") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "poll-only", \
         ""                   skip 1 using (is("etcd") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "etcd", \
         ""                   skip 1 using (is("apiserver-watch") ? $3 : NaN):(1) smooth cnormal \
             lw 2 title "kube-apiserver (watch)"
    unset arrow 1
    unset label 1
}

# 3: requests per second by verb, per role and mode.
if (have("api_load.csv")) {
    set output dir . "/api_load.png"
    set title "3. API requests per candidate at steady state"
    set xlabel ""
    set ylabel "requests/s"
    set yrange [0:*]
    set offsets 0, 0, graph 0.1, 0
    set key top right
    set style data histograms
    set style histogram clustered gap 1
    set style fill solid 0.8 border -1
    set boxwidth 0.9
    set xtics nomirror
    plot dir . "/api_load.csv" skip 1 using 3:xticlabels(sprintf("%s %s", strcol(2), strcol(1))) \
             title "get", \
         "" skip 1 using 5 title "watch", \
         "" skip 1 using 6 title "create", \
         "" skip 1 using 7 title "update (PUT)"
    set key top left
    set offsets 0, 0, 0, 0
    unset style data
}

# 4: memory and CPU per election against the number of elections.
if (have("scale.csv")) {
    set output dir . "/scale.png"
    set multiplot layout 1,2 title "4. Elections in one process (one client), retry period 2 s"
    set logscale x
    set xlabel "elections"
    set yrange [0:*]
    set title "RSS per election"
    set ylabel "KB per election"
    set logscale y
    set yrange [*:*]
    plot dir . "/scale.csv" skip 1 using (is("watch") ? $2 : NaN):10 with linespoints lw 2 pt 7 \
             title "test server", \
         ""                 skip 1 using (is("apiserver-watch") ? $2 : NaN):10 with linespoints \
             lw 2 pt 5 title "kube-apiserver", \
         8 dashtype 2 lc rgb "red" title "target < 8 KB"
    set title "CPU per renewal"
    set ylabel "us of process CPU per successful renewal"
    plot dir . "/scale.csv" skip 1 using (is("watch") ? $2 : NaN):13 with linespoints lw 2 pt 7 \
             title "test server", \
         ""                 skip 1 using (is("apiserver-watch") ? $2 : NaN):13 with linespoints \
             lw 2 pt 5 title "kube-apiserver", \
         30 dashtype 2 lc rgb "red" title "target < 30 us"
    unset multiplot
}

# 6: what an election costs against the number started at once (HTTP/2):
# CPU per renewal, and system calls and loop wake-ups per renewal.
h2(m) = strcol(1) eq m && strcol(2) eq "HTTP/2"
if (have("http.csv")) {
    set output dir . "/http.png"
    set multiplot layout 1,2 title "6. Cost per election, N started at once in one process, 15/10/2"
    set logscale x
    set xrange [0.7:15000]
    set xlabel "elections"
    set logscale y
    set yrange [*:*]
    set title "CPU per renewal"
    set ylabel "us of process CPU per renewal"
    plot dir . "/http.csv" skip 1 using (h2("apiserver-watch") ? $3 : NaN):8 with linespoints \
             lw 2 pt 5 title "kube-apiserver", \
         ""                skip 1 using (h2("watch") ? $3 : NaN):8 with linespoints lw 2 pt 7 \
             title "test server", \
         "+" using (1):(100) with points pt 2 ps 2 lc rgb "red" title "target at 1: <= 100 us", \
         "+" using (1000):(50) with points pt 2 ps 2 lc rgb "red" title "target at 1,000: <= 50 us"
    set title "System calls and loop wake-ups per renewal"
    set ylabel "per renewal"
    plot dir . "/http.csv" skip 1 using (h2("apiserver-watch") ? $3 : NaN):17 with linespoints \
             lw 2 pt 5 title "syscalls, kube-apiserver", \
         ""                skip 1 using (h2("watch") ? $3 : NaN):17 with linespoints lw 2 pt 7 \
             title "syscalls, test server", \
         ""                skip 1 using (h2("apiserver-watch") ? $3 : NaN):14 with linespoints \
             lw 2 pt 4 dashtype 2 title "wake-ups, kube-apiserver", \
         ""                skip 1 using (h2("watch") ? $3 : NaN):14 with linespoints lw 2 pt 6 \
             dashtype 2 title "wake-ups, test server"
    unset multiplot
    unset logscale x
    unset logscale y
    set xrange [*:*]
}

# 8: every trial's time from SIGKILL to the follower's election, one row
# per server, timing and evidence (the kubelet's report 1 s after the kill,
# or expiry).
sel(m, t, e) = strcol(1) eq m && strcol(2) eq t && strcol(3) eq e
if (have("crash_report.csv")) {
    set output dir . "/crash_report.png"
    set title "8. Crash failover: SIGKILL -> the follower's OnStartedLeading"
    set xlabel "failover time (s, log scale)"
    set ylabel ""
    set logscale x
    set xrange [0.5:30]
    set yrange [0.5:8.5]
    set ytics ("test server, 15/10/2, report 1 s after" 8, "test server, 15/10/2, expiry" 7, \
               "test server, 5/3/1, report 1 s after" 6, "test server, 5/3/1, expiry" 5, \
               "kube-apiserver, 15/10/2, report 1 s after" 4, "kube-apiserver, 15/10/2, expiry" 3, \
               "kube-apiserver, 5/3/1, report 1 s after" 2, "kube-apiserver, 5/3/1, expiry" 1)
    set key off
    set arrow 1 from 1.5, graph 0 to 1.5, graph 1 nohead dashtype 2 lc rgb "red"
    set label 1 "target p99 < 1.5 s with the report" at 1.5, graph 0.95 offset 0.5,0 tc rgb "red"
    f = dir . "/crash_report.csv"
    plot for [k = 1:8] f skip 1 using \
        (sel(k <= 4 ? "apiserver-watch" : "watch", (k - 1) % 4 < 2 ? "5/3/1" : "15/10/2", \
             k % 2 == 0 ? "report" : "expiry") ? $5/1000 : NaN):(k) with points pt 7 ps 1 lc k
    unset logscale x
    set xrange [*:*]
    set yrange [*:*]
    set ytics autofreq
    set key top left
    unset arrow 1
    unset label 1
}
