#!/bin/sh
# loss_svg.sh LOG.csv OUT.svg - draw the training log (step, lr, train_loss,
# val_nats_per_char, elapsed_s) as an SVG line chart: validation loss in nats
# per character against training time, with the step count along the top.
# Train loss is per token, so it is not on the same axis; it is drawn scaled
# to nats per character with the training split's characters per token,
# passed as CPT (default 2.44, vocabulary 1024).
[ $# -eq 2 ] || { echo "usage: loss_svg.sh LOG.csv OUT.svg" >&2; exit 2; }
awk -F, -v cpt="${CPT:-2.44}" '
NR == 1 { next }
{ n++; step[n] = $1; tr[n] = $3 / cpt; va[n] = $4; t[n] = $5 / 60 }
END {
    if (n < 2) { print "loss_svg: need at least two rows" > "/dev/stderr"; exit 1 }
    W = 640; H = 400; L = 60; R = 20; T = 30; B = 50
    ymin = 1e9; ymax = 0
    for (i = 1; i <= n; i++) {
        if (va[i] < ymin) ymin = va[i]; if (tr[i] < ymin) ymin = tr[i]
        if (va[i] > ymax) ymax = va[i]; if (tr[i] > ymax) ymax = tr[i]
    }
    if (ymax > ymin + 2) ymax = ymin + 2
    ymin = int(ymin * 10) / 10; ymax = int(ymax * 10 + 1) / 10
    tmax = t[n]
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H
    printf "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H
    for (y = ymin; y <= ymax + 1e-9; y += 0.1) {
        py = T + (ymax - y) / (ymax - ymin) * (H - T - B)
        printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, py, W - R, py
        printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", L - 5, py + 4, y
    }
    for (m = 0; m <= tmax; m += (tmax > 30 ? 10 : 5)) {
        px = L + m / tmax * (W - L - R)
        printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", px, H - B + 16, m
    }
    printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">training time (minutes)</text>\n", (W + L) / 2, H - 12
    printf "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">nats per character</text>\n", H / 2, H / 2
    for (s = 0; s < 2; s++) {
        printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", s ? "#c0392b" : "#2c7fb8"
        for (i = 1; i <= n; i++) {
            v = s ? va[i] : tr[i]; if (v > ymax) v = ymax
            printf "%.1f,%.1f ", L + t[i] / tmax * (W - L - R), T + (ymax - v) / (ymax - ymin) * (H - T - B)
        }
        printf "\"/>\n"
    }
    printf "<text x=\"%d\" y=\"20\" fill=\"#c0392b\">validation (whole split)</text>\n", L + 10
    printf "<text x=\"%d\" y=\"20\" fill=\"#2c7fb8\">training (smoothed, per char)</text>\n", L + 200
    printf "<text x=\"%d\" y=\"20\" text-anchor=\"end\">%d steps, final validation %.3f</text>\n", W - R, step[n], va[n]
    print "</svg>"
}' "$1" > "$2"
